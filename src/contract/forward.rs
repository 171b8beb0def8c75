//! One implementation of a contract trait by calling another's, method by
//! method, generated from the trait's method list: no forwarding written by
//! hand per method.
//!
//! Each trait's file keeps the list of its methods beside it
//! (`queues_methods!`, `inspect_methods!`, `admin_methods!`, `topics_methods!`,
//! `backend_methods!`), as signatures without `&self`. Invoking a list with
//! `impl Trait for Type, |self| ...;` hands it to [`forward!`], which writes the
//! impl: either every method calls the trait on one inner value
//! (`|self| &self.inner`), or on what a dispatch macro picks
//! (`|self| via pick!`, called as `pick!(self, Trait::method(args) .await)`;
//! [`AnyBackend`](crate::backend::any::AnyBackend) matches on its variant so).
//! A method the list misses fails to compile where the trait has no default;
//! one with a default must be listed all the same when the inner value
//! overrides it (as `Backend::real_time`), or the outer type would quietly run
//! the default: add a method to its trait's list when you add it to the trait.

/// Writes `impl $Trait for $ty` from a method list (see the module docs).
macro_rules! forward {
    (
        $(#[$attr:meta])*
        impl $Trait:ident for $ty:ty, |$self:ident| via $via:ident!;
        $(async fn $name:ident($($arg:ident: $argty:ty),* $(,)?) -> $ret:ty;)*
        $(fn $sname:ident() -> $sret:ty;)*
    ) => {
        $(#[$attr])*
        impl $Trait for $ty {
            $(
                async fn $name(&$self, $($arg: $argty),*) -> $ret {
                    $via!($self, $Trait::$name($($arg),*) .await)
                }
            )*
            $(
                fn $sname(&$self) -> $sret {
                    $via!($self, $Trait::$sname())
                }
            )*
        }
    };
    (
        $(#[$attr:meta])*
        impl $Trait:ident for $ty:ty, |$self:ident| $inner:expr;
        $(async fn $name:ident($($arg:ident: $argty:ty),* $(,)?) -> $ret:ty;)*
        $(fn $sname:ident() -> $sret:ty;)*
    ) => {
        $(#[$attr])*
        impl $Trait for $ty {
            $(
                async fn $name(&$self, $($arg: $argty),*) -> $ret {
                    $Trait::$name($inner, $($arg),*).await
                }
            )*
            $(
                fn $sname(&$self) -> $sret {
                    $Trait::$sname($inner)
                }
            )*
        }
    };
}
pub(crate) use forward;
