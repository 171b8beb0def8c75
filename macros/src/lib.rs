//! The derive macros of [redjob](https://docs.rs/redjob): `#[derive(Job)]`
//! makes a serde struct a typed background job (its name, queue, priority,
//! retries, timeout, unique key, ...: `#[job(...)]`), and
//! `#[derive(Event)]` makes one an event of a topic (`#[event(...)]`). Both
//! register the type in redjob's job registry at link time.
//!
//! Use them through `redjob` (`redjob::Job`, `redjob::topic::Event`), not
//! from this crate: the code they generate names `redjob`'s items, and every
//! attribute is documented there, with examples that compile. A misspelt or
//! misplaced attribute is a compile error that names it.

mod attr;
mod event;
mod expand;
mod serde_name;

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
