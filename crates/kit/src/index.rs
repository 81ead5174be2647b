//! A reflector store with secondary indexes, both kept by the same watch events, so a
//! controller finds "the objects with this key" (an owner, a label, the data an object uses)
//! without scanning or copying the whole cache.
//!
//! Contract:
//! - [`store`] gives an [`Indexed`] reader and an [`IndexedWriter`]. The writer applies each
//!   watcher event to kube's reflector store and to the indexes under one lock, with kube's
//!   semantics: `Apply` moves the object from its old keys to its new ones, `Delete` drops it,
//!   and a re-list (`Init` … `InitDone`) builds a fresh index that is swapped in together with
//!   the store. A lookup holds the same lock, so it never sees one updated and not the other.
//! - [`reflect`] applies every event of a watch stream before passing it on: whatever is
//!   derived from the event downstream (a trigger, a wake-up of another object) runs against
//!   a store and indexes that already include it.
//! - `keys(obj)` names the keys of an object (none is fine: it is then only in the store).
//!   Lookups ([`Indexed::get`], [`Indexed::get_any`]) cost what the objects under the keys
//!   cost, never what the whole store costs, and return them sorted by namespace and name.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock};

use futures::{Stream, TryStreamExt};
use kube::Resource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

type KeysFn<K, Key> = Arc<dyn Fn(&K) -> Vec<Key> + Send + Sync>;

struct Maps<K: Resource<DynamicType = ()>, Key> {
    by_key: HashMap<Key, HashSet<ObjectRef<K>>>,
    keys_of: HashMap<ObjectRef<K>, Vec<Key>>,
}

impl<K: Resource<DynamicType = ()>, Key: Hash + Eq + Clone> Default for Maps<K, Key> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            keys_of: HashMap::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>, Key: Hash + Eq + Clone> Maps<K, Key> {
    fn insert(&mut self, r: ObjectRef<K>, keys: Vec<Key>) {
        self.remove(&r);
        if keys.is_empty() {
            return;
        }
        for k in &keys {
            self.by_key.entry(k.clone()).or_default().insert(r.clone());
        }
        self.keys_of.insert(r, keys);
    }

    fn remove(&mut self, r: &ObjectRef<K>) {
        let Some(keys) = self.keys_of.remove(r) else {
            return;
        };
        for k in keys {
            if let Some(set) = self.by_key.get_mut(&k) {
                set.remove(r);
                if set.is_empty() {
                    self.by_key.remove(&k);
                }
            }
        }
    }
}

/// The reader: the reflector store and its indexes.
pub struct Indexed<K: Resource<DynamicType = ()> + 'static, Key> {
    store: Store<K>,
    maps: Arc<RwLock<Maps<K, Key>>>,
}

impl<K: Resource<DynamicType = ()> + 'static, Key> Clone for Indexed<K, Key> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            maps: self.maps.clone(),
        }
    }
}

impl<K, Key> Indexed<K, Key>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    Key: Hash + Eq + Clone,
{
    /// The reflector store (by name; readiness).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The object `r` from the store.
    pub fn get_ref(&self, r: &ObjectRef<K>) -> Option<Arc<K>> {
        self.store.get(r)
    }

    /// The objects under `key`, sorted by namespace and name.
    pub fn get(&self, key: &Key) -> Vec<Arc<K>> {
        self.get_any(std::slice::from_ref(key))
    }

    /// The objects under any of `keys` (each once), sorted by namespace and name.
    pub fn get_any(&self, keys: &[Key]) -> Vec<Arc<K>> {
        let maps = self.maps.read().unwrap_or_else(PoisonError::into_inner);
        let mut refs: Vec<&ObjectRef<K>> = Vec::new();
        let mut seen: HashSet<&ObjectRef<K>> = HashSet::new();
        for key in keys {
            for r in maps.by_key.get(key).into_iter().flatten() {
                if seen.insert(r) {
                    refs.push(r);
                }
            }
        }
        refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        refs.into_iter().filter_map(|r| self.store.get(r)).collect()
    }

    /// The references under `key`, sorted by namespace and name.
    pub fn refs(&self, key: &Key) -> Vec<ObjectRef<K>> {
        let maps = self.maps.read().unwrap_or_else(PoisonError::into_inner);
        let mut refs: Vec<ObjectRef<K>> = maps
            .by_key
            .get(key)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        refs
    }

    /// How many objects are under `key`.
    pub fn count(&self, key: &Key) -> usize {
        let maps = self.maps.read().unwrap_or_else(PoisonError::into_inner);
        maps.by_key.get(key).map_or(0, HashSet::len)
    }
}

/// The writer: applies watcher events to the store and the indexes together.
pub struct IndexedWriter<K: Resource<DynamicType = ()> + Clone + 'static, Key> {
    writer: Writer<K>,
    maps: Arc<RwLock<Maps<K, Key>>>,
    relist: Option<Maps<K, Key>>,
    keys: KeysFn<K, Key>,
}

impl<K, Key> IndexedWriter<K, Key>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    Key: Hash + Eq + Clone,
{
    /// Applies one watcher event (see the module contract).
    pub fn apply(&mut self, event: &watcher::Event<K>) {
        let mut maps = self.maps.write().unwrap_or_else(PoisonError::into_inner);
        self.writer.apply_watcher_event(event);
        match event {
            watcher::Event::Apply(obj) => maps.insert(ObjectRef::from_obj(obj), (self.keys)(obj)),
            watcher::Event::Delete(obj) => maps.remove(&ObjectRef::from_obj(obj)),
            watcher::Event::Init => self.relist = Some(Maps::default()),
            watcher::Event::InitApply(obj) => self
                .relist
                .get_or_insert_with(Maps::default)
                .insert(ObjectRef::from_obj(obj), (self.keys)(obj)),
            watcher::Event::InitDone => *maps = self.relist.take().unwrap_or_default(),
        }
    }
}

/// A store indexed by `keys` (see the module contract).
pub fn store<K, Key>(
    keys: impl Fn(&K) -> Vec<Key> + Send + Sync + 'static,
) -> (Indexed<K, Key>, IndexedWriter<K, Key>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    Key: Hash + Eq + Clone,
{
    let writer = Writer::<K>::default();
    let maps = Arc::new(RwLock::new(Maps::default()));
    let reader = Indexed {
        store: writer.as_reader(),
        maps: maps.clone(),
    };
    let writer = IndexedWriter {
        writer,
        maps,
        relist: None,
        keys: Arc::new(keys),
    };
    (reader, writer)
}

/// Applies every event of `stream` to `writer` before passing it on.
pub fn reflect<K, Key, S>(
    mut writer: IndexedWriter<K, Key>,
    stream: S,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    Key: Hash + Eq + Clone,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    stream.inspect_ok(move |event| writer.apply(event))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use watcher::Event;

    use super::*;

    fn cm(name: &str, color: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"color": color}},
        }))
        .expect("configmap")
    }

    fn color(cm: &ConfigMap) -> Vec<String> {
        cm.labels().get("color").cloned().into_iter().collect()
    }

    fn names(objs: Vec<Arc<ConfigMap>>) -> Vec<String> {
        objs.iter().map(|o| o.name_any()).collect()
    }

    #[test]
    fn updates_move_objects_between_keys_and_deletes_drop_them() {
        let (ix, mut w) = store(color);
        w.apply(&Event::Init);
        w.apply(&Event::InitApply(cm("b", "red")));
        w.apply(&Event::InitApply(cm("a", "red")));
        assert!(
            ix.get(&"red".to_owned()).is_empty(),
            "a re-list shows only once done"
        );
        w.apply(&Event::InitDone);
        assert_eq!(
            names(ix.get(&"red".to_owned())),
            ["a", "b"],
            "sorted by name"
        );
        w.apply(&Event::Apply(cm("a", "blue")));
        assert_eq!(names(ix.get(&"red".to_owned())), ["b"]);
        assert_eq!(names(ix.get(&"blue".to_owned())), ["a"]);
        assert_eq!(
            names(ix.get_any(&["blue".to_owned(), "red".to_owned(), "blue".to_owned()])),
            ["a", "b"],
            "each object once"
        );
        w.apply(&Event::Delete(cm("b", "red")));
        assert_eq!(ix.count(&"red".to_owned()), 0);
        assert!(ix.store().get(&ObjectRef::new("b").within("ns")).is_none());
    }

    #[test]
    fn a_relist_replaces_what_vanished_during_the_gap() {
        let (ix, mut w) = store(color);
        w.apply(&Event::Init);
        w.apply(&Event::InitApply(cm("a", "red")));
        w.apply(&Event::InitDone);
        w.apply(&Event::Init);
        w.apply(&Event::InitApply(cm("c", "red")));
        assert_eq!(
            names(ix.get(&"red".to_owned())),
            ["a"],
            "the old view until done"
        );
        w.apply(&Event::InitDone);
        assert_eq!(names(ix.get(&"red".to_owned())), ["c"]);
        assert_eq!(ix.refs(&"red".to_owned()).len(), 1);
    }
}
