//! The binding controller's in-memory indexes, fed by its watches (linkerd-style: watches
//! write the index, one writer reads it). Everything here is plain data plus the bookkeeping
//! a watch restart needs.

use std::collections::{BTreeMap, BTreeSet};

use stellar_core::resolve::{Labels, ObjInfo, ObjRef, Policy};

/// A served resource being watched: group, version, resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gvr {
    /// API group.
    pub group: String,
    /// Version watched (the preferred one).
    pub version: String,
    /// Resource (lowercase plural).
    pub resource: String,
}

/// What the index keeps about a BindingPolicy.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyEntry {
    /// metadata.uid.
    pub uid: String,
    /// The parts the resolution depends on.
    pub policy: Policy,
}

/// The indexes.
#[derive(Debug, Default)]
pub struct Index {
    /// Workload objects of every watched resource.
    pub objects: BTreeMap<ObjRef, ObjInfo>,
    /// ManagedCluster name → labels (the live inventory).
    pub clusters: BTreeMap<String, Labels>,
    /// Live (not deleting) BindingPolicies.
    pub policies: BTreeMap<String, PolicyEntry>,
    /// Resources whose watch has listed everything at least once.
    pub synced: BTreeSet<Gvr>,
    /// Resources being watched.
    pub watching: BTreeSet<Gvr>,
    /// Whether the inventory and the policies have been listed.
    pub inventory_synced: bool,
    /// Whether the policies have been listed.
    pub policies_synced: bool,
    // Objects seen during a watch's re-list, by resource, until it is done.
    relisting: BTreeMap<Gvr, BTreeMap<ObjRef, ObjInfo>>,
}

impl Index {
    /// Namespace name → labels, read from the watched Namespace objects.
    pub fn namespaces(&self) -> BTreeMap<String, Labels> {
        self.objects
            .iter()
            .filter(|(r, _)| r.group.is_empty() && r.resource == "namespaces")
            .map(|(r, i)| (r.name.clone(), i.labels.clone()))
            .collect()
    }

    /// Every watched resource has listed its objects, and so have the inventory and policies.
    pub fn ready(&self) -> bool {
        self.inventory_synced && self.policies_synced && self.watching.is_subset(&self.synced)
    }

    /// A watch of `gvr` restarted: collect until [`Index::relist_done`].
    pub fn relist_start(&mut self, gvr: &Gvr) {
        self.relisting.insert(gvr.clone(), BTreeMap::new());
    }

    /// One object of a re-list.
    pub fn relist_object(&mut self, gvr: &Gvr, r: ObjRef, info: ObjInfo) {
        self.relisting
            .entry(gvr.clone())
            .or_default()
            .insert(r, info);
    }

    /// The re-list of `gvr` is complete: its objects are exactly those seen.
    pub fn relist_done(&mut self, gvr: &Gvr) {
        let fresh = self.relisting.remove(gvr).unwrap_or_default();
        self.forget(gvr);
        self.objects.extend(fresh);
        self.synced.insert(gvr.clone());
    }

    /// Removes every object of `gvr` (its watch stopped: the resource is no longer served).
    pub fn forget(&mut self, gvr: &Gvr) {
        self.objects.retain(|r, _| {
            !(r.group == gvr.group && r.version == gvr.version && r.resource == gvr.resource)
        });
    }

    /// Stops tracking `gvr` altogether.
    pub fn unwatch(&mut self, gvr: &Gvr) {
        self.forget(gvr);
        self.watching.remove(gvr);
        self.synced.remove(gvr);
        self.relisting.remove(gvr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr() -> Gvr {
        Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
        }
    }

    fn obj(name: &str) -> ObjRef {
        ObjRef {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            namespace: "n".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_relist_replaces_the_objects_of_its_resource_only() {
        let mut ix = Index::default();
        ix.watching.insert(gvr());
        ix.objects.insert(obj("stale"), ObjInfo::default());
        let other = ObjRef {
            resource: "secrets".into(),
            ..obj("s")
        };
        ix.objects.insert(other.clone(), ObjInfo::default());
        assert!(!ix.ready());
        ix.relist_start(&gvr());
        ix.relist_object(&gvr(), obj("fresh"), ObjInfo::default());
        ix.relist_done(&gvr());
        let names: Vec<_> = ix.objects.keys().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["fresh", "s"]);
        ix.inventory_synced = true;
        ix.policies_synced = true;
        assert!(ix.ready());
        ix.unwatch(&gvr());
        assert_eq!(ix.objects.keys().collect::<Vec<_>>(), [&other]);
    }

    #[test]
    fn namespaces_come_from_namespace_objects() {
        let mut ix = Index::default();
        let ns = ObjRef {
            group: "".into(),
            version: "v1".into(),
            resource: "namespaces".into(),
            namespace: "".into(),
            name: "team-a".into(),
        };
        let labels: Labels = [("team".to_string(), "a".to_string())].into();
        ix.objects.insert(
            ns,
            ObjInfo {
                labels: labels.clone(),
                ..Default::default()
            },
        );
        assert_eq!(ix.namespaces().get("team-a"), Some(&labels));
    }
}
