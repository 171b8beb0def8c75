//! Shared application values that handlers get back by type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// A map from type to one shared value of that type.
#[derive(Clone, Default)]
pub(crate) struct Data(Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Data {
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref())
    }

    /// A copy of the map with `value` added (replacing one of the same type).
    pub fn with<T: Send + Sync + 'static>(&self, value: T) -> Self {
        let mut map = (*self.0).clone();
        map.insert(TypeId::of::<T>(), Arc::new(value));
        Data(Arc::new(map))
    }
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Data({} values)", self.0.len())
    }
}
