//! One shared copy of each distinct value among many cached objects: a workload's thousand
//! pods hold one copy of their labels or tolerations, not a thousand (docs/architecture.md, compact
//! caches). Entries no object holds any more are swept as the table grows, so its size follows
//! the distinct values alive.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Entries before the first sweep.
const FIRST_SWEEP: usize = 64;

/// The shared copies of values of type `T`.
pub struct Interner<T: ?Sized> {
    table: Mutex<Table<T>>,
}

struct Table<T: ?Sized> {
    values: HashSet<Arc<T>>,
    /// Entries after the last sweep; the next sweep comes once the table has doubled.
    swept_to: usize,
}

impl<T: ?Sized + Hash + Eq> Default for Interner<T> {
    fn default() -> Self {
        Self {
            table: Mutex::new(Table {
                values: HashSet::new(),
                swept_to: 0,
            }),
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// The shared copy equal to `value`, made from it (`Arc::from`) if there is none.
    pub fn get<V>(&self, value: V) -> Arc<T>
    where
        V: std::borrow::Borrow<T>,
        Arc<T>: From<V>,
    {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(shared) = table.values.get(value.borrow()) {
            return shared.clone();
        }
        let shared = Arc::<T>::from(value);
        // The table's own handle keeps a value only until the first sweep after the last
        // object let go of it.
        table.values.insert(shared.clone());
        if table.values.len() > 2 * table.swept_to.max(FIRST_SWEEP) {
            table.values.retain(|value| Arc::strong_count(value) > 1);
            table.swept_to = table.values.len();
        }
        shared
    }

    /// Distinct values held now (swept ones excluded only after a sweep).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn equal_values_share_one_copy() {
        let interner: Interner<BTreeMap<String, String>> = Interner::default();
        let labels = |app: &str| BTreeMap::from([("app".to_owned(), app.to_owned())]);
        let (a, b, c) = (
            interner.get(labels("web")),
            interner.get(labels("web")),
            interner.get(labels("db")),
        );
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(interner.len(), 2);
    }

    #[test]
    fn slices_are_shared_too() {
        let interner: Interner<[u32]> = Interner::default();
        let a = interner.get(vec![1, 2]);
        let b = interner.get(vec![1, 2]);
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn values_no_one_holds_are_swept_as_the_table_grows() {
        let interner: Interner<String> = Interner::default();
        let kept = interner.get("kept".to_owned());
        for i in 0..10 * FIRST_SWEEP {
            drop(interner.get(format!("gone-{i}")));
        }
        assert!(
            interner.len() <= 2 * FIRST_SWEEP + 1,
            "{} entries left",
            interner.len()
        );
        assert!(Arc::ptr_eq(&kept, &interner.get("kept".to_owned())));
    }
}
