//! Pure decisions over an instance and what was observed: the desired phase (the seed's
//! 4-level priority), expired overrides, data conflicts, and what to do with the Pod.
//!
//! Contract: no client, no clock (callers pass `now`). Conflict rule: two instances whose data
//! conflict ([`crate::data`]: the same writable layer, both baseMode on one shared PVC, or a
//! baseMode instance and an overlay using that shared PVC as its lower layer) never run at
//! once. Among those that want to run and are not being deleted, the earlier created
//! (creationTimestamp, then name) wins; the others wait with `IndexConflict` or
//! `BaseLayerConflict`. A waiting baseMode instance also holds back overlays created after it,
//! so it is not starved. Whoever runs also waits while any other CachedPod whose data conflicts
//! still exists — a loser's, a deleted instance's awaiting garbage collection, or a CachedPod built
//! from a peer's previous spec — and while a data-sidecar task pod on conflicting data is
//! unfinished (`DataInUse`). CachedPod adoption rule: a CachedPod carrying this instance's labels is
//! - ours when its controller owner is this instance (uid),
//! - adoptable when it has no controller owner and its template hash equals the desired one
//!   (otherwise it is deleted like a stale CachedPod of ours),
//! - foreign when another object controls it (e.g. a previous incarnation awaiting garbage
//!   collection): the instance waits for it to go and never starts a second CachedPod beside it.

use std::time::Duration;

use super::cached_pod::CachedPod;
use jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::crd::{RedroidInstance, RedroidInstanceSpec, TemporaryOverride};
use crate::data::{Conflict, Usage};
use crate::names;

/// What the instance should be doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// Run a Pod.
    Run,
    /// No CachedPod, because of `spec.suspend`.
    StopSpec,
    /// No CachedPod, because of `status.suspended` set by this actor.
    StopOverride(String),
}

/// Why an instance that wants to run may not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// Another instance, or a CachedPod, uses conflicting data (`IndexConflict`, `BaseLayerConflict`).
    Conflict {
        /// How the data conflict.
        kind: Conflict,
        /// Whom this instance waits for, and why.
        message: String,
        /// Waiting for a CachedPod to go (no event may tell us), rather than for an instance.
        pod: bool,
    },
    /// A task's data sidecar uses the instance's data (`DataInUse`).
    DataInUse(String),
    /// The spec cannot run (`InvalidSpec`); only an object stored without spec, which the
    /// schema allows as upstream's does, gets here: its fields are Go's zero values.
    Invalid(String),
}

impl Block {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Block::Conflict { kind, .. } => kind.reason(),
            Block::DataInUse(_) => "DataInUse",
            Block::Invalid(_) => "InvalidSpec",
        }
    }

    /// The condition message.
    pub fn message(&self) -> String {
        match self {
            Block::Conflict { message, .. } | Block::DataInUse(message) => {
                format!("Not started: {message}.")
            }
            Block::Invalid(message) => format!("Not started: {message}."),
        }
    }
}

/// What makes a spec impossible to run, if anything. The schema requires or defaults every
/// field checked here, so only an object stored without spec (Go's zero values) fails.
pub fn spec_problem(spec: &RedroidInstanceSpec) -> Option<String> {
    let mut missing = Vec::new();
    if spec.image.is_empty() {
        missing.push("spec.image");
    }
    if spec.shared_data_pvc.is_empty() {
        missing.push("spec.sharedDataPVC");
    }
    if spec.diff_data_pvc.is_empty() && !spec.base_mode {
        missing.push("spec.diffDataPVC");
    }
    if !(1..=65535).contains(&spec.adb_port) {
        missing.push("spec.adbPort");
    }
    (!missing.is_empty()).then(|| {
        format!(
            "the spec is missing or incomplete ({} not set); give the instance a spec with at least spec.index",
            missing.join(", ")
        )
    })
}

/// Which overrides have expired at `now`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// `status.woken.until` has passed.
    pub woken: bool,
    /// `status.suspended.until` has passed.
    pub suspended: bool,
}

fn expired(o: Option<&TemporaryOverride>, now: Timestamp) -> bool {
    o.and_then(|o| o.until.as_ref()).is_some_and(|t| t.0 <= now)
}

/// The overrides whose `until` has passed.
pub fn expired_overrides(inst: &RedroidInstance, now: Timestamp) -> Expired {
    let s = inst.status.as_ref();
    Expired {
        woken: expired(s.and_then(|s| s.woken.as_ref()), now),
        suspended: expired(s.and_then(|s| s.suspended.as_ref()), now),
    }
}

/// Time until the earliest pending `until`, so expiry is acted on without any other event.
pub fn next_expiry(inst: &RedroidInstance, now: Timestamp) -> Option<Duration> {
    let s = inst.status.as_ref()?;
    [s.woken.as_ref(), s.suspended.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|o| o.until.as_ref())
        .filter(|t| t.0 > now)
        .map(|t| t.0.duration_since(now).unsigned_abs() + Duration::from_millis(50))
        .min()
}

/// The desired phase: woken (not expired) > spec.suspend > suspended (not expired) > run.
pub fn want(inst: &RedroidInstance, now: Timestamp) -> Want {
    let s = inst.status.as_ref();
    let active = |o: Option<&TemporaryOverride>| o.filter(|o| !expired(Some(o), now)).cloned();
    if active(s.and_then(|s| s.woken.as_ref())).is_some() {
        return Want::Run;
    }
    if inst.spec.suspend {
        return Want::StopSpec;
    }
    match active(s.and_then(|s| s.suspended.as_ref())) {
        Some(o) => Want::StopOverride(o.actor.unwrap_or_else(|| "unknown".into())),
        None => Want::Run,
    }
}

/// Whether two specs' data conflict (see [`crate::data`]).
pub fn shares_data(a: &RedroidInstanceSpec, b: &RedroidInstanceSpec) -> bool {
    Usage::of_spec(a).conflict(&Usage::of_spec(b)).is_some()
}

fn order_key(i: &RedroidInstance) -> (Option<Timestamp>, String) {
    (i.creation_timestamp().map(|t| t.0), i.name_any())
}

/// The earliest instance, among `peers` whose data conflict with `inst`'s and that want to
/// run and are not being deleted, created before `inst`: the one `inst` waits for.
pub fn conflict_winner<'a>(
    inst: &RedroidInstance,
    peers: &'a [RedroidInstance],
    now: Timestamp,
) -> Option<&'a RedroidInstance> {
    peers
        .iter()
        .filter(|p| p.name_any() != inst.name_any() && shares_data(&p.spec, &inst.spec))
        .filter(|p| p.meta().deletion_timestamp.is_none() && want(p, now) == Want::Run)
        .filter(|p| order_key(p) < order_key(inst))
        .min_by_key(|p| order_key(p))
}

/// Why `inst` may not run now, if it may not. `peers` are instances whose data conflict;
/// `pods` are Pods of other instances (instance Pods or data sidecars) that may use
/// conflicting data; `sidecars` are unfinished data-sidecar pods of this instance.
pub fn block(
    inst: &RedroidInstance,
    peers: &[RedroidInstance],
    pods: &[CachedPod],
    sidecars: &[CachedPod],
    now: Timestamp,
) -> Option<Block> {
    if let Some(problem) = spec_problem(&inst.spec) {
        return Some(Block::Invalid(problem));
    }
    let mine = Usage::of_spec(&inst.spec);
    if let Some(w) = conflict_winner(inst, peers, now) {
        let theirs = Usage::of_spec(&w.spec);
        let kind = mine.conflict(&theirs).unwrap_or(Conflict::Layer);
        let message = format!(
            "instance {} ({}) {}, and was created earlier; this instance starts when it stops, changes its data or is deleted",
            w.name_any(),
            theirs.describe(),
            why(kind, &mine, &theirs),
        );
        return Some(Block::Conflict {
            kind,
            message,
            pod: false,
        });
    }
    let sharing: Vec<String> = peers
        .iter()
        .filter(|p| shares_data(&p.spec, &inst.spec))
        .map(|p| names::instance_label(&p.name_any()))
        .collect();
    let me = names::instance_label(&inst.name_any());
    let conflicting = pods.iter().filter_map(|p| {
        let label = p
            .labels()
            .get(names::INSTANCE_LABEL)
            .cloned()
            .unwrap_or_default();
        if label == me {
            return None;
        }
        let theirs = Usage::of_cached(p);
        let kind = theirs.as_ref().and_then(|u| mine.conflict(u));
        let kind = kind.or_else(|| sharing.contains(&label).then_some(Conflict::Layer))?;
        Some((p, label, theirs, kind))
    });
    let mut conflicting: Vec<_> = conflicting.collect();
    // Instance Pods first: a sidecar wait is DataInUse, reported only when nothing else holds.
    conflicting.sort_by_key(|(p, ..)| crate::instance::observe::is_sidecar(*p));
    if let Some((pod, owner, theirs, kind)) = conflicting.into_iter().next() {
        let what = theirs.map_or_else(|| "data".to_owned(), |u| u.describe());
        if crate::instance::observe::is_sidecar(pod) {
            return Some(Block::DataInUse(format!(
                "{} of instance {owner} runs redroid on {what}, which {}; the instance starts when it finishes",
                job_of(pod),
                kind_phrase(kind)
            )));
        }
        return Some(Block::Conflict {
            kind,
            message: format!(
                "waiting for Pod {} of instance {owner} ({what}, which {}) to stop",
                pod.name_any(),
                kind_phrase(kind)
            ),
            pod: true,
        });
    }
    sidecars.first().map(|p| {
        Block::DataInUse(format!(
            "{} runs redroid on this instance's data; the instance starts when it finishes",
            job_of(p)
        ))
    })
}

fn job_of(p: &CachedPod) -> String {
    p.labels()
        .get("job-name")
        .map(|j| format!("Job {j} (Pod {})", p.name_any()))
        .unwrap_or_else(|| format!("Pod {}", p.name_any()))
}

// Why `theirs` keeps `mine` from running, for the message.
fn why(kind: Conflict, mine: &Usage, theirs: &Usage) -> String {
    match kind {
        Conflict::Layer => "writes the same data".to_owned(),
        Conflict::Base if theirs.writes_base() => format!(
            "writes sharedDataPVC {}, this instance's read-only lower layer (changing a mounted lower layer corrupts overlays)",
            mine.base
        ),
        Conflict::Base => format!(
            "uses sharedDataPVC {} as its read-only lower layer, which baseMode would write",
            mine.base
        ),
    }
}

fn kind_phrase(kind: Conflict) -> &'static str {
    match kind {
        Conflict::Layer => "this instance would write too",
        Conflict::Base => "conflicts with this instance's baseMode/lower layer",
    }
}

/// The locks a pass of `inst` takes (see `super::LayerLocks`): the shared base PVC — shared
/// by overlays, exclusive in base mode — and, for an overlay, its writable layer. Every pair
/// of instances in one namespace whose data conflict takes a conflicting pair of locks.
pub fn lock_keys(inst: &RedroidInstance) -> (String, bool, Option<String>) {
    let ns = inst.namespace().unwrap_or_default();
    let usage = Usage::of_spec(&inst.spec);
    let base = format!("{ns}/base/{}", usage.base);
    let layer = usage
        .layer
        .as_ref()
        .map(|(diff, index)| format!("{ns}/layer/{diff}/{index}"));
    (base, usage.writes_base(), layer)
}

/// What to do with the instance Pods.
#[derive(Clone, Debug, PartialEq)]
pub enum PodStep {
    /// No CachedPod exists and none should.
    Nothing,
    /// The matching CachedPod of ours: nothing to do.
    Keep(CachedPod),
    /// A matching CachedPod without a controller: take it over.
    Adopt(CachedPod),
    /// Create the desired Pod.
    Create,
    /// Delete these Pods (stopping, blocked or stale), then wait.
    Delete(Vec<String>),
    /// Wait for this CachedPod to finish terminating.
    WaitTerminating(String),
    /// Wait for this CachedPod, controlled by another object, to go.
    WaitForeign(String),
}

enum Kind {
    Own,
    Orphan,
    Foreign,
}

fn kind(pod: &CachedPod, uid: &str) -> Kind {
    match pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
    {
        Some(o) if o.uid == uid => Kind::Own,
        Some(_) => Kind::Foreign,
        None => Kind::Orphan,
    }
}

fn hash_of(pod: &CachedPod) -> Option<&str> {
    pod.annotations()
        .get(names::POD_TEMPLATE_HASH_ANNOTATION)
        .map(String::as_str)
}

/// Decides the CachedPod step. `desired_hash` is `None` when the instance must not run.
pub fn pod_step(pods: &[CachedPod], uid: &str, desired_hash: Option<&str>) -> PodStep {
    let terminating = pods.iter().find(|p| p.meta().deletion_timestamp.is_some());
    let live: Vec<&CachedPod> = pods
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .collect();
    let mine = |p: &&&CachedPod| !matches!(kind(p, uid), Kind::Foreign);
    let Some(hash) = desired_hash else {
        let doomed: Vec<String> = live.iter().filter(mine).map(|p| p.name_any()).collect();
        return match (doomed.is_empty(), terminating) {
            (false, _) => PodStep::Delete(doomed),
            (true, Some(p)) if mine(&&p) => PodStep::WaitTerminating(p.name_any()),
            _ => PodStep::Nothing,
        };
    };
    if let Some(p) = live.iter().find(|p| !mine(p)) {
        return PodStep::WaitForeign(p.name_any());
    }
    let (matching, stale): (Vec<&CachedPod>, Vec<&CachedPod>) =
        live.into_iter().partition(|p| hash_of(p) == Some(hash));
    // Prefer our own CachedPod; any further matching CachedPod is a duplicate and goes too.
    let mut matching = matching;
    matching.sort_by_key(|p| (!matches!(kind(p, uid), Kind::Own), p.name_any()));
    let extra = matching
        .iter()
        .skip(1)
        .chain(stale.iter())
        .map(|p| p.name_any())
        .collect::<Vec<_>>();
    if !extra.is_empty() {
        return PodStep::Delete(extra);
    }
    match (matching.first(), terminating) {
        (_, Some(p)) => PodStep::WaitTerminating(p.name_any()),
        (Some(p), None) if matches!(kind(p, uid), Kind::Own) => PodStep::Keep((*p).clone()),
        (Some(p), None) => PodStep::Adopt((*p).clone()),
        (None, None) => PodStep::Create,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn only_a_spec_with_go_zero_values_is_a_spec_problem() {
        let full: RedroidInstanceSpec =
            serde_json::from_value(serde_json::json!({"index": 0})).expect("spec");
        assert_eq!(
            spec_problem(&full),
            None,
            "schema defaults fill every field"
        );
        let empty = RedroidInstanceSpec::default();
        let msg = spec_problem(&empty).expect("a problem");
        for field in [
            "spec.image",
            "spec.sharedDataPVC",
            "spec.diffDataPVC",
            "spec.adbPort",
        ] {
            assert!(msg.contains(field), "{msg}");
        }
        let base = RedroidInstanceSpec {
            base_mode: true,
            ..full.clone()
        };
        let base = RedroidInstanceSpec {
            diff_data_pvc: String::new(),
            ..base
        };
        assert_eq!(spec_problem(&base), None, "baseMode needs no diff PVC");
    }

    #[test]
    fn an_object_without_spec_deserialises_to_zero_values() {
        let inst: RedroidInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
            "metadata": {"name": "bare"}
        }))
        .expect("spec-less");
        assert_eq!(inst.spec, RedroidInstanceSpec::default());
        let with: RedroidInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
            "metadata": {"name": "a"}, "spec": {"index": 2}
        }))
        .expect("with spec");
        assert_eq!(with.spec.index, 2);
        assert_eq!(with.spec.adb_port, 5555, "serde defaults still apply");
    }
    use super::*;

    fn inst(yaml: &str) -> RedroidInstance {
        serde_yaml::from_str(yaml).expect("instance")
    }

    const NOW: &str = "2030-01-01T00:00:00Z";
    fn now() -> Timestamp {
        NOW.parse().expect("time")
    }
    fn with(spec: &str, status: &str) -> RedroidInstance {
        inst(&format!(
            "{{apiVersion: redroid.isning.moe/v1alpha1, kind: RedroidInstance, metadata: {{name: a, namespace: n, creationTimestamp: '{NOW}'}}, spec: {spec}, status: {status}}}"
        ))
    }

    #[test]
    fn four_level_priority_and_expiry() {
        let past = "2029-01-01T00:00:00Z";
        let soon = "2030-01-01T00:00:03Z";
        assert_eq!(want(&with("{index: 0}", "{}"), now()), Want::Run);
        assert_eq!(
            want(&with("{index: 0, suspend: true}", "{}"), now()),
            Want::StopSpec
        );
        assert_eq!(
            want(
                &with("{index: 0, suspend: true}", "{woken: {actor: x}}"),
                now()
            ),
            Want::Run
        );
        assert_eq!(
            want(&with("{index: 0}", "{suspended: {actor: t}}"), now()),
            Want::StopOverride("t".into())
        );
        let expired = with(
            "{index: 0, suspend: true}",
            &format!("{{woken: {{until: '{past}'}}}}"),
        );
        assert_eq!(want(&expired, now()), Want::StopSpec);
        assert!(expired_overrides(&expired, now()).woken);
        let pending = with("{index: 0}", &format!("{{suspended: {{until: '{soon}'}}}}"));
        let wait = next_expiry(&pending, now()).expect("requeue");
        assert!(wait >= Duration::from_secs(3) && wait < Duration::from_secs(4));
    }

    #[test]
    fn earlier_instance_wins_only_on_shared_data() {
        let a = with("{index: 1}", "{}");
        let mut b = with("{index: 1}", "{}");
        b.metadata.name = Some("b".into());
        assert_eq!(
            conflict_winner(&b, std::slice::from_ref(&a), now()).map(|w| w.name_any()),
            Some("a".into())
        );
        assert!(conflict_winner(&a, std::slice::from_ref(&b), now()).is_none());
        let c = with("{index: 2}", "{}");
        assert!(!shares_data(&c.spec, &a.spec));
    }

    fn named(name: &str, spec: &str, created: &str) -> RedroidInstance {
        let mut i = with(spec, "{}");
        i.metadata.name = Some(name.into());
        i.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            created.parse().expect("time"),
        ));
        i
    }

    #[test]
    fn base_mode_and_overlays_on_one_base_wait_for_the_earlier() {
        let (t1, t2, t3) = (
            "2029-01-01T00:00:01Z",
            "2029-01-01T00:00:02Z",
            "2029-01-01T00:00:03Z",
        );
        let base = named("base-a", "{index: 0, baseMode: true}", t1);
        let overlay = named("overlay-c", "{index: 2}", t2);
        let other_base = named("overlay-d", "{index: 4, sharedDataPVC: other}", t3);
        let peers = [base.clone(), overlay.clone(), other_base.clone()];
        let b = block(&overlay, &peers, &[], &[], now()).expect("overlay waits");
        assert_eq!(b.reason(), "BaseLayerConflict");
        assert!(
            b.message().contains("base-a") && b.message().contains("lower layer"),
            "{}",
            b.message()
        );
        assert_eq!(
            block(&base, &peers, &[], &[], now()),
            None,
            "the earlier runs"
        );
        assert_eq!(
            block(&other_base, &peers, &[], &[], now()),
            None,
            "another base"
        );
        // The later baseMode instance waits for the earlier overlay, with the same reason.
        let late_base = named("base-z", "{index: 0, baseMode: true}", t3);
        let b =
            block(&late_base, std::slice::from_ref(&overlay), &[], &[], now()).expect("base waits");
        assert_eq!(b.reason(), "BaseLayerConflict");
        // A suspended or deleting earlier instance does not win.
        let mut gone = base.clone();
        gone.metadata.deletion_timestamp = gone.metadata.creation_timestamp.clone();
        assert_eq!(block(&overlay, &[gone], &[], &[], now()), None);
    }

    #[test]
    fn any_pod_on_conflicting_data_holds_the_instance() {
        let pod = |instance: &str, claim_base: &str, diff: Option<i32>| -> CachedPod {
            let diff_volume = diff.map_or(String::new(), |_| {
                ", {name: data-diff, persistentVolumeClaim: {claimName: redroid-data-diff-pvc}}"
                    .into()
            });
            let mount = diff.map_or(String::new(), |i| {
                format!("{{name: data-diff, mountPath: /data-diff/{i}, subPath: '{i}'}}")
            });
            serde_yaml::from_str(&format!(
                "{{metadata: {{name: {instance}-pod, labels: {{'{}': {instance}, '{}': instance}}}}, spec: {{volumes: [{{name: data-base, persistentVolumeClaim: {{claimName: {claim_base}}}}}{diff_volume}], containers: [{{name: redroid, volumeMounts: [{mount}]}}]}}}}",
                names::INSTANCE_LABEL,
                names::COMPONENT_LABEL
            ))
            .expect("pod")
        };
        let me = with("{index: 3}", "{}");
        // A deleted instance's CachedPod on the same layer: no peer left, still a wait.
        let b = block(
            &me,
            &[],
            &[pod("gone", "redroid-data-base-pvc", Some(3))],
            &[],
            now(),
        );
        assert!(
            matches!(&b, Some(Block::Conflict { pod: true, .. })),
            "{b:?}"
        );
        assert_eq!(b.map(|b| b.reason()), Some("IndexConflict"));
        let b = block(
            &me,
            &[],
            &[pod("base", "redroid-data-base-pvc", None)],
            &[],
            now(),
        );
        assert_eq!(b.map(|b| b.reason()), Some("BaseLayerConflict"));
        assert_eq!(
            block(
                &me,
                &[],
                &[pod("other", "redroid-data-base-pvc", Some(4))],
                &[],
                now()
            ),
            None
        );
        assert_eq!(
            block(&me, &[], &[pod("x", "elsewhere", None)], &[], now()),
            None
        );
        // Its own CachedPod is never a conflict.
        assert_eq!(
            block(
                &me,
                &[],
                &[pod("a", "redroid-data-base-pvc", Some(3))],
                &[],
                now()
            ),
            None
        );
    }

    #[test]
    fn pod_step_never_creates_beside_a_live_pod() {
        let pod = |name: &str, hash: &str, owner: Option<&str>| -> CachedPod {
            let owners = owner.map(|u| format!(", ownerReferences: [{{apiVersion: v, kind: k, name: a, uid: {u}, controller: true}}]")).unwrap_or_default();
            serde_yaml::from_str(&format!(
                "{{metadata: {{name: {name}, annotations: {{'{}': {hash}}}{owners}}}}}",
                names::POD_TEMPLATE_HASH_ANNOTATION
            ))
            .expect("pod")
        };
        assert_eq!(pod_step(&[], "u", Some("h")), PodStep::Create);
        assert!(matches!(
            pod_step(&[pod("p", "h", Some("u"))], "u", Some("h")),
            PodStep::Keep(_)
        ));
        assert!(matches!(
            pod_step(&[pod("p", "h", None)], "u", Some("h")),
            PodStep::Adopt(_)
        ));
        assert_eq!(
            pod_step(&[pod("p", "old", Some("u"))], "u", Some("h")),
            PodStep::Delete(vec!["p".into()])
        );
        assert_eq!(
            pod_step(&[pod("p", "h", Some("other"))], "u", Some("h")),
            PodStep::WaitForeign("p".into())
        );
        assert_eq!(
            pod_step(&[pod("p", "h", Some("u"))], "u", None),
            PodStep::Delete(vec!["p".into()])
        );
    }
}
