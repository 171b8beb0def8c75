//! `#[derive(Job)]` for redjob. Use it through `redjob::Job`; see redjob's docs.

mod attr;
mod event;
mod expand;

use proc_macro::TokenStream;

/// Derives `redjob::job::JobSpec` and registers the type as a job. See `redjob::Job`.
#[proc_macro_derive(Job, attributes(job))]
pub fn derive_job(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `redjob::topic::Event`. See `redjob::topic::Event`.
#[proc_macro_derive(Event, attributes(event))]
pub fn derive_event(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    event::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
