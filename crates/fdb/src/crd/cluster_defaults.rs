//! Effective values of a FoundationDBCluster's fields: what upstream's getters return when a
//! field is unset (reference §1, §3), and the derived quantities every step needs (process
//! counts, coordinator count, lock identity). Pure; nothing here writes the object.

use std::time::Duration;

use kube::ResourceExt;

use super::{
    DatabaseConfiguration, FdbVersion, FoundationDBCluster, ProcessClass, ProcessCounts,
    ProcessGroupId, ProcessSettings, REDUNDANCY_THREE_DATA_HALL, RoleCounts,
    desired_fault_tolerance, minimum_fault_domains,
};

/// Label carrying the cluster's name.
pub const CLUSTER_LABEL: &str = "foundationdb.org/fdb-cluster-name";
/// Label carrying a resource's process-group ID.
pub const PROCESS_GROUP_ID_LABEL: &str = "foundationdb.org/fdb-process-group-id";
/// Label carrying a resource's process class.
pub const PROCESS_CLASS_LABEL: &str = "foundationdb.org/fdb-process-class";
/// The fault-domain key that makes every pod its own zone.
pub const NONE_FAULT_DOMAIN_KEY: &str = "foundationdb.org/none";
/// The fault-domain key that makes the whole Kubernetes cluster one zone.
pub const KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY: &str = "foundationdb.org/kubernetes-cluster";
/// The default lock-key prefix.
pub const DEFAULT_LOCK_PREFIX: &str = "\u{ff}\u{2}/org.foundationdb.kubernetes-operator";
/// The default client log group that never blocks an upgrade.
pub const OPERATOR_LOG_GROUP: &str = "fdb-kubernetes-operator";
/// The environment variable with the zone ID, unless `faultDomain.valueFrom` names another.
pub const ZONE_ID_ENV: &str = "FDB_ZONE_ID";

/// Upper bound (inclusive) of the random number in a process-group ID.
pub const MAX_PROCESS_GROUP_ID_NUM: u32 = 99_999;

impl FoundationDBCluster {
    /// Settings of `class`, falling back field by field to `general` (claim templates only
    /// for stateful classes).
    pub fn process_settings(&self, class: &ProcessClass) -> ProcessSettings {
        let mut merged = ProcessSettings::default();
        let general = ProcessClass::new(ProcessClass::GENERAL);
        for entry in [
            self.spec.processes.get(class),
            self.spec.processes.get(&general),
        ]
        .into_iter()
        .flatten()
        {
            if merged.pod_template.is_none() {
                merged.pod_template = entry.pod_template.clone();
            }
            if merged.volume_claim_template.is_none() && class.is_stateful() {
                merged.volume_claim_template = entry.volume_claim_template.clone();
            }
            if merged.custom_parameters.is_none() {
                merged.custom_parameters = entry.custom_parameters.clone();
            }
        }
        merged
    }

    /// F: replicas that may be lost (0/1/2/2).
    pub fn desired_fault_tolerance(&self) -> i64 {
        desired_fault_tolerance(&self.spec.database_configuration.redundancy_mode)
    }

    /// Fault domains the database needs (1/2/3/3).
    pub fn minimum_fault_domains(&self) -> i64 {
        minimum_fault_domains(&self.spec.database_configuration.redundancy_mode)
    }

    /// 9 with several usable regions or three_data_hall, else 2R-1 (1/3/5).
    pub fn desired_coordinator_count(&self) -> usize {
        let db = &self.spec.database_configuration;
        if db.usable_regions > 1 || db.redundancy_mode == REDUNDANCY_THREE_DATA_HALL {
            return 9;
        }
        (self.minimum_fault_domains() + self.desired_fault_tolerance()) as usize
    }

    /// Role counts with defaults.
    pub fn role_counts_with_defaults(&self) -> RoleCounts {
        self.spec
            .database_configuration
            .role_counts_with_defaults(self.desired_fault_tolerance())
    }

    /// The configuration `configure` should reach.
    pub fn desired_database_configuration(&self) -> DatabaseConfiguration {
        DatabaseConfiguration::desired(&self.spec.database_configuration)
    }

    /// Process groups (pods) per class, every 0 derived as upstream does (reference §3.1):
    /// storage from the storage role count without F; log from logs/remote logs plus F;
    /// stateless from the stateless roles plus F; -1 for none.
    pub fn process_counts_with_defaults(&self) -> ProcessCounts {
        let roles = self.role_counts_with_defaults();
        let mut pc = self.spec.process_counts.clone();
        let db = &self.spec.database_configuration;
        let (mut is_satellite, mut is_main, mut satellite_logs) = (false, false, 0);
        for region in &db.regions {
            for dc in &region.data_centers {
                if dc.id == self.spec.data_center {
                    if dc.satellite == 0 {
                        is_main = true;
                    } else {
                        is_satellite = true;
                        satellite_logs = satellite_logs.max(region.satellite_logs);
                    }
                }
            }
        }
        if is_satellite && !is_main && pc.log == 0 {
            pc.log = 1 + satellite_logs;
            return pc;
        }
        if pc.storage == 0 {
            pc.storage = self.process_count(false, &[roles.storage]);
        }
        if pc.log == 0 {
            pc.log = self.process_count(
                true,
                &[
                    from_role(roles.logs + satellite_logs, &[pc.log]),
                    from_role(roles.remote_logs, &[pc.log]),
                ],
            );
        }
        if pc.stateless == 0 {
            let mut primary = from_role(1, &[pc.master])
                + from_role(1, &[pc.cluster_controller])
                + from_role(roles.resolvers, &[pc.resolution])
                + from_role(1, &[pc.ratekeeper])
                + from_role(1, &[pc.data_distributor]);
            if db.separated_proxies() {
                primary += from_role(roles.grv_proxies, &[pc.grv_proxy]);
                primary += from_role(roles.commit_proxies, &[pc.commit_proxy]);
            } else {
                primary += from_role(roles.proxies, &[pc.proxy]);
            }
            pc.stateless = self.process_count(true, &[primary, from_role(roles.log_routers, &[])]);
        }
        pc
    }

    fn process_count(&self, add_fault_tolerance: bool, counts: &[i64]) -> i64 {
        let fd = &self.spec.fault_domain;
        if fd.zone_index < 0 {
            return -1;
        }
        let mut count = counts.iter().copied().max().unwrap_or(0).max(0);
        if count == 0 {
            return -1;
        }
        if add_fault_tolerance {
            count += self.desired_fault_tolerance();
        }
        if fd.key == KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY {
            let zones = if fd.zone_count < 1 {
                self.minimum_fault_domains() + self.desired_fault_tolerance()
            } else {
                fd.zone_count
            };
            let overflow = count % zones;
            count /= zones;
            if fd.zone_index < overflow {
                count += 1;
            }
        }
        count
    }

    /// fdbserver processes per pod of `class`.
    pub fn desired_servers_per_pod(&self, class: &ProcessClass) -> i64 {
        if class.as_str() == ProcessClass::STORAGE {
            self.spec.storage_servers_per_pod.max(1)
        } else if class.is_log_process() {
            self.spec.log_servers_per_pod.max(1)
        } else {
            1
        }
    }

    /// The version the processes run (the spec's until one was observed).
    pub fn running_version(&self) -> String {
        self.status
            .as_ref()
            .map(|s| s.running_version.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| self.spec.version.clone())
    }

    /// A different version is running than the spec asks for.
    pub fn is_being_upgraded(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            !s.running_version.is_empty() && s.running_version != self.spec.version
        })
    }

    /// An upgrade to a protocol-incompatible version is under way.
    pub fn is_being_upgraded_with_incompatible_version(&self) -> bool {
        self.is_being_upgraded() && !self.running_and_desired_compatible()
    }

    /// A protocol-compatible (patch) upgrade is under way.
    pub fn version_compatible_upgrade_in_progress(&self) -> bool {
        self.is_being_upgraded() && self.running_and_desired_compatible()
    }

    fn running_and_desired_compatible(&self) -> bool {
        let running = FdbVersion::parse(&self.running_version()).unwrap_or_default();
        let desired = FdbVersion::parse(&self.spec.version).unwrap_or_default();
        running.is_protocol_compatible(&desired)
    }

    /// Whether `id` is marked for removal in the status or listed for removal in the spec.
    pub fn process_group_is_being_removed(&self, id: &ProcessGroupId) -> bool {
        if id.as_str().is_empty() {
            return false;
        }
        let in_status = self.status.as_ref().is_some_and(|s| {
            s.process_groups
                .iter()
                .any(|g| &g.process_group_id == id && g.is_marked_for_removal())
        });
        in_status
            || self.spec.process_groups_to_remove.contains(id)
            || self
                .spec
                .process_groups_to_remove_without_exclusion
                .contains(id)
    }

    /// Whether global operations take the lock: `disableLocks` decides when set; otherwise
    /// several Kubernetes-cluster zones, several regions or three_data_hall.
    pub fn should_use_locks(&self) -> bool {
        if let Some(disabled) = self.spec.lock_options.disable_locks {
            return !disabled;
        }
        self.spec.fault_domain.zone_count > 1
            || self.spec.database_configuration.regions.len() > 1
            || self.spec.database_configuration.redundancy_mode == REDUNDANCY_THREE_DATA_HALL
    }

    /// The lock-key prefix (bytes as chars, `\xff\x02/…` by default).
    pub fn lock_prefix(&self) -> String {
        if self.spec.lock_options.lock_key_prefix.is_empty() {
            DEFAULT_LOCK_PREFIX.to_owned()
        } else {
            self.spec.lock_options.lock_key_prefix.clone()
        }
    }

    /// How long a lock is held (default 10 minutes).
    pub fn lock_duration(&self) -> Duration {
        Duration::from_secs(
            60 * self
                .spec
                .lock_options
                .lock_duration_minutes
                .unwrap_or(10)
                .max(0) as u64,
        )
    }

    /// This operator instance's lock ID: the process-group-ID prefix.
    pub fn lock_id(&self) -> &str {
        &self.spec.process_group_id_prefix
    }

    /// Automatic replacements are on (default true).
    pub fn automatic_replacements_enabled(&self) -> bool {
        self.spec
            .automation_options
            .replacements
            .enabled
            .unwrap_or(true)
    }

    /// Automatic replacements in flight at once (default 1).
    pub fn max_concurrent_automatic_replacements(&self) -> i64 {
        self.spec
            .automation_options
            .replacements
            .max_concurrent_replacements
            .unwrap_or(1)
    }

    /// Seconds before a failed group is replaced (default 7200).
    pub fn failure_detection_time_seconds(&self) -> i64 {
        self.spec
            .automation_options
            .replacements
            .failure_detection_time_seconds
            .unwrap_or(7200)
    }

    /// Seconds in `NodeTaintReplacing` before replacement (default 1800).
    pub fn taint_replacement_time_seconds(&self) -> i64 {
        self.spec
            .automation_options
            .replacements
            .taint_replacement_time_seconds
            .unwrap_or(1800)
    }

    /// Fault domains that may hold process groups replaced for a node taint, out of
    /// `fault_domains`: `maxFaultDomainsWithTaintedProcessGroups` as a number or a percentage
    /// rounded down (default `10%`), at least 1. An unparsable value is an error.
    pub fn max_fault_domains_with_tainted_process_groups(
        &self,
        fault_domains: usize,
    ) -> Result<i64, String> {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let value = self
            .spec
            .automation_options
            .replacements
            .max_fault_domains_with_tainted_process_groups
            .clone()
            .unwrap_or_else(|| IntOrString::String("10%".into()));
        let max = match value {
            IntOrString::Int(n) => i64::from(n),
            IntOrString::String(s) => {
                let percent = s
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<i64>().ok())
                    .ok_or_else(|| {
                        format!("maxFaultDomainsWithTaintedProcessGroups {s:?} is neither a number nor a percentage")
                    })?;
                percent * fault_domains as i64 / 100
            }
        };
        Ok(max.max(1))
    }

    /// Misconfiguration replacements at once (default unlimited).
    pub fn max_concurrent_replacements(&self) -> i64 {
        self.spec
            .automation_options
            .max_concurrent_replacements
            .unwrap_or(i64::MAX)
    }

    /// Whether `class` may hold a coordinator.
    pub fn is_eligible_as_coordinator(&self, class: &ProcessClass) -> bool {
        if !class.is_stateful() {
            return false;
        }
        self.spec.coordinator_selection.is_empty()
            || self
                .spec
                .coordinator_selection
                .iter()
                .any(|s| s.process_class == class.as_str())
    }

    /// The coordinator priority of `class`: the configured one, else log-like 1, others 0.
    pub fn coordinator_priority(&self, class: &ProcessClass) -> i64 {
        self.spec
            .coordinator_selection
            .iter()
            .find(|s| s.process_class == class.as_str())
            .map(|s| s.priority)
            .unwrap_or(if class.is_log_process() { 1 } else { 0 })
    }

    /// Pods pending longer than this are ignored (default 5 minutes).
    pub fn ignore_pending_pods_duration(&self) -> Duration {
        match self.spec.automation_options.ignore_pending_pods_duration {
            0 => Duration::from_secs(300),
            n => Duration::from_nanos(n.max(0) as u64),
        }
    }

    /// Groups missing processes longer than this are left out of bounces (default 30 s).
    pub fn ignore_missing_processes(&self) -> Duration {
        secs(
            self.spec
                .automation_options
                .ignore_missing_processes_seconds,
            30,
        )
    }

    /// A deleting pod becomes `PodFailing` after this (default 300 s).
    pub fn failed_pod_duration(&self) -> Duration {
        secs(
            self.spec.automation_options.failed_pod_duration_seconds,
            300,
        )
    }

    /// Pods terminating longer than this are ignored (default 600 s).
    pub fn ignore_terminating_pods(&self) -> Duration {
        secs(
            self.spec.automation_options.ignore_terminating_pods_seconds,
            600,
        )
    }

    /// Whether the verification exclude is non-blocking (default false).
    pub fn use_non_blocking_excludes(&self) -> bool {
        self.spec
            .automation_options
            .use_non_blocking_excludes
            .unwrap_or(false)
    }

    /// Exclusions by locality: when the running version supports them and the spec does not
    /// turn them off.
    pub fn use_localities_for_exclusion(&self) -> bool {
        FdbVersion::parse(&self.running_version())
            .is_ok_and(|v| v.supports_locality_based_exclusions())
            && self
                .spec
                .automation_options
                .use_localities_for_exclusion
                .unwrap_or(true)
    }

    /// The label used to select by process class.
    pub fn process_class_label(&self) -> String {
        self.spec
            .label_config
            .process_class_labels
            .first()
            .cloned()
            .unwrap_or_else(|| PROCESS_CLASS_LABEL.to_owned())
    }

    /// The label used to select by process-group ID.
    pub fn process_group_id_label(&self) -> String {
        self.spec
            .label_config
            .process_group_id_labels
            .first()
            .cloned()
            .unwrap_or_else(|| PROCESS_GROUP_ID_LABEL.to_owned())
    }

    /// Every label carrying the process class.
    pub fn process_class_labels(&self) -> Vec<String> {
        if self.spec.label_config.process_class_labels.is_empty() {
            vec![PROCESS_CLASS_LABEL.to_owned()]
        } else {
            self.spec.label_config.process_class_labels.clone()
        }
    }

    /// Every label carrying the process-group ID.
    pub fn process_group_id_labels(&self) -> Vec<String> {
        if self.spec.label_config.process_group_id_labels.is_empty() {
            vec![PROCESS_GROUP_ID_LABEL.to_owned()]
        } else {
            self.spec.label_config.process_group_id_labels.clone()
        }
    }

    /// The labels identifying the cluster's resources.
    pub fn match_labels(&self) -> std::collections::BTreeMap<String, String> {
        if self.spec.label_config.match_labels.is_empty() {
            [(CLUSTER_LABEL.to_owned(), self.name_any())].into()
        } else {
            self.spec.label_config.match_labels.clone()
        }
    }

    /// Extra labels of created resources.
    pub fn resource_labels(&self) -> std::collections::BTreeMap<String, String> {
        if self.spec.label_config.resource_labels.is_empty() {
            [(CLUSTER_LABEL.to_owned(), self.name_any())].into()
        } else {
            self.spec.label_config.resource_labels.clone()
        }
    }

    /// Coordinators are named by DNS (default true).
    pub fn use_dns_in_cluster_file(&self) -> bool {
        self.spec.routing.use_dns_in_cluster_file.unwrap_or(true)
    }

    /// Pods get DNS names (set, or implied by DNS in the cluster file).
    pub fn define_dns_locality_fields(&self) -> bool {
        self.spec
            .routing
            .define_dns_locality_fields
            .unwrap_or(false)
            || self.use_dns_in_cluster_file()
    }

    /// A headless service is needed.
    pub fn needs_headless_service(&self) -> bool {
        self.define_dns_locality_fields() || self.spec.routing.headless_service.unwrap_or(false)
    }

    /// The DNS domain (default `cluster.local`).
    pub fn dns_domain(&self) -> String {
        self.spec
            .routing
            .dns_domain
            .clone()
            .unwrap_or_else(|| "cluster.local".to_owned())
    }

    /// `pod` (default) or `service`.
    pub fn public_ip_source(&self) -> &str {
        self.spec
            .routing
            .public_ip_source
            .as_deref()
            .unwrap_or("pod")
    }

    /// 0 (unset), 4 or 6.
    pub fn pod_ip_family(&self) -> i64 {
        self.spec.routing.pod_ip_family.unwrap_or(0)
    }

    /// The environment variable with the zone ID.
    pub fn zone_variable_name(&self) -> String {
        self.spec
            .fault_domain
            .value_from
            .strip_prefix('$')
            .map_or_else(|| ZONE_ID_ENV.to_owned(), str::to_owned)
    }

    /// The removal mode (default `Zone`).
    pub fn removal_mode(&self) -> &str {
        non_empty(&self.spec.automation_options.removal_mode, "Zone")
    }

    /// The deletion mode (default `Zone`).
    pub fn deletion_mode(&self) -> &str {
        non_empty(&self.spec.automation_options.deletion_mode, "Zone")
    }

    /// The pod update strategy (default `ReplaceTransactionSystem`).
    pub fn pod_update_strategy(&self) -> &str {
        non_empty(
            &self.spec.automation_options.pod_update_strategy,
            "ReplaceTransactionSystem",
        )
    }

    /// Seconds between removals (default 60; negative means the default).
    pub fn wait_between_removals_seconds(&self) -> i64 {
        match self.spec.automation_options.wait_between_removals_seconds {
            Some(n) if n >= 0 => n,
            _ => 60,
        }
    }

    /// Whether a pod-spec change of a group of `class` replaces the group (rather than
    /// recreating its pod in place), by the pod update strategy.
    pub fn needs_replacement_for_class(&self, class: &ProcessClass) -> bool {
        match self.pod_update_strategy() {
            "Delete" => false,
            "Replace" => true,
            _ => class.is_transaction(),
        }
    }

    /// The trace-log group (default the cluster's name).
    pub fn log_group(&self) -> String {
        if self.spec.log_group.is_empty() {
            self.name_any()
        } else {
            self.spec.log_group.clone()
        }
    }

    /// `--listen_address` is passed (default true).
    pub fn use_explicit_listen_address(&self) -> bool {
        self.spec.use_explicit_listen_address.unwrap_or(true)
    }

    /// Minimum uptime before a bounce (default 600).
    pub fn minimum_uptime_seconds_for_bounce(&self) -> i64 {
        match self.spec.minimum_uptime_seconds_for_bounce {
            0 => 600,
            n => n,
        }
    }

    /// The unified image is used (default true).
    pub fn use_unified_image(&self) -> bool {
        self.spec
            .image_type
            .as_deref()
            .is_none_or(|t| t == "unified")
    }

    /// The image type the pods should have.
    pub fn desired_image_type(&self) -> &'static str {
        if self.use_unified_image() {
            "unified"
        } else {
            "split"
        }
    }

    /// Zones that may have unavailable pods during updates (default unlimited).
    pub fn max_zones_with_unavailable_pods(&self) -> i64 {
        self.spec
            .max_zones_with_unavailable_pods
            .unwrap_or(i64::MAX)
    }

    /// Client log groups that never block an upgrade.
    pub fn ignore_log_groups_for_upgrade(&self) -> Vec<String> {
        if self
            .spec
            .automation_options
            .ignore_log_groups_for_upgrade
            .is_empty()
        {
            vec![OPERATOR_LOG_GROUP.to_owned()]
        } else {
            self.spec
                .automation_options
                .ignore_log_groups_for_upgrade
                .clone()
        }
    }

    /// The operator may reconfigure the database (default true).
    pub fn configure_database_enabled(&self) -> bool {
        self.spec
            .automation_options
            .configure_database
            .unwrap_or(true)
    }

    /// The operator may restart processes (default true).
    pub fn kill_processes_enabled(&self) -> bool {
        self.spec.automation_options.kill_processes.unwrap_or(true)
    }

    /// UpdatePods sets the maintenance zone while recreating storage pods
    /// (`UseMaintenanceModeChecker`, off by default).
    pub fn use_maintenance_mode(&self) -> bool {
        let m = &self.spec.automation_options.maintenance_mode_options;
        m.use_maintenance_mode_checker.unwrap_or(false)
    }

    /// How long a zone set by UpdatePods stays in maintenance (600 s).
    pub fn maintenance_mode_time_seconds(&self) -> i64 {
        let m = &self.spec.automation_options.maintenance_mode_options;
        m.maintenance_mode_time_seconds.unwrap_or(600)
    }

    /// Reset maintenance mode once the zone's processes restarted.
    pub fn reset_maintenance_mode(&self) -> bool {
        let m = &self.spec.automation_options.maintenance_mode_options;
        m.use_maintenance_mode_checker.unwrap_or(false) || m.reset_maintenance_mode.unwrap_or(false)
    }

    /// The process-group ID of number `n` of `class`.
    pub fn process_group_id(&self, class: &ProcessClass, n: u32) -> ProcessGroupId {
        ProcessGroupId::build(&self.spec.process_group_id_prefix, class, n)
    }

    /// A group ID the spec still accepts: not being removed and not in `excluded`.
    pub fn new_process_group_id_allowed(
        &self,
        id: &ProcessGroupId,
        excluded: &std::collections::BTreeSet<ProcessGroupId>,
    ) -> bool {
        !self.process_group_is_being_removed(id) && !excluded.contains(id)
    }

    /// Checks the spec as upstream's `Validate` does (everything the API server cannot):
    /// a parseable, supported version; a storage engine the version supports; stateful
    /// coordinator classes; IP family 4 or 6; a known interaction mode. And, a Flotilla
    /// addition, the unified image: `imageType: split` is accepted by the CRD (as upstream's)
    /// but not built here, so it is a problem rather than silently built as unified. Every
    /// problem is listed, joined with `, `.
    pub fn validate(&self) -> Result<(), String> {
        let version = FdbVersion::parse(&self.spec.version).map_err(|e| e.to_string())?;
        if !version.is_supported() {
            return Err(format!(
                "version: {version} is not supported, minimum supported version is: {}",
                FdbVersion::MINIMUM
            ));
        }
        let mut problems = Vec::new();
        let engine = &self.spec.database_configuration.storage_engine;
        if !version.supports_storage_engine(engine) {
            problems.push(format!(
                "storage engine {engine} is not supported on version {}",
                self.spec.version
            ));
        }
        for s in &self.spec.coordinator_selection {
            if !ProcessClass::new(s.process_class.clone()).is_stateful() {
                problems.push(format!(
                    "{} is not a valid process class for coordinators",
                    s.process_class
                ));
            }
        }
        if let Some(family) = self.spec.routing.pod_ip_family
            && ![0, 4, 6].contains(&family)
        {
            problems.push(format!(
                "Pod IP Family {family} is not valid, only 4 or 6 are allowed."
            ));
        }
        let mode = self
            .spec
            .automation_options
            .database_interaction_mode
            .as_deref()
            .unwrap_or("fdbcli");
        if mode != "fdbcli" && mode != "managementapi" {
            problems.push(format!(
                "database interaction mode: \"{mode}\" is not supported allowed values: [fdbcli, managementapi]."
            ));
        }
        if !self.use_unified_image() {
            problems.push(format!(
                "imageType {:?} is not supported by this operator, which builds only the unified image (fdb-kubernetes-monitor): set imageType: unified (the default)",
                self.spec.image_type.as_deref().unwrap_or_default()
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join(", "))
        }
    }
}

fn from_role(count: i64, alternatives: &[i64]) -> i64 {
    if alternatives.iter().any(|a| *a > 0) || count < 0 {
        0
    } else {
        count
    }
}

fn secs(value: Option<i64>, default: i64) -> Duration {
    Duration::from_secs(value.unwrap_or(default).max(0) as u64)
}

fn non_empty<'a>(s: &'a str, default: &'a str) -> &'a str {
    if s.is_empty() { default } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::FoundationDBClusterSpec;

    fn cluster(spec: serde_json::Value) -> FoundationDBCluster {
        let mut c = FoundationDBCluster::new("test-cluster", serde_json::from_value(spec).unwrap());
        c.metadata.namespace = Some("ns".into());
        c
    }

    fn counts(c: &FoundationDBCluster) -> (i64, i64, i64) {
        let pc = c.process_counts_with_defaults();
        (pc.storage, pc.log, pc.stateless)
    }

    #[test]
    fn default_process_counts_per_redundancy_mode() {
        // Reference §3.1's table: pods, not processes; storage without +F.
        let cases = [
            ("single", (1, 3, 8), 1),
            ("double", (3, 4, 9), 3),
            ("triple", (5, 5, 10), 5),
            ("three_data_hall", (5, 6, 10), 9),
        ];
        for (mode, want, coordinators) in cases {
            let c = cluster(serde_json::json!({
                "version": "7.1.57",
                "databaseConfiguration": {"redundancy_mode": mode},
            }));
            assert_eq!(counts(&c), want, "{mode}");
            assert_eq!(c.desired_coordinator_count(), coordinators, "{mode}");
        }
        let c = cluster(serde_json::json!({"version": "7.1.57"}));
        assert_eq!(counts(&c), (3, 4, 9));
    }

    #[test]
    fn explicit_role_classes_take_their_share_from_stateless() {
        let c = cluster(serde_json::json!({
            "version": "7.1.57",
            "processCounts": {"storage": 4, "cluster_controller": 1},
        }));
        assert_eq!(counts(&c), (4, 4, 8));
        let c = cluster(serde_json::json!({
            "version": "7.1.57",
            "processCounts": {"stateless": -1, "cluster_controller": 1},
        }));
        assert_eq!(counts(&c), (3, 4, -1));
        let c = cluster(serde_json::json!({
            "version": "7.1.57",
            "databaseConfiguration": {"grv_proxies": 2, "commit_proxies": 3},
        }));
        // master, cc, resolver, ratekeeper, dd + 2 grv + 3 commit + F
        assert_eq!(counts(&c), (3, 4, 11));
    }

    #[test]
    fn kubernetes_cluster_fault_domain_splits_counts_over_zones() {
        let spec = |index: i64| {
            serde_json::json!({
                "version": "7.1.57",
                "faultDomain": {"key": "foundationdb.org/kubernetes-cluster", "value": "kc", "zoneIndex": index},
            })
        };
        // double: 3 zones by default; storage 3 → 1 each; log 4 → 2,1,1; stateless 9 → 3 each
        assert_eq!(counts(&cluster(spec(0))), (1, 2, 3));
        assert_eq!(counts(&cluster(spec(2))), (1, 1, 3));
        assert_eq!(counts(&cluster(spec(-1))), (-1, -1, -1));
    }

    #[test]
    fn getters_return_upstream_defaults() {
        let c = cluster(serde_json::json!({"version": "7.1.57"}));
        assert!(c.use_dns_in_cluster_file());
        assert!(c.needs_headless_service());
        assert!(c.use_localities_for_exclusion());
        assert!(c.automatic_replacements_enabled());
        assert!(c.use_unified_image());
        assert!(!c.should_use_locks());
        assert_eq!(c.minimum_uptime_seconds_for_bounce(), 600);
        assert_eq!(c.wait_between_removals_seconds(), 60);
        assert_eq!(c.removal_mode(), "Zone");
        assert_eq!(c.lock_duration(), Duration::from_secs(600));
        assert_eq!(
            c.lock_prefix(),
            "\u{ff}\u{2}/org.foundationdb.kubernetes-operator"
        );
        assert_eq!(c.log_group(), "test-cluster");
        assert_eq!(c.coordinator_priority(&ProcessClass::new("log")), 1);
        assert_eq!(c.coordinator_priority(&ProcessClass::new("storage")), 0);
        assert!(!c.is_eligible_as_coordinator(&ProcessClass::new("stateless")));
        assert_eq!(c.match_labels()[CLUSTER_LABEL], "test-cluster");
        let old = cluster(serde_json::json!({"version": "7.1.41"}));
        assert!(!old.use_localities_for_exclusion());
        let locked = cluster(
            serde_json::json!({"version": "7.1.57", "lockOptions": {"disableLocks": false}}),
        );
        assert!(locked.should_use_locks());
        assert_eq!(FoundationDBClusterSpec::default().version, "");
    }

    #[test]
    fn validation_lists_every_problem() {
        let c = cluster(serde_json::json!({
            "version": "7.1.57",
            "databaseConfiguration": {"storage_engine": "ssd-redwood-1"},
            "coordinatorSelection": [{"processClass": "stateless"}],
            "routing": {"podIPFamily": 5},
        }));
        assert_eq!(
            c.validate().unwrap_err(),
            "storage engine ssd-redwood-1 is not supported on version 7.1.57, stateless is not a valid process class for coordinators, Pod IP Family 5 is not valid, only 4 or 6 are allowed."
        );
        let split = cluster(serde_json::json!({"version": "7.1.57", "imageType": "split"}));
        assert_eq!(
            split.validate().unwrap_err(),
            "imageType \"split\" is not supported by this operator, which builds only the unified image (fdb-kubernetes-monitor): set imageType: unified (the default)"
        );
        assert!(
            cluster(serde_json::json!({"version": "7.1.57", "imageType": "unified"}))
                .validate()
                .is_ok()
        );
        let c = cluster(serde_json::json!({"version": "6.3.25"}));
        assert!(c.validate().unwrap_err().contains("not supported"));
        assert!(
            cluster(serde_json::json!({"version": "7.3.69"}))
                .validate()
                .is_ok()
        );
    }
}
