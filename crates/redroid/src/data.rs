//! Pure: which data an instance (or a Pod running redroid) uses, and when two uses conflict.
//!
//! Contract. A [`Usage`] is read from an instance spec, or from a Pod's volumes (instance Pods,
//! upstream's Pods and task data sidecars all name the PVCs in volumes `data-base` and
//! `data-diff`, the writable layer being the `data-diff` sub-path). Two uses conflict when
//! - both write the same writable layer (same `diffDataPVC` and `index`), or both are
//!   `baseMode` on the same `sharedDataPVC`: [`Conflict::Layer`], reported as `IndexConflict`;
//! - one is `baseMode` (writing the shared PVC) and the other an overlay whose read-only lower
//!   layer is that PVC: [`Conflict::Base`], reported as `BaseLayerConflict` (changing a
//!   mounted lower layer corrupts the overlays).
//!
//! Overlays on the same base with different writable layers never conflict.

use k8s_openapi::api::core::v1::Pod;

use crate::crd::RedroidInstanceSpec;
use crate::instance::cached_pod::CachedPod;

/// Volume name of the shared base PVC, in instance Pods and task sidecars.
pub const DATA_BASE_VOLUME: &str = "data-base";
/// Volume name of the diff PVC (writable layers).
pub const DATA_DIFF_VOLUME: &str = "data-diff";

/// The data one redroid uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The shared base PVC: the lower layer, or `/data` itself in base mode.
    pub base: String,
    /// The writable layer `(diffDataPVC, index)`; `None` in base mode (the base is written).
    pub layer: Option<(String, i32)>,
}

/// Why two uses may not run at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The same writable data: one layer, or one base PVC in base mode for both.
    Layer,
    /// Base mode writes the PVC the other one mounts as its lower layer.
    Base,
}

impl Conflict {
    /// The condition (and Event) reason.
    pub fn reason(self) -> &'static str {
        match self {
            Conflict::Layer => "IndexConflict",
            Conflict::Base => "BaseLayerConflict",
        }
    }
}

impl Usage {
    /// The data an instance with `spec` uses.
    pub fn of_spec(spec: &RedroidInstanceSpec) -> Usage {
        Usage {
            base: spec.shared_data_pvc.clone(),
            layer: (!spec.base_mode).then(|| (spec.diff_data_pvc.clone(), spec.index)),
        }
    }

    /// The data a Pod running redroid uses, from its volumes; `None` if it mounts no base PVC.
    pub fn of_pod(pod: &Pod) -> Option<Usage> {
        Self::of_cached(&CachedPod::from(pod.clone()))
    }

    /// [`Usage::of_pod`] of a Pod as the instance controller caches it (the same fields).
    ///
    /// The writable layer's index is the sub-path of the first `data-diff` mount of any
    /// container (init containers first); a Pod mounting the diff PVC without a numeric
    /// sub-path is taken to use index -1 (the whole PVC), which conflicts only with the same.
    pub fn of_cached(pod: &CachedPod) -> Option<Usage> {
        let spec = pod.spec.as_ref()?;
        let claim = |name: &str| {
            let volumes = spec.volumes.iter().flatten().filter(|v| v.name == name);
            volumes
                .filter_map(|v| v.persistent_volume_claim.as_ref())
                .map(|c| c.claim_name.clone())
                .next()
        };
        let base = claim(DATA_BASE_VOLUME)?;
        let layer = claim(DATA_DIFF_VOLUME).map(|diff| {
            let containers = spec.init_containers.iter().flatten();
            let mounts = containers
                .chain(&spec.containers)
                .flat_map(|c| c.volume_mounts.iter().flatten());
            let sub = mounts
                .filter(|m| m.name == DATA_DIFF_VOLUME)
                .find_map(|m| m.sub_path.as_deref());
            (diff, sub.and_then(|s| s.parse().ok()).unwrap_or(-1))
        });
        Some(Usage { base, layer })
    }

    /// Whether base mode: the shared PVC is written.
    pub fn writes_base(&self) -> bool {
        self.layer.is_none()
    }

    /// How `self` and `other` conflict, if they do.
    pub fn conflict(&self, other: &Usage) -> Option<Conflict> {
        match (&self.layer, &other.layer) {
            (Some(a), Some(b)) => (a == b).then_some(Conflict::Layer),
            (None, None) => (self.base == other.base).then_some(Conflict::Layer),
            _ => (self.base == other.base).then_some(Conflict::Base),
        }
    }

    /// A short description for messages, e.g. `diffDataPVC d index 3`.
    pub fn describe(&self) -> String {
        match &self.layer {
            Some((diff, index)) => format!("diffDataPVC {diff} index {index}"),
            None => format!("baseMode on sharedDataPVC {}", self.base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> RedroidInstanceSpec {
        serde_yaml::from_str(yaml).expect("spec")
    }

    #[test]
    fn conflict_table() {
        let overlay = |i: i32| Usage::of_spec(&spec(&format!("{{index: {i}}}")));
        let base = Usage::of_spec(&spec("{index: 0, baseMode: true}"));
        let other_base = Usage::of_spec(&spec("{index: 0, baseMode: true, sharedDataPVC: b2}"));
        let other_diff = Usage::of_spec(&spec("{index: 1, diffDataPVC: d2}"));
        let on_other_base = Usage::of_spec(&spec("{index: 2, sharedDataPVC: b2}"));
        let cases = [
            (overlay(1), overlay(1), Some(Conflict::Layer)),
            (overlay(1), overlay(2), None),
            (overlay(1), other_diff.clone(), None),
            (base.clone(), base.clone(), Some(Conflict::Layer)),
            (base.clone(), other_base.clone(), None),
            (base.clone(), overlay(2), Some(Conflict::Base)),
            (overlay(2), base.clone(), Some(Conflict::Base)),
            (base.clone(), other_diff.clone(), Some(Conflict::Base)),
            (base.clone(), on_other_base.clone(), None),
            (other_base.clone(), on_other_base, Some(Conflict::Base)),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.conflict(&b), want, "{a:?} vs {b:?}");
            assert_eq!(b.conflict(&a), want, "symmetric: {b:?} vs {a:?}");
        }
        assert_eq!(Conflict::Base.reason(), "BaseLayerConflict");
        assert!(base.writes_base() && !overlay(0).writes_base());
    }

    #[test]
    fn pod_usage_comes_from_its_volumes() {
        let pod: Pod = serde_yaml::from_str(
            r#"
spec:
  volumes:
  - {name: data-base, persistentVolumeClaim: {claimName: base}}
  - {name: data-diff, persistentVolumeClaim: {claimName: diff}}
  initContainers:
  - {name: redroid, volumeMounts: [{name: data-diff, mountPath: /data-diff/7, subPath: "7"}]}
  containers: [{name: app}]
"#,
        )
        .expect("pod");
        let want = Usage {
            base: "base".into(),
            layer: Some(("diff".into(), 7)),
        };
        assert_eq!(Usage::of_pod(&pod), Some(want.clone()));
        assert_eq!(Usage::of_cached(&CachedPod::from(pod)), Some(want));
        let base_mode: Pod = serde_yaml::from_str(
            "spec: {volumes: [{name: data-base, persistentVolumeClaim: {claimName: base}}], containers: [{name: redroid}]}",
        )
        .expect("pod");
        assert!(Usage::of_pod(&base_mode).is_some_and(|u| u.writes_base()));
        let unrelated: Pod = serde_yaml::from_str("spec: {containers: [{name: x}]}").expect("pod");
        assert_eq!(Usage::of_pod(&unrelated), None);
    }
}
