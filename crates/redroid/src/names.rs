//! Every label, annotation, finalizer, field manager, event reporter and child-name rule of the
//! redroid operator, in one place.

/// `app.kubernetes.io/managed-by` on everything the operator creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value (the upstream operator's, so existing selectors keep working).
pub const MANAGED_BY: &str = "redroid-operator";
/// The instance a Pod, Service, Job or CronJob belongs to or targets.
pub const INSTANCE_LABEL: &str = "redroid.isning.moe/instance";
/// The instance's `spec.index`, on instance Pods.
pub const INSTANCE_INDEX_LABEL: &str = "redroid.isning.moe/instance-index";
/// The task a Job, CronJob or Job pod belongs to.
pub const TASK_LABEL: &str = "redroid.isning.moe/task";
/// `instance` on instance Pods, `task` on task Jobs/CronJobs and their pods. The instance
/// Service selects `component=instance` only, so task pods never receive its traffic
/// (upstream selected task pods too).
pub const COMPONENT_LABEL: &str = "redroid.isning.moe/component";
/// [`COMPONENT_LABEL`] value of instance Pods.
pub const COMPONENT_INSTANCE: &str = "instance";
/// [`COMPONENT_LABEL`] value of task Jobs, CronJobs and their pods.
pub const COMPONENT_TASK: &str = "task";
/// `true` on task Jobs/pods that run their own redroid sidecar on the instance's data
/// (`suspendInstance` tasks). While such a pod is unfinished the instance never starts.
pub const SIDECAR_LABEL: &str = "redroid.isning.moe/data-sidecar";

/// Annotations set by `kubectl redroid task trigger` on manual Jobs.
pub const TRIGGERED_BY_ANNOTATION: &str = "redroid.isning.moe/triggered-by";
/// The CronJob a manually triggered Job was made from.
pub const CRONJOB_ANNOTATION: &str = "redroid.isning.moe/cronjob";

/// Finalizer of tasks: on deletion the task removes the overrides it set on instances.
pub const TASK_FINALIZER: &str = "redroid.isning.moe/task-finalizer";
/// Finalizer of one-shot Jobs: the Job stays until the task has recorded how it ended in
/// `status.jobs` (else `ttlSecondsAfterFinished: 0`, a person or garbage collection could
/// remove a finished Job before its outcome is known, and it would be reported lost).
pub const JOB_OUTCOME_FINALIZER: &str = "redroid.isning.moe/job-outcome";
/// Finalizer the upstream operator put on instances. We need none (owner references clean up
/// the Pod and Service), but remove it from instances being deleted so migrated objects do
/// not hang.
pub const LEGACY_INSTANCE_FINALIZER: &str = "redroid.isning.moe/instance-finalizer";

/// Server-side apply field manager and event reporter.
pub const FIELD_MANAGER: &str = "redroid-operator";
/// Controller name (metrics label) of instances.
pub const INSTANCE_CONTROLLER: &str = "redroidinstance";
/// Controller name (metrics label) of tasks.
pub const TASK_CONTROLLER: &str = "redroidtask";

/// Container name of redroid, in instance Pods and task sidecars.
pub const REDROID_CONTAINER: &str = "redroid";
/// Default kmsg-tools image when neither the instance nor `RELATED_IMAGE_KMSG_TOOLS` sets one.
pub const DEFAULT_KMSG_TOOLS_IMAGE: &str = "ghcr.io/isning/redroid-operator/kmsg-tools:latest";

/// Actor recorded in overrides a task sets: `task/<name>`.
pub fn task_actor(task: &str) -> String {
    format!("task/{task}")
}

/// Whether `name` is a DNS-1035 label (lower-case letters, digits and `-`, starting with a
/// letter, at most 63 characters): what a Service name must be.
pub fn is_dns1035_label(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase()) && kit::names::is_dns1123_label(name)
}

/// Prefix of a derived Service name (upstream named every instance Service `redroid-instance-…`).
pub const DERIVED_SERVICE_PREFIX: &str = "redroid-";

/// Name of the instance's Service. The instance's own name when it is a valid Service name
/// (a DNS-1035 label), so the ADB address reads like the instance. Otherwise (a leading digit,
/// a `.`, more than 63 characters: names the API accepts for a RedroidInstance but not for a
/// Service) a name derived from it: `redroid-` + the name with invalid characters turned into
/// `-` + `-` + 8 hex of SHA-256 of the name, cut to 63 characters. Deterministic, and distinct
/// for distinct names.
pub fn service_name(instance: &str) -> String {
    if is_dns1035_label(instance) {
        instance.to_string()
    } else {
        kit::names::label_with_hash(DERIVED_SERVICE_PREFIX, instance)
    }
}

/// The value of [`INSTANCE_LABEL`] for an instance: its name, or for a name over 63
/// characters (the limit of label values) the name cut with a hash suffix.
pub fn instance_label(instance: &str) -> String {
    kit::names::truncate_with_hash(instance, kit::names::LABEL_MAX)
}

/// The stable ADB address of an instance: `<service>.<namespace>.svc.cluster.local:<port>`.
pub fn adb_address(instance: &str, namespace: &str, port: i32) -> String {
    format!(
        "{}.{namespace}.svc.cluster.local:{port}",
        service_name(instance)
    )
}

/// Hash of the instance Pod's template (labels and spec as built), on instance Pods. A Pod
/// whose hash differs from the desired one is recreated.
pub const POD_TEMPLATE_HASH_ANNOTATION: &str = "redroid.isning.moe/pod-template-hash";

/// Name of an instance Pod: `<instance>-pod-<first 8 hex of sha256(uid + template hash)>`,
/// at most 63 characters. Deterministic, so a duplicate create fails with AlreadyExists
/// instead of starting a second Android on the same data.
pub fn instance_pod_name(instance: &str, uid: &str, template_hash: &str) -> String {
    kit::names::with_hash_suffix(
        &format!("{instance}-pod"),
        &format!("{uid}{template_hash}"),
        kit::names::LABEL_MAX,
    )
}

/// On task CronJobs: hash of the CronJob the task controller last applied. It re-applies only
/// when the hash differs, so a reconcile with nothing to change makes no write.
pub const TASK_SPEC_HASH_ANNOTATION: &str = "redroid.isning.moe/task-spec-hash";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adb_address_is_the_service_dns_name() {
        assert_eq!(
            adb_address("android-0", "games", 5555),
            "android-0.games.svc.cluster.local:5555"
        );
        assert_eq!(task_actor("maa"), "task/maa");
    }

    #[test]
    fn service_and_label_names_are_always_valid() {
        let long = format!("android-{}", "x".repeat(70));
        let dotted = "android.eu-1";
        let cases: [(&str, Option<&str>); 5] = [
            ("android-0", Some("android-0")),
            ("0android", None),
            (dotted, None),
            (&long, None),
            ("a", Some("a")),
        ];
        for (name, kept) in cases {
            let svc = service_name(name);
            assert!(is_dns1035_label(&svc), "{name} -> {svc}");
            assert_eq!(svc == name, kept.is_some(), "{name} -> {svc}");
            assert_eq!(service_name(name), svc, "deterministic");
            let label = instance_label(name);
            assert!(label.len() <= 63 && label.ends_with(|c: char| c.is_ascii_alphanumeric()));
        }
        assert_eq!(
            service_name("0android"),
            format!("redroid-0android-{}", kit::names::short_hash("0android"))
        );
        assert_eq!(
            service_name(dotted),
            format!("redroid-android-eu-1-{}", kit::names::short_hash(dotted))
        );
        assert_ne!(service_name("a.b"), service_name("a-b"));
        assert_eq!(instance_label("android-0"), "android-0");
        assert_eq!(instance_label(&long).len(), 63);
        assert_ne!(instance_label(&long), instance_label(&format!("{long}y")));
        assert!(adb_address("0android", "games", 5555).starts_with("redroid-0android-"));
    }
}
