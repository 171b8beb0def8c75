//! The code `#[derive(Job)]` writes.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;
use syn::ext::IdentExt;

use crate::attr::{self, Errors};
use crate::serde_name;

pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    if !input.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &input.generics,
            "#[derive(Job)] does not support generic types: a stored job must name one concrete type",
        ));
    }
    if let syn::Data::Union(u) = &input.data {
        errors.push(syn::Error::new(
            u.union_token.span,
            "#[derive(Job)] supports structs and enums, not unions",
        ));
    }
    let attrs = attr::parse(&input.attrs, &mut errors);
    check_keyed(input, &attrs, &mut errors);
    let shape_ok = input.generics.params.is_empty() && !matches!(input.data, syn::Data::Union(_));
    if let Err(e) = errors.finish() {
        // With only a bad attribute, still define the job type with the default
        // options, so the user's `impl Job` does not also fail with a misleading
        // "has no job definition" error: the attribute's error is the only one.
        let mut out = e.into_compile_error();
        if shape_ok {
            let ident = &input.ident;
            let name = ident.unraw().to_string();
            let output = attrs
                .output
                .as_ref()
                .map_or_else(|| quote!(()), |t| quote!(#t));
            out.extend(quote! {
                impl ::redjob::job::JobSpec for #ident {
                    type Output = #output;
                    const NAME: &'static str = #name;
                    const OPTIONS: ::redjob::job::JobOptions = ::redjob::job::JobOptions::DEFAULT;
                    const __DERIVE_JOB: ::redjob::__private::Derived = ::redjob::__private::DERIVED;
                }
            });
        }
        return Ok(out);
    }

    let ident = &input.ident;
    let name = attrs
        .name
        .map_or_else(|| ident.unraw().to_string(), |s| s.value());
    let mut sets = Vec::new();
    if let Some(q) = attrs.queue {
        sets.push(quote!(o.queue = #q;));
    }
    if let Some(n) = attrs.max_attempts {
        sets.push(quote!(o.max_attempts = #n;));
    }
    if let Some(ms) = attrs.timeout_ms {
        sets.push(quote!(o.timeout = ::core::time::Duration::from_millis(#ms);));
    }
    if let Some(ms) = attrs.backoff_ms {
        sets.push(quote!(o.backoff = ::core::time::Duration::from_millis(#ms);));
    }
    if let Some(p) = attrs.priority {
        sets.push(quote!(o.priority = #p;));
    }
    // `unique_for` or `unique_until = "start"` alone implies `unique` (keep);
    // `unique_until = "done"` alone is refused (attr.rs)
    let unique = attrs
        .unique
        .or(attrs.unique_for_ms.map(|_| "Keep"))
        .or(attrs.unique_until.filter(|u| *u == "Start").map(|_| "Keep"))
        .map(|v| syn::Ident::new(v, proc_macro2::Span::call_site()));
    if let Some(v) = unique {
        sets.push(
            quote!(o.unique = ::core::option::Option::Some(::redjob::queue::OnDuplicate::#v);),
        );
    }
    if let Some(ms) = attrs.unique_for_ms {
        sets.push(quote!(o.unique_for = ::core::option::Option::Some(::core::time::Duration::from_millis(#ms));));
    }
    if let Some(v) = attrs.unique_until {
        let v = syn::Ident::new(v, proc_macro2::Span::call_site());
        sets.push(quote!(o.unique_until = ::redjob::queue::UniqueUntil::#v;));
    }
    let mut key_fn = quote!();
    if let Some((field, (member, serialized))) = attrs
        .concurrency_key
        .as_ref()
        .and_then(|f| key_field(input, f).ok().map(|m| (f, m)))
    {
        // the name serde writes the field under (`type` for `r#type`, its
        // `rename`, its container's `rename_all`), which the CLI looks up in
        // a job's JSON arguments
        let field = syn::LitStr::new(&serialized, field.span());
        sets.push(quote!(o.concurrency_key = ::core::option::Option::Some(#field);));
        key_fn = quote! {
            fn concurrency_key(&self) -> ::redjob::Result<::core::option::Option<::std::string::String>> {
                ::redjob::job::key_of_value(#name, #field, &self.#member).map(::core::option::Option::Some)
            }
        };
    }
    if let Some(n) = attrs.per_key {
        sets.push(quote!(o.per_key = #n;));
    }
    // the handler's result: encoded when declared, none for `()`
    let (output, perform) = match &attrs.output {
        Some(t) => (
            quote!(#t),
            quote! {
                ::std::boxed::Box::pin(async move {
                    let out = <Self as ::redjob::Job>::perform(self, ctx).await?;
                    ::redjob::__private::encode_output(&out).map(::core::option::Option::Some)
                })
            },
        ),
        None => (
            quote!(()),
            quote! {
                ::std::boxed::Box::pin(async move {
                    <Self as ::redjob::Job>::perform(self, ctx).await?;
                    ::core::result::Result::Ok(::core::option::Option::None)
                })
            },
        ),
    };
    Ok(quote! {
        const _: () = {
            use ::redjob::__private::typetag;

            impl ::redjob::job::JobSpec for #ident {
                type Output = #output;
                const NAME: &'static str = #name;
                const OPTIONS: ::redjob::job::JobOptions = {
                    #[allow(unused_mut)]
                    let mut o = ::redjob::job::JobOptions::DEFAULT;
                    #(#sets)*
                    o
                };
                const __DERIVE_JOB: ::redjob::__private::Derived = ::redjob::__private::DERIVED;
                #key_fn
            }

            // the derive's own limit agrees with the library's
            const _: () = ::core::assert!(
                <#ident as ::redjob::job::JobSpec>::OPTIONS.max_attempts <= ::redjob::job::MAX_ATTEMPTS
            );
            const _: () = ::core::assert!(
                <#ident as ::redjob::job::JobSpec>::OPTIONS.priority >= ::redjob::queue::MIN_PRIORITY
                    && <#ident as ::redjob::job::JobSpec>::OPTIONS.priority <= ::redjob::queue::MAX_PRIORITY
            );
            const _: () = ::core::assert!(
                <#ident as ::redjob::job::JobSpec>::OPTIONS.timeout.as_secs() <= ::redjob::worker::MAX_DELAY.as_secs()
                    && <#ident as ::redjob::job::JobSpec>::OPTIONS.backoff.as_secs() <= ::redjob::worker::MAX_DELAY.as_secs()
            );

            ::redjob::__private::inventory::submit! {
                ::redjob::job::Registration {
                    name: #name,
                    type_path: ::core::concat!(::core::module_path!(), "::", ::core::stringify!(#ident)),
                    queue: <#ident as ::redjob::job::JobSpec>::OPTIONS.queue,
                    options: <#ident as ::redjob::job::JobSpec>::OPTIONS,
                }
            }

            // decoded without typetag's dynamic dispatch where the envelope
            // allows (redjob::job::decode)
            ::redjob::__private::inventory::submit! {
                ::redjob::__private::Decoder {
                    name: #name,
                    decode: ::redjob::__private::decode_dyn::<#ident>,
                }
            }

            #[typetag::serde(name = #name)]
            impl ::redjob::__private::DynJob for #ident {
                fn job_name(&self) -> &'static str {
                    #name
                }
                fn job_options(&self) -> ::redjob::job::JobOptions {
                    <Self as ::redjob::job::JobSpec>::OPTIONS
                }
                fn perform_dyn<'a>(
                    &'a self,
                    ctx: &'a ::redjob::JobContext,
                ) -> ::redjob::__private::BoxFuture<'a, ::core::result::Result<::core::option::Option<::std::vec::Vec<u8>>, ::redjob::JobError>> {
                    #perform
                }
            }
        };
    })
}

/// A concurrency key names a field of a struct with named fields; `per_key`
/// needs a key; a keyed job runs at priority 0 and is not unique.
fn check_keyed(input: &DeriveInput, attrs: &attr::JobAttrs, errors: &mut Errors) {
    let Some(field) = &attrs.concurrency_key else {
        if attrs.per_key.is_some() {
            errors.push(syn::Error::new(
                proc_macro2::Span::call_site(),
                "`per_key` needs a `concurrency_key`",
            ));
        }
        return;
    };
    if let Err(e) = key_field(input, field) {
        errors.push(e);
    }
    if attrs.priority.is_some_and(|p| p != 0) {
        errors.push(syn::Error::new(
            field.span(),
            "a job with a concurrency key runs at priority 0",
        ));
    }
    if attrs.unique.is_some()
        || attrs.unique_for_ms.is_some()
        || attrs.unique_until == Some("Start")
    {
        errors.push(syn::Error::new(
            field.span(),
            "a job with a concurrency key cannot also be unique",
        ));
    }
}

/// The field of a struct with named fields that `concurrency_key = "name"`
/// names, and the name serde writes it under in the job's arguments. The
/// field is named by its Rust name (`type` or `r#type` for a field `r#type`)
/// or else by its serialized name (`accountId` under `rename_all =
/// "camelCase"`). Refused when no field has the name, or when serde's
/// attributes leave the field without a name of its own in the arguments
/// (`flatten`, `skip`, `transparent`, `into`) or write it with a function
/// of their own (`with`, `serialize_with`).
fn key_field<'a>(
    input: &'a DeriveInput,
    name: &syn::LitStr,
) -> syn::Result<(&'a syn::Ident, String)> {
    let no_field = || {
        syn::Error::new(
            name.span(),
            format!(
                "concurrency_key names no field: `{}` must be a field of this struct (with named fields), by its Rust name or the name serde writes it under",
                name.value()
            ),
        )
    };
    let syn::Data::Struct(syn::DataStruct {
        fields: syn::Fields::Named(named),
        ..
    }) = &input.data
    else {
        return Err(no_field());
    };
    let container = serde_name::container(&input.attrs);
    let fields: Vec<_> = named
        .named
        .iter()
        .filter_map(|f| Some((f.ident.as_ref()?, serde_name::field(&container, f))))
        .collect();
    let wanted = name.value();
    let by_rust = fields
        .iter()
        .find(|(i, _)| **i == wanted || i.unraw() == wanted);
    let by_serde = fields.iter().find(|(_, n)| n.name == wanted);
    if let (Some((a, _)), Some((b, _))) = (by_rust, by_serde)
        && a != b
    {
        return Err(syn::Error::new(
            name.span(),
            format!(
                "concurrency_key `{wanted}` is ambiguous: the field `{a}` is so named in Rust, and serde writes the field `{b}` under that name; name the one meant by its other name"
            ),
        ));
    }
    let (ident, named) = by_rust.or(by_serde).ok_or_else(no_field)?;
    if let Some(why) = named.refused {
        return Err(syn::Error::new(
            name.span(),
            format!("concurrency_key cannot name the field `{ident}`: {why}"),
        ));
    }
    Ok((ident, named.name.clone()))
}
