//! Shared application values that handlers get back by type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use crate::{Error, Result};

/// One value with its type's name (for the error that lists what is held).
#[derive(Clone)]
struct Entry {
    type_name: &'static str,
    value: Arc<dyn Any + Send + Sync>,
}

/// A map from type to one shared value of that type.
#[derive(Clone, Default)]
pub(crate) struct Data(Arc<HashMap<TypeId, Entry>>);

impl Data {
    /// The value of type `T`, else the one of type `Arc<T>` (seen through its
    /// `Arc`: a value shared as `.data(Arc::new(pool))` is found by
    /// `data::<Pool>()` as well as by `data::<Arc<Pool>>()`).
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        let exact = |id: TypeId| self.0.get(&id).map(|e| &*e.value);
        exact(TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
            .or_else(|| {
                exact(TypeId::of::<Arc<T>>())
                    .and_then(|v| v.downcast_ref::<Arc<T>>())
                    .map(|a| &**a)
            })
    }

    /// [`get`](Self::get), or [`Error::MissingData`] naming `T` and the types
    /// held.
    pub fn require<T: Send + Sync + 'static>(&self) -> Result<&T> {
        self.get::<T>().ok_or_else(|| Error::MissingData {
            type_name: std::any::type_name::<T>(),
            held: self.0.values().map(|e| e.type_name).collect(),
        })
    }

    /// A copy of the map with `value` added (replacing one of the same type).
    pub fn with<T: Send + Sync + 'static>(&self, value: T) -> Self {
        let mut map = (*self.0).clone();
        let entry = Entry {
            type_name: std::any::type_name::<T>(),
            value: Arc::new(value),
        };
        map.insert(TypeId::of::<T>(), entry);
        Data(Arc::new(map))
    }
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Data({} values)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Pool(u32);

    #[test]
    fn a_value_in_an_arc_is_found_by_its_type_and_the_exact_type_wins() {
        let data = Data::default().with(Arc::new(Pool(1)));
        assert_eq!(data.get::<Pool>().map(|p| p.0), Some(1));
        assert_eq!(data.get::<Arc<Pool>>().map(|p| p.0), Some(1));
        let both = data.with(Pool(2));
        assert_eq!(both.get::<Pool>().map(|p| p.0), Some(2));
        assert_eq!(both.get::<Arc<Pool>>().map(|p| p.0), Some(1));
        // the other way round is not served: a `Pool` is no `Arc<Pool>`
        assert!(Data::default().with(Pool(3)).get::<Arc<Pool>>().is_none());
    }

    #[test]
    fn a_miss_names_the_types_held() {
        let data = Data::default().with(Arc::new(Pool(1))).with(7u64);
        let err = data.require::<String>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "no value of type String was given to the worker (it holds: Arc<Pool>, u64): add it with `Worker::builder(..).data(value)`"
        );
        let err = Data::default().require::<Pool>().unwrap_err();
        assert!(err.to_string().contains("(it holds no values)"), "{err}");
    }
}
