//! The VM state machine of one pod (pure: no client, no registry).
//!
//! [`decide`] looks at the freshest pod, what the simulator remembers about its VM ([`Vm`]),
//! whether a node-local snapshot of the VM sits on the pod's node, and the armed faults, and
//! names the one next [`Step`]. The worker executes it and asks again until [`Step::Nothing`].
//! Every step changes either the pod's annotations or [`Vm`], so the loop converges.

use cocoon::names::{self, lifecycle};
use cocoon::pods::state;
use k8s_openapi::api::core::v1::Pod;

use crate::faults::FaultSet;
use crate::patch::held;

/// What runs on the (simulated) node for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// No VM (not created yet, or creation failed).
    Absent,
    /// A running VM.
    Live {
        /// The VM id written to `vm.cocoonstack.io/id`.
        id: String,
        /// The VM IP written to `vm.cocoonstack.io/ip`.
        ip: String,
    },
    /// Snapshotted to `<vm>:hibernate` and removed.
    Hibernated,
}

/// What the simulator remembers about the VM of one pod (by pod uid).
#[derive(Clone, Debug)]
pub(crate) struct Vm {
    pub runtime: Runtime,
    /// The generation stamp a `failed` lifecycle was written for: sticky while it is current.
    pub failed_at: Option<i64>,
    /// The pod's deletion was handled; later events of this pod are ignored.
    pub deleted: bool,
}

impl Vm {
    /// Memory for a pod seen for the first time. A pod that already carries a VM id (a static
    /// toolbox, or a pod from before a simulator restart) is adopted as live; one whose
    /// lifecycle says `hibernated` is adopted as hibernated.
    pub(crate) fn from_pod(pod: &Pod) -> Vm {
        let runtime = match state::vm_id(pod) {
            Some(id) => Runtime::Live {
                id: id.to_owned(),
                ip: state::vm_ip(pod).unwrap_or_default().to_owned(),
            },
            None if state::lifecycle_state(pod) == Some(lifecycle::HIBERNATED) => {
                Runtime::Hibernated
            }
            None => Runtime::Absent,
        };
        let failed_at = (state::lifecycle_state(pod) == Some(lifecycle::FAILED))
            .then(|| state::lifecycle_generation(pod));
        Vm {
            runtime,
            failed_at,
            deleted: false,
        }
    }
}

/// Where a VM's disk comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The base image (a fresh boot).
    Fresh,
    /// The node-local snapshot kept by an earlier `keep-snapshot-on-delete` delete.
    Local,
    /// `<vm>:hibernate` pulled from the registry.
    Registry,
}

/// The next thing to do for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing to do.
    Nothing,
    /// Hold the pod (add the simulator's finalizer) so its deletion waits for [`Step::Delete`].
    Hold,
    /// The pod is going: push `:latest` if asked, keep or drop the node-local snapshot.
    Delete { push_latest: bool, keep_local: bool },
    /// The VM of a held, terminating pod is torn down: let the pod go (drop the finalizer).
    Release,
    /// Create the VM of a pod that has none.
    Create(Source),
    /// Restore a hibernated VM in place.
    Wake(Source),
    /// Snapshot the live VM to `:hibernate` and remove it; with a message, fail after the push.
    Hibernate { fail: Option<String> },
    /// Creation fails (fault): lifecycle `failed` with this message.
    FailCreate(String),
    /// Write the current state again (new generation stamp, or the pod lost our annotations).
    Publish,
}

/// The next step for `pod` (`gone`: the watch reported it deleted).
pub(crate) fn decide(vm: &Vm, pod: &Pod, gone: bool, local_here: bool, faults: &FaultSet) -> Step {
    if faults.stalled {
        return Step::Nothing;
    }
    if vm.deleted {
        let still_held = !gone && held(pod);
        return if still_held {
            Step::Release
        } else {
            Step::Nothing
        };
    }
    if gone || pod.metadata.deletion_timestamp.is_some() {
        return Step::Delete {
            push_latest: matches!(vm.runtime, Runtime::Live { .. }) && policy_pushes_latest(pod),
            keep_local: state::flag(pod, names::ANN_KEEP_SNAPSHOT),
        };
    }
    if state::node_name(pod).is_none() {
        return Step::Nothing;
    }
    // Before anything else runs for the pod: its deletion must wait for the teardown.
    if !held(pod) {
        return Step::Hold;
    }
    if vm.failed_at == Some(state::generation_stamp(pod)) {
        return Step::Nothing;
    }
    let hibernate = state::hibernate_requested(pod);
    match &vm.runtime {
        // kwok gives the pod its IP when it starts it; the VM takes that IP.
        Runtime::Absent if awaiting_ip(pod) => Step::Nothing,
        Runtime::Absent => match &faults.fail_create {
            Some(msg) => Step::FailCreate(msg.clone()),
            None if local_here => Step::Create(Source::Local),
            None if state::flag(pod, names::ANN_RESTORE) => Step::Create(Source::Registry),
            None => Step::Create(Source::Fresh),
        },
        Runtime::Live { .. } if hibernate => Step::Hibernate {
            fail: faults.fail_next_hibernate.clone(),
        },
        Runtime::Hibernated if !hibernate => match &faults.fail_create {
            Some(msg) => Step::FailCreate(msg.clone()),
            None if local_here => Step::Wake(Source::Local),
            None => Step::Wake(Source::Registry),
        },
        runtime if !published(pod, runtime) => Step::Publish,
        _ => Step::Nothing,
    }
}

/// Whether the pod is bound but not yet started (`Pending`, no IP): its IP is coming.
fn awaiting_ip(pod: &Pod) -> bool {
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
    state::phase(pod) == "Pending" && ip.is_none_or(str::is_empty)
}

/// The lifecycle state a runtime is reported as.
pub(crate) fn state_of(runtime: &Runtime) -> &'static str {
    match runtime {
        Runtime::Absent => lifecycle::CREATING,
        Runtime::Live { .. } => lifecycle::READY,
        Runtime::Hibernated => lifecycle::HIBERNATED,
    }
}

/// Whether the pod already shows `runtime` for its current generation stamp.
fn published(pod: &Pod, runtime: &Runtime) -> bool {
    let (id, ip) = match runtime {
        Runtime::Live { id, ip } => (
            Some(id.as_str()),
            Some(ip.as_str()).filter(|s| !s.is_empty()),
        ),
        _ => (None, None),
    };
    state::lifecycle_state(pod) == Some(state_of(runtime))
        && state::lifecycle_generation(pod) == state::generation_stamp(pod)
        && state::lifecycle_message(pod).is_none()
        && state::vm_id(pod) == id
        && state::vm_ip(pod) == ip
}

/// Whether the pod's snapshot policy asks for `:latest` on delete: `always` (the default) →
/// yes; `main-only` → only the main (slot 0, role `main`); `never` → no.
pub(crate) fn policy_pushes_latest(pod: &Pod) -> bool {
    match state::annotation(pod, names::ANN_SNAPSHOT_POLICY) {
        Some("never") => false,
        Some("main-only") => {
            state::vm_name(pod).is_some_and(|vm| vm.ends_with("-0"))
                && state::label(pod, names::LABEL_ROLE) == Some(names::Role::Main.as_str())
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(extra: &str) -> Pod {
        let yaml = format!(
            r#"
metadata:
  name: p
  uid: u1
  finalizers: [vksim.flotilla.dev/vm-teardown]
  labels: {{cocoonset.cocoonstack.io/role: main}}
  annotations:
    vm.cocoonstack.io/name: vk-ns-demo-0
    cocoonset.cocoonstack.io/generation: "2"
{extra}
spec: {{nodeName: kwok-node-0, containers: []}}
"#
        );
        serde_yaml::from_str(&yaml).expect("pod yaml")
    }

    fn live() -> Vm {
        Vm {
            runtime: Runtime::Live {
                id: "vm-1".into(),
                ip: "127.1.0.5".into(),
            },
            failed_at: None,
            deleted: false,
        }
    }

    fn with(runtime: Runtime) -> Vm {
        Vm { runtime, ..live() }
    }

    const READY_2: &str = r#"    vm.cocoonstack.io/id: vm-1
    vm.cocoonstack.io/ip: 127.1.0.5
    vm.cocoonstack.io/lifecycle-state: ready
    vm.cocoonstack.io/lifecycle-observed-generation: "2""#;

    #[test]
    fn a_bound_pod_is_held_before_anything_else() {
        let none = FaultSet::default();
        let mut unheld = pod("    vm.cocoonstack.io/restore-from-hibernate: \"true\"");
        unheld.metadata.finalizers = Some(vec!["example.com/other".into()]);
        let vm = Vm::from_pod(&unheld);
        assert_eq!(decide(&vm, &unheld, false, false, &none), Step::Hold);
        unheld.spec.as_mut().expect("spec").node_name = None;
        assert_eq!(
            decide(&vm, &unheld, false, false, &none),
            Step::Nothing,
            "an unbound pod is not ours yet"
        );
        let mut deleted = pod("");
        deleted.metadata.finalizers = None;
        let torn_down = Vm {
            deleted: true,
            ..live()
        };
        assert_eq!(
            decide(&torn_down, &deleted, true, false, &none),
            Step::Nothing,
            "a pod deleted before it was held has nothing to release"
        );
    }

    #[test]
    fn a_new_pod_is_created_from_the_right_source() {
        let none = FaultSet::default();
        let fresh = pod("");
        let vm = Vm::from_pod(&fresh);
        assert_eq!(
            decide(&vm, &fresh, false, false, &none),
            Step::Create(Source::Fresh)
        );
        assert_eq!(
            decide(&vm, &fresh, false, true, &none),
            Step::Create(Source::Local)
        );
        let restore = pod("    vm.cocoonstack.io/restore-from-hibernate: \"true\"");
        assert_eq!(
            decide(&vm, &restore, false, false, &none),
            Step::Create(Source::Registry)
        );
        let unbound: Pod = serde_yaml::from_str("metadata: {name: p}").expect("pod");
        assert_eq!(decide(&vm, &unbound, false, false, &none), Step::Nothing);
        let mut starting = fresh.clone();
        starting.status = serde_yaml::from_str("phase: Pending").expect("status");
        assert_eq!(decide(&vm, &starting, false, false, &none), Step::Nothing);
        starting.status =
            serde_yaml::from_str("{phase: Pending, podIP: 127.1.0.9}").expect("status");
        assert_eq!(
            decide(&vm, &starting, false, false, &none),
            Step::Create(Source::Fresh)
        );
    }

    #[test]
    fn hibernate_wake_and_republish() {
        let none = FaultSet::default();
        let ready = pod(READY_2);
        assert_eq!(decide(&live(), &ready, false, false, &none), Step::Nothing);
        let flagged = pod(&format!(
            "{READY_2}\n    vm.cocoonstack.io/hibernate: \"true\""
        ));
        assert_eq!(
            decide(&live(), &flagged, false, false, &none),
            Step::Hibernate { fail: None }
        );
        let hib = with(Runtime::Hibernated);
        assert_eq!(
            decide(&hib, &ready, false, false, &none),
            Step::Wake(Source::Registry)
        );
        let restamped = pod(&READY_2.replace("\"2\"", "\"1\""));
        assert_eq!(
            decide(&live(), &restamped, false, false, &none),
            Step::Publish
        );
        let hibernated = pod(
            "    vm.cocoonstack.io/hibernate: \"true\"\n    vm.cocoonstack.io/lifecycle-state: hibernated\n    vm.cocoonstack.io/lifecycle-observed-generation: \"2\"",
        );
        assert_eq!(
            decide(&hib, &hibernated, false, false, &none),
            Step::Nothing
        );
        assert_eq!(Vm::from_pod(&hibernated).runtime, Runtime::Hibernated);
    }

    #[test]
    fn a_pod_with_an_id_is_adopted_and_reported_ready() {
        let none = FaultSet::default();
        let static_toolbox =
            pod("    vm.cocoonstack.io/id: vm-1\n    vm.cocoonstack.io/ip: 127.1.0.5");
        let vm = Vm::from_pod(&static_toolbox);
        assert_eq!(vm.runtime, live().runtime);
        assert_eq!(
            decide(&vm, &static_toolbox, false, false, &none),
            Step::Publish
        );
    }

    #[test]
    fn failed_is_sticky_for_its_generation_only() {
        let none = FaultSet::default();
        let p = pod(
            "    vm.cocoonstack.io/lifecycle-state: failed\n    vm.cocoonstack.io/lifecycle-observed-generation: \"2\"",
        );
        let vm = Vm::from_pod(&p);
        assert_eq!(vm.failed_at, Some(2));
        assert_eq!(decide(&vm, &p, false, false, &none), Step::Nothing);
        let older = Vm {
            failed_at: Some(1),
            ..vm
        };
        assert_eq!(
            decide(&older, &p, false, false, &none),
            Step::Create(Source::Fresh)
        );
    }

    #[test]
    fn faults_shape_the_step() {
        let p = pod(&format!(
            "{READY_2}\n    vm.cocoonstack.io/hibernate: \"true\""
        ));
        let stalled = FaultSet {
            stalled: true,
            ..FaultSet::default()
        };
        assert_eq!(decide(&live(), &p, false, false, &stalled), Step::Nothing);
        assert_eq!(decide(&live(), &p, true, false, &stalled), Step::Nothing);
        let failing = FaultSet {
            fail_next_hibernate: Some("rm".into()),
            fail_create: Some("boot".into()),
            ..FaultSet::default()
        };
        let want = Step::Hibernate {
            fail: Some("rm".into()),
        };
        assert_eq!(decide(&live(), &p, false, false, &failing), want);
        let absent = with(Runtime::Absent);
        assert_eq!(
            decide(&absent, &p, false, false, &failing),
            Step::FailCreate("boot".into())
        );
    }

    #[test]
    fn deletes_push_latest_by_policy() {
        let none = FaultSet::default();
        let step = |extra: &str, vm: &Vm| decide(vm, &pod(extra), true, false, &none);
        let push = |keep| Step::Delete {
            push_latest: true,
            keep_local: keep,
        };
        let no_push = Step::Delete {
            push_latest: false,
            keep_local: false,
        };
        assert_eq!(step("", &live()), push(false));
        let always = "    cocoonset.cocoonstack.io/snapshot-policy: always";
        assert_eq!(step(always, &live()), push(false));
        let never = "    cocoonset.cocoonstack.io/snapshot-policy: never";
        assert_eq!(step(never, &live()), no_push);
        let main_only = "    cocoonset.cocoonstack.io/snapshot-policy: main-only";
        assert_eq!(step(main_only, &live()), push(false));
        assert_eq!(step("", &with(Runtime::Hibernated)), no_push);
        let keep = "    vm.cocoonstack.io/keep-snapshot-on-delete: \"true\"";
        assert_eq!(step(keep, &live()), push(true));
        let deleted = Vm {
            deleted: true,
            ..live()
        };
        assert_eq!(
            step("", &deleted),
            Step::Nothing,
            "gone: nothing to release"
        );
        // Terminating but still there (held): torn down first, then released.
        let mut terminating = pod("");
        terminating.metadata.deletion_timestamp =
            Some(serde_yaml::from_str("'2026-01-01T00:00:00Z'").expect("time"));
        assert_eq!(
            decide(&live(), &terminating, false, false, &none),
            push(false)
        );
        assert_eq!(
            decide(&deleted, &terminating, false, false, &none),
            Step::Release
        );
        let stalled = FaultSet {
            stalled: true,
            ..FaultSet::default()
        };
        assert_eq!(
            decide(&deleted, &terminating, false, false, &stalled),
            Step::Nothing,
            "a stalled VM keeps its pod"
        );
    }

    #[test]
    fn main_only_skips_everything_but_the_main() {
        let sub: Pod = serde_yaml::from_str(
            r#"
metadata:
  labels: {cocoonset.cocoonstack.io/role: sub-agent}
  annotations:
    vm.cocoonstack.io/name: vk-ns-demo-1
    cocoonset.cocoonstack.io/snapshot-policy: main-only
"#,
        )
        .expect("pod");
        assert!(!policy_pushes_latest(&sub));
    }
}
