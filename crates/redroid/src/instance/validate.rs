//! Pure decisions over an instance and what was observed: the desired phase (the seed's
//! 4-level priority), expired overrides, data conflicts, and what to do with the Pod.
//!
//! Contract: no client, no clock (callers pass `now`). Conflict rule: two instances sharing
//! a writable layer — same `diffDataPVC` and `index` (both non-baseMode), or both baseMode on
//! the same `sharedDataPVC` — never run at once. Among those that want to run, the earlier
//! created (creationTimestamp, then name) wins; the winner itself also waits while a loser's
//! Pod still exists. Pod adoption rule: a Pod carrying this instance's labels is
//! - ours when its controller owner is this instance (uid),
//! - adoptable when it has no controller owner and its template hash equals the desired one
//!   (otherwise it is deleted like a stale Pod of ours),
//! - foreign when another object controls it (e.g. a previous incarnation awaiting garbage
//!   collection): the instance waits for it to go and never starts a second Pod beside it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};

use crate::crd::{RedroidInstance, RedroidInstanceSpec, TemporaryOverride};
use crate::names;

/// What the instance should be doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// Run a Pod.
    Run,
    /// No Pod, because of `spec.suspend`.
    StopSpec,
    /// No Pod, because of `status.suspended` set by this actor.
    StopOverride(String),
}

/// Why an instance that wants to run may not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// Another instance shares the writable layer (`IndexConflict`).
    IndexConflict(String),
    /// A task's data sidecar uses the instance's data (`DataInUse`).
    DataInUse(String),
    /// The instance cannot be built (`InvalidSpec`).
    Invalid(String),
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

/// Instance names must be DNS-1035 labels: they name the Service and label values.
pub fn validate_name(name: &str) -> Result<(), String> {
    let starts_alpha = name.starts_with(|c: char| c.is_ascii_lowercase());
    if starts_alpha && kit::names::is_dns1123_label(name) {
        return Ok(());
    }
    Err(format!(
        "instance name {name:?} must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters): it names the ADB Service"
    ))
}

/// Whether two specs share a writable layer.
pub fn shares_data(a: &RedroidInstanceSpec, b: &RedroidInstanceSpec) -> bool {
    match (a.base_mode, b.base_mode) {
        (false, false) => a.diff_data_pvc == b.diff_data_pvc && a.index == b.index,
        (true, true) => a.shared_data_pvc == b.shared_data_pvc,
        _ => false,
    }
}

fn order_key(i: &RedroidInstance) -> (Option<Timestamp>, String) {
    (i.creation_timestamp().map(|t| t.0), i.name_any())
}

/// The earlier instance, among `peers` that share the data and want to run, that wins over `inst`.
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

/// Why `inst` may not run now, if it may not.
pub fn block(
    inst: &RedroidInstance,
    peers: &[RedroidInstance],
    peer_pods: &[Pod],
    sidecars: &[Pod],
    now: Timestamp,
) -> Option<Block> {
    if let Err(msg) = validate_name(&inst.name_any()) {
        return Some(Block::Invalid(msg));
    }
    if let Some(w) = conflict_winner(inst, peers, now) {
        return Some(Block::IndexConflict(format!(
            "{} shares its writable layer ({}) and was created earlier; this instance starts when it stops or is deleted",
            w.name_any(),
            layer(&inst.spec)
        )));
    }
    let sharing: Vec<String> = peers
        .iter()
        .filter(|p| shares_data(&p.spec, &inst.spec))
        .map(ResourceExt::name_any)
        .collect();
    if let Some(pod) = peer_pods.iter().find(|p| {
        p.labels()
            .get(names::INSTANCE_LABEL)
            .is_some_and(|i| sharing.contains(i))
    }) {
        let owner = pod
            .labels()
            .get(names::INSTANCE_LABEL)
            .cloned()
            .unwrap_or_default();
        return Some(Block::IndexConflict(format!(
            "waiting for Pod {} of instance {owner}, which shares its writable layer ({}), to stop",
            pod.name_any(),
            layer(&inst.spec)
        )));
    }
    sidecars.first().map(|p| {
        let job = p
            .labels()
            .get("job-name")
            .map(|j| format!("Job {j} (Pod {})", p.name_any()))
            .unwrap_or_else(|| format!("Pod {}", p.name_any()));
        Block::DataInUse(format!(
            "{job} runs redroid on this instance's data; the instance starts when it finishes"
        ))
    })
}

/// The writable layer `inst` uses, as a key: two instances in one namespace have the same
/// key exactly when [`shares_data`] holds for them.
pub fn layer_key(inst: &RedroidInstance) -> String {
    format!(
        "{}/{}",
        inst.namespace().unwrap_or_default(),
        layer(&inst.spec)
    )
}

fn layer(spec: &RedroidInstanceSpec) -> String {
    if spec.base_mode {
        format!("baseMode on sharedDataPVC {}", spec.shared_data_pvc)
    } else {
        format!("diffDataPVC {} index {}", spec.diff_data_pvc, spec.index)
    }
}

/// What to do with the instance Pods.
#[derive(Clone, Debug, PartialEq)]
pub enum PodStep {
    /// No Pod exists and none should.
    Nothing,
    /// The matching Pod of ours: nothing to do.
    Keep(Pod),
    /// A matching Pod without a controller: take it over.
    Adopt(Pod),
    /// Create the desired Pod.
    Create,
    /// Delete these Pods (stopping, blocked or stale), then wait.
    Delete(Vec<String>),
    /// Wait for this Pod to finish terminating.
    WaitTerminating(String),
    /// Wait for this Pod, controlled by another object, to go.
    WaitForeign(String),
}

enum Kind {
    Own,
    Orphan,
    Foreign,
}

fn kind(pod: &Pod, uid: &str) -> Kind {
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

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.annotations()
        .get(names::POD_TEMPLATE_HASH_ANNOTATION)
        .map(String::as_str)
}

/// Decides the Pod step. `desired_hash` is `None` when the instance must not run.
pub fn pod_step(pods: &[Pod], uid: &str, desired_hash: Option<&str>) -> PodStep {
    let terminating = pods.iter().find(|p| p.meta().deletion_timestamp.is_some());
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .collect();
    let mine = |p: &&&Pod| !matches!(kind(p, uid), Kind::Foreign);
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
    let (matching, stale): (Vec<&Pod>, Vec<&Pod>) =
        live.into_iter().partition(|p| hash_of(p) == Some(hash));
    // Prefer our own Pod; any further matching Pod is a duplicate and goes too.
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
        assert!(validate_name("9bad").is_err() && validate_name("ok-1").is_ok());
    }

    #[test]
    fn pod_step_never_creates_beside_a_live_pod() {
        let pod = |name: &str, hash: &str, owner: Option<&str>| -> Pod {
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
