//! Process classes, process counts, process-group IDs and the per-group status the operator
//! keeps in `status.processGroups` (upstream's `ProcessGroupStatus` and its conditions).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::{is_false, is_zero};

/// The class of an fdbserver process (`--class`), also the class of its process group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(transparent)]
pub struct ProcessClass(pub String);

impl JsonSchema for ProcessClass {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "ProcessClass".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string"})
    }
}

macro_rules! classes {
    ($($konst:ident = $name:literal),* $(,)?) => {
        impl ProcessClass {
            $(
                #[doc = concat!("`", $name, "`")]
                pub const $konst: &'static str = $name;
            )*
        }
    };
}

classes! {
    STORAGE = "storage",
    LOG = "log",
    TRANSACTION = "transaction",
    STATELESS = "stateless",
    GENERAL = "general",
    CLUSTER_CONTROLLER = "cluster_controller",
    TEST = "test",
    COORDINATOR = "coordinator",
    PROXY = "proxy",
    COMMIT_PROXY = "commit_proxy",
    GRV_PROXY = "grv_proxy",
    BACKUP = "backup",
}

impl ProcessClass {
    /// A class from its name.
    pub fn new(name: impl Into<String>) -> Self {
        ProcessClass(name.into())
    }

    /// The class name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// No class.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether processes of this class store data (and get a PVC): storage, log, transaction,
    /// coordinator.
    pub fn is_stateful(&self) -> bool {
        self.0 == Self::STORAGE || self.is_log_process() || self.0 == Self::COORDINATOR
    }

    /// Whether the class can be part of the transaction system (anything but storage/general).
    pub fn is_transaction(&self) -> bool {
        self.0 != Self::STORAGE && self.0 != Self::GENERAL
    }

    /// log or transaction.
    pub fn is_log_process(&self) -> bool {
        self.0 == Self::LOG || self.0 == Self::TRANSACTION
    }

    /// The class as it appears in resource names (`_` → `-`).
    pub fn for_pod_name(&self) -> String {
        self.0.replace('_', "-")
    }

    /// The environment variable carrying the servers-per-pod count (`STORAGE_SERVERS_PER_POD`).
    pub fn servers_per_pod_env_name(&self) -> String {
        format!("{}_SERVERS_PER_POD", self.0.to_uppercase())
    }
}

impl fmt::Display for ProcessClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ProcessClass {
    fn from(s: &str) -> Self {
        ProcessClass(s.to_owned())
    }
}

/// The ID of a process group: `[<prefix>-]<class>-<number>`, or `*` in buggify lists.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(transparent)]
pub struct ProcessGroupId(pub String);

/// The schema pattern of a process-group ID.
pub const PROCESS_GROUP_ID_PATTERN: &str = r"^(([\w-]+)-(\d+)|\*)$";

impl JsonSchema for ProcessGroupId {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "ProcessGroupID".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "maxLength": 63, "pattern": PROCESS_GROUP_ID_PATTERN})
    }
}

/// The locality key processes carry their process-group ID in.
pub const LOCALITY_INSTANCE_ID: &str = "locality_instance_id";

impl ProcessGroupId {
    /// An ID from its text.
    pub fn new(id: impl Into<String>) -> Self {
        ProcessGroupId(id.into())
    }

    /// `<prefix>-<class>-<n>`, or `<class>-<n>` without a prefix.
    pub fn build(prefix: &str, class: &ProcessClass, n: u32) -> Self {
        if prefix.is_empty() {
            ProcessGroupId(format!("{class}-{n}"))
        } else {
            ProcessGroupId(format!("{prefix}-{class}-{n}"))
        }
    }

    /// The ID's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// No ID.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number after the last `-`, if there is one.
    pub fn number(&self) -> Option<u32> {
        let (head, tail) = self.0.rsplit_once('-')?;
        (!head.is_empty()).then(|| tail.parse().ok()).flatten()
    }

    /// The class: the second-to-last `-`-separated token.
    pub fn process_class(&self) -> ProcessClass {
        let parts: Vec<&str> = self.0.split('-').collect();
        if parts.len() < 2 {
            return ProcessClass::default();
        }
        ProcessClass::new(parts[parts.len() - 2])
    }

    /// `locality_instance_id:<id>`, the exclusion string of the group in locality mode.
    pub fn exclusion_string(&self) -> String {
        format!("{LOCALITY_INSTANCE_ID}:{}", self.0)
    }
}

impl fmt::Display for ProcessGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ProcessGroupId {
    fn from(s: &str) -> Self {
        ProcessGroupId(s.to_owned())
    }
}

/// Number of process groups (pods) per class. 0 lets the operator derive the count from the
/// database configuration; -1 means none.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ProcessCounts {
    /// Processes without a class.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unset: i64,
    /// Storage servers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub storage: i64,
    /// Transaction-class processes (logs and stateless roles).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub transaction: i64,
    /// Resolvers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resolution: i64,
    /// Deprecated: use `test`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tester: i64,
    /// Test processes (never excluded, never coordinators).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub test: i64,
    /// Proxies (before 7.0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub proxy: i64,
    /// Commit proxies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commit_proxy: i64,
    /// GRV proxies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grv_proxy: i64,
    /// Master.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub master: i64,
    /// Stateless processes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stateless: i64,
    /// Log servers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log: i64,
    /// Cluster controllers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cluster_controller: i64,
    /// Log routers.
    #[serde(rename = "router", default, skip_serializing_if = "is_zero")]
    pub log_router: i64,
    /// Fast-restore processes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fast_restore: i64,
    /// Data distributors.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub data_distributor: i64,
    /// Coordinator-class processes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub coordinator: i64,
    /// Ratekeepers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ratekeeper: i64,
    /// Storage caches.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub storage_cache: i64,
    /// Backup workers.
    #[serde(rename = "backup", default, skip_serializing_if = "is_zero")]
    pub backup_worker: i64,
}

impl ProcessCounts {
    fn slots(&mut self) -> [(&'static str, &mut i64); 20] {
        [
            ("unset", &mut self.unset),
            ("storage", &mut self.storage),
            ("transaction", &mut self.transaction),
            ("resolution", &mut self.resolution),
            ("tester", &mut self.tester),
            ("test", &mut self.test),
            ("proxy", &mut self.proxy),
            ("commit_proxy", &mut self.commit_proxy),
            ("grv_proxy", &mut self.grv_proxy),
            ("master", &mut self.master),
            ("stateless", &mut self.stateless),
            ("log", &mut self.log),
            ("cluster_controller", &mut self.cluster_controller),
            ("router", &mut self.log_router),
            ("fast_restore", &mut self.fast_restore),
            ("data_distributor", &mut self.data_distributor),
            ("coordinator", &mut self.coordinator),
            ("ratekeeper", &mut self.ratekeeper),
            ("storage_cache", &mut self.storage_cache),
            ("backup", &mut self.backup_worker),
        ]
    }

    /// Every class with a positive count, by class name (upstream's `Map()`).
    pub fn map(&self) -> BTreeMap<ProcessClass, i64> {
        let mut copy = self.clone();
        copy.slots()
            .into_iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| (ProcessClass::new(k), *v))
            .collect()
    }

    /// The count of `class` (0 for a class with no slot).
    pub fn get(&self, class: &ProcessClass) -> i64 {
        let mut copy = self.clone();
        copy.slots()
            .into_iter()
            .find(|(k, _)| *k == class.as_str())
            .map_or(0, |(_, v)| *v)
    }

    /// Adds `n` to the count of `class`; a class with no slot is ignored.
    pub fn increase(&mut self, class: &ProcessClass, n: i64) {
        if let Some((_, v)) = self.slots().into_iter().find(|(k, _)| *k == class.as_str()) {
            *v += n;
        }
    }

    /// Sum of the positive counts.
    pub fn total(&self) -> i64 {
        self.map().values().sum()
    }
}

/// A degraded condition of a process group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ProcessGroupCondition {
    /// Name of the condition.
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// When the condition was first observed (Unix seconds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timestamp: i64,
}

/// The condition types of a process group, by name.
pub mod condition {
    /// The pod spec differs from the desired one.
    pub const INCORRECT_POD_SPEC: &str = "IncorrectPodSpec";
    /// The pod's labels or annotations differ from the desired ones.
    pub const INCORRECT_POD_METADATA: &str = "IncorrectPodMetadata";
    /// The pod has not applied the current config map.
    pub const INCORRECT_CONFIG_MAP: &str = "IncorrectConfigMap";
    /// A process runs with a command line other than the desired one.
    pub const INCORRECT_COMMAND_LINE: &str = "IncorrectCommandLine";
    /// The pod keeps failing (failed phase, a container not ready, stuck terminating).
    pub const POD_FAILING: &str = "PodFailing";
    /// The group has no pod.
    pub const MISSING_POD: &str = "MissingPod";
    /// The group has no PVC.
    pub const MISSING_PVC: &str = "MissingPVC";
    /// The group has no service.
    pub const MISSING_SERVICE: &str = "MissingService";
    /// A process of the group does not report to the database.
    pub const MISSING_PROCESSES: &str = "MissingProcesses";
    /// The group's resources are being deleted.
    pub const RESOURCES_TERMINATING: &str = "ResourcesTerminating";
    /// The pod's sidecar (or monitor) could not be reached.
    pub const SIDECAR_UNREACHABLE: &str = "SidecarUnreachable";
    /// The pod is Pending.
    pub const POD_PENDING: &str = "PodPending";
    /// Used in metrics only.
    pub const READY: &str = "Ready";
    /// The pod's node carries a taint.
    pub const NODE_TAINT_DETECTED: &str = "NodeTaintDetected";
    /// The pod's node carried a replacing taint long enough.
    pub const NODE_TAINT_REPLACING: &str = "NodeTaintReplacing";
    /// A process of the group is excluded.
    pub const PROCESS_IS_MARKED_AS_EXCLUDED: &str = "ProcessIsMarkedAsExcluded";
    /// A process reported an I/O error.
    pub const PROCESS_HAS_IO_ERROR: &str = "ProcessHasIOError";
    /// The sidecar container runs another image than desired.
    pub const INCORRECT_SIDECAR_IMAGE: &str = "IncorrectSidecarImage";
    /// A process reports a high run-loop busy value.
    pub const PROCESS_HAS_HIGH_RUN_LOOP_BUSY: &str = "ProcessHasHighRunLoopBusy";

    /// Conditions that trigger an automatic replacement once old enough.
    pub const NEED_REPLACEMENT: [&str; 10] = [
        MISSING_PROCESSES,
        POD_FAILING,
        MISSING_POD,
        MISSING_PVC,
        MISSING_SERVICE,
        POD_PENDING,
        NODE_TAINT_REPLACING,
        PROCESS_IS_MARKED_AS_EXCLUDED,
        PROCESS_HAS_IO_ERROR,
        SIDECAR_UNREACHABLE,
    ];
}

/// What the operator knows about one process group (one pod).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessGroupStatus {
    /// The ID of the process group.
    #[serde(
        rename = "processGroupID",
        default,
        skip_serializing_if = "ProcessGroupId::is_empty"
    )]
    pub process_group_id: ProcessGroupId,
    /// The class of the process group.
    #[serde(default, skip_serializing_if = "ProcessClass::is_empty")]
    pub process_class: ProcessClass,
    /// The addresses (pod IPs) the group has been known to have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// When the group was marked for removal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal_timestamp: Option<Time>,
    /// When the group was found fully excluded (only used within reconciliation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusion_timestamp: Option<Time>,
    /// Whether exclusion is skipped, allowing removal without exclusion.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclusion_skipped: bool,
    /// The degraded conditions the group is in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_group_conditions: Vec<ProcessGroupCondition>,
    /// The last fault domain (zoneid) seen for the group's processes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 512))]
    pub fault_domain: String,
}

impl ProcessGroupStatus {
    /// A new group: `MissingProcesses`, `MissingPod` (and `MissingPVC` when stateful), all at
    /// `now`.
    pub fn new(id: ProcessGroupId, class: ProcessClass, now: Timestamp) -> Self {
        let mut conditions = vec![
            cond(condition::MISSING_PROCESSES, now),
            cond(condition::MISSING_POD, now),
        ];
        if class.is_stateful() {
            conditions.push(cond(condition::MISSING_PVC, now));
        }
        ProcessGroupStatus {
            process_group_id: id,
            process_class: class,
            process_group_conditions: conditions,
            ..Default::default()
        }
    }

    /// Excluded: the exclusion was confirmed, or it is skipped.
    pub fn is_excluded(&self) -> bool {
        self.exclusion_timestamp.is_some() || self.exclusion_skipped
    }

    /// Marked for removal.
    pub fn is_marked_for_removal(&self) -> bool {
        self.removal_timestamp.is_some()
    }

    /// Marks the group for removal at `now` unless it already is.
    pub fn mark_for_removal(&mut self, now: Timestamp) {
        if self.removal_timestamp.is_none() {
            self.removal_timestamp = Some(Time(now));
        }
    }

    /// Records the exclusion at `now` (once) and drops every condition but
    /// `ResourcesTerminating`.
    pub fn set_exclude(&mut self, now: Timestamp) {
        if self.exclusion_timestamp.is_some() {
            return;
        }
        self.exclusion_timestamp = Some(Time(now));
        self.process_group_conditions
            .retain(|c| c.kind == condition::RESOURCES_TERMINATING);
    }

    /// Whether the group has condition `kind`.
    pub fn has_condition(&self, kind: &str) -> bool {
        self.process_group_conditions.iter().any(|c| c.kind == kind)
    }

    /// When condition `kind` was first seen.
    pub fn condition_time(&self, kind: &str) -> Option<i64> {
        self.process_group_conditions
            .iter()
            .find(|c| c.kind == kind)
            .map(|c| c.timestamp)
    }

    /// Sets (keeping the first timestamp) or clears condition `kind`. A group marked for
    /// removal and excluded only ever gains `ResourcesTerminating`.
    pub fn update_condition(&mut self, kind: &str, set: bool, now: Timestamp) {
        if !set {
            self.process_group_conditions.retain(|c| c.kind != kind);
            return;
        }
        if self.has_condition(kind) {
            return;
        }
        if self.is_marked_for_removal()
            && self.is_excluded()
            && kind != condition::RESOURCES_TERMINATING
        {
            return;
        }
        self.process_group_conditions.push(cond(kind, now));
    }

    /// Moves condition `kind`'s first-seen time to `timestamp` (Unix seconds); nothing when
    /// the group lacks it.
    pub fn set_condition_time(&mut self, kind: &str, timestamp: i64) {
        if let Some(c) = self
            .process_group_conditions
            .iter_mut()
            .find(|c| c.kind == kind)
        {
            c.timestamp = timestamp;
        }
    }

    /// Replaces the addresses with the non-empty ones of `addresses`, or, with
    /// `include_old`, appends them (deduplicated, order kept).
    pub fn add_addresses(&mut self, addresses: &[String], include_old: bool) {
        let fresh: Vec<String> = addresses
            .iter()
            .filter(|a| !a.is_empty())
            .cloned()
            .collect();
        if include_old {
            let mut all = std::mem::take(&mut self.addresses);
            for a in fresh {
                if !all.contains(&a) {
                    all.push(a);
                }
            }
            all.retain(|a| !a.is_empty());
            self.addresses = all;
        } else if !fresh.is_empty() {
            self.addresses = fresh;
        }
    }

    /// The pod name of the group: `<cluster>-<class-for-names>-<n>` (a prefix is dropped).
    pub fn pod_name(&self, cluster: &str) -> String {
        let id = self.process_group_id.as_str().replace('_', "-");
        let class = self.process_class.for_pod_name();
        let tail = id.find(&class).map_or(id.as_str(), |i| &id[i..]);
        format!("{cluster}-{tail}")
    }

    /// The PVC name of a stateful group (`<pod>-data`).
    pub fn pvc_name(&self, cluster: &str) -> Option<String> {
        self.process_class
            .is_stateful()
            .then(|| format!("{}-data", self.pod_name(cluster)))
    }

    /// The exclusion string in locality mode.
    pub fn exclusion_string(&self) -> String {
        self.process_group_id.exclusion_string()
    }

    /// The earliest replacement-worthy condition older than its detection time, if any:
    /// `(condition, first seen)`. `NodeTaintReplacing` uses its own time window.
    pub fn needs_replacement(
        &self,
        failure_time_secs: i64,
        taint_replacement_secs: i64,
        now: Timestamp,
    ) -> Option<(String, i64)> {
        if self.is_marked_for_removal() {
            return None;
        }
        let mut failure: Option<(String, i64)> = None;
        let mut taint: Option<(String, i64)> = None;
        for c in &self.process_group_conditions {
            if !condition::NEED_REPLACEMENT.contains(&c.kind.as_str()) {
                continue;
            }
            let slot = if c.kind == condition::NODE_TAINT_REPLACING {
                &mut taint
            } else {
                &mut failure
            };
            if slot.as_ref().is_none_or(|(_, t)| c.timestamp < *t) {
                *slot = Some((c.kind.clone(), c.timestamp));
            }
        }
        let now = now.as_second();
        failure
            .filter(|(_, t)| *t < now - failure_time_secs)
            .or_else(|| taint.filter(|(_, t)| *t < now - taint_replacement_secs))
    }
}

fn cond(kind: &str, now: Timestamp) -> ProcessGroupCondition {
    ProcessGroupCondition {
        kind: kind.to_owned(),
        timestamp: now.as_second(),
    }
}
