//! `#[derive(Event)]`: parsing `#[event(...)]` and the code it writes.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{DeriveInput, Expr, ExprLit, Lit, LitStr};

use crate::attr::{self, Errors, attempts, duration, set, string, ungroup};

#[derive(Default)]
struct EventAttrs {
    name: Option<LitStr>,
    topic: Option<LitStr>,
    max_len: Option<u64>,
    unbounded: Option<()>,
    max_age_ms: Option<u64>,
    refuse: Option<bool>,
    max_attempts: Option<u32>,
    timeout_ms: Option<u64>,
    backoff_ms: Option<u64>,
}

fn max_len(e: &Expr) -> syn::Result<u64> {
    match ungroup(e) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => match i.base10_parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(syn::Error::new(
                i.span(),
                "max_len must be a positive integer; use `unbounded` for no limit",
            )),
        },
        _ => Err(syn::Error::new(
            e.span(),
            "expected an integer, e.g. `max_len = 100000`",
        )),
    }
}

fn when_full(s: LitStr) -> syn::Result<bool> {
    match s.value().as_str() {
        "trim" => Ok(false),
        "refuse" => Ok(true),
        _ => Err(syn::Error::new(
            s.span(),
            "when_full must be \"trim\" (drop the oldest events) or \"refuse\"",
        )),
    }
}

fn parse(input: &DeriveInput, errors: &mut Errors) -> EventAttrs {
    let mut out = EventAttrs::default();
    for a in input.attrs.iter().filter(|a| a.path().is_ident("event")) {
        let res = a.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            if key == "unbounded" && !meta.input.peek(syn::Token![=]) {
                let at = Expr::Verbatim(quote!(unbounded));
                set(&mut out.unbounded, Ok(()), &at, errors);
                return Ok(());
            }
            let value: Expr = meta.value()?.parse()?;
            let dur = |v: &Expr| string(v).and_then(|s| duration(&s));
            match key.as_str() {
                "name" => set(&mut out.name, string(&value).and_then(attr::name), &value, errors),
                "topic" => set(&mut out.topic, string(&value).and_then(attr::queue), &value, errors),
                "max_len" => set(&mut out.max_len, max_len(&value), &value, errors),
                "max_age" => set(&mut out.max_age_ms, dur(&value), &value, errors),
                "when_full" => set(&mut out.refuse, string(&value).and_then(when_full), &value, errors),
                "max_attempts" => set(&mut out.max_attempts, attempts(&value), &value, errors),
                "timeout" => set(&mut out.timeout_ms, dur(&value), &value, errors),
                "backoff" => set(&mut out.backoff_ms, dur(&value), &value, errors),
                _ => errors.push(syn::Error::new(
                    meta.path.span(),
                    format!(
                        "unknown event attribute `{key}`; expected one of `name`, `topic`, `max_len`, `unbounded`, `max_age`, `when_full`, `max_attempts`, `timeout`, `backoff`"
                    ),
                )),
            }
            Ok(())
        });
        if let Err(e) = res {
            errors.push(e);
        }
    }
    if out.unbounded.is_some() && (out.max_len.is_some() || out.refuse == Some(true)) {
        errors.push(syn::Error::new(
            input.ident.span(),
            "`unbounded` cannot go with `max_len` or `when_full = \"refuse\"`",
        ));
    }
    out
}

pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    if !input.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &input.generics,
            "#[derive(Event)] does not support generic types: an event type names one concrete type",
        ));
    }
    let a = parse(input, &mut errors);
    if let Err(e) = errors.finish() {
        // With only a bad attribute, still define the event with the default
        // options, so the code that publishes or subscribes to it does not
        // also fail with a misleading "not an Event": the attribute's error
        // is the only one (as `#[derive(Job)]` does).
        let mut out = e.into_compile_error();
        if input.generics.params.is_empty() {
            let ident = &input.ident;
            let name = ident.unraw().to_string();
            out.extend(quote! {
                impl ::redjob::topic::Event for #ident {
                    const NAME: &'static str = #name;
                    const OPTIONS: ::redjob::topic::EventOptions = ::redjob::topic::EventOptions::DEFAULT;
                }
            });
        }
        return Ok(out);
    }
    let ident = &input.ident;
    let name = a
        .name
        .map_or_else(|| ident.unraw().to_string(), |s| s.value());
    let mut sets = Vec::new();
    if let Some(t) = a.topic {
        sets.push(quote!(o.topic = #t;));
    }
    if let Some(n) = a.max_len {
        sets.push(quote!(o.max_len = ::core::option::Option::Some(#n);));
    }
    if a.unbounded.is_some() {
        sets.push(quote!(o.max_len = ::core::option::Option::None;));
    }
    if let Some(ms) = a.max_age_ms {
        sets.push(quote!(o.max_age = ::core::option::Option::Some(::core::time::Duration::from_millis(#ms));));
    }
    if a.refuse == Some(true) {
        sets.push(quote!(o.when_full = ::redjob::topic::WhenFull::Refuse;));
    }
    if let Some(n) = a.max_attempts {
        sets.push(quote!(o.max_attempts = #n;));
    }
    if let Some(ms) = a.timeout_ms {
        sets.push(quote!(o.timeout = ::core::time::Duration::from_millis(#ms);));
    }
    if let Some(ms) = a.backoff_ms {
        sets.push(quote!(o.backoff = ::core::time::Duration::from_millis(#ms);));
    }
    Ok(quote! {
        impl ::redjob::topic::Event for #ident {
            const NAME: &'static str = #name;
            const OPTIONS: ::redjob::topic::EventOptions = {
                #[allow(unused_mut)]
                let mut o = ::redjob::topic::EventOptions::DEFAULT;
                #(#sets)*
                o
            };
        }
    })
}
