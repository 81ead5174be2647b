//! UpdateStatus (reference §4 step 1 and 27, §2.3): runs first and last in every pass.
//!
//! Contract:
//! - A status without connection string adopts the config map's `cluster-file` (unless
//!   another object controls the config map), else `spec.seedConnectionString`
//!   ([`adopted_connection_string`], upstream's order), before
//!   the fetch, so a cluster seeded onto an existing database reads that database's status
//!   in its first pass (and, seeing it configured, never runs `configure new` or generates
//!   a cluster file of its own).
//! - Fetches `status json` into the pass's cache. A cluster without connection string, or
//!   an unconfigured one whose database does not answer, works without a status (the
//!   `configurationMissing` stand-in); a configured cluster whose database does not answer
//!   is marked unavailable and the step asks for a delayed requeue (later steps still run
//!   and skip whatever needs the database).
//! - Builds the status from the previous one: the database's connection string wins,
//!   `configured` is sticky, the live configuration and the running version are refreshed
//!   only from an available database, and each process group's conditions follow its pod,
//!   PVC and processes ([`update_group`]), and its node's taints ([`super::taints`]; the
//!   nodes are read once per pass, only for a cluster with `taintReplacementOptions`).
//!   Groups named in the spec's removal lists are marked for removal (without exclusion for
//!   `processGroupsToRemoveWithoutExclusion`).
//!   A storage group in the database's maintenance zone keeps its conditions unchanged
//!   ([`under_maintenance`]).
//! - [`check_reconciliation`] sets the generation markers; when nothing blocks,
//!   `generations.reconciled` becomes `metadata.generation` and the global lock, if held,
//!   is released. On the pass that reaches reconciliation, a cluster with locks clears the
//!   pending-upgrade records of its version when every process of the database already runs
//!   it ([`clear_leftover_upgrades`]): an instance that read the status before another
//!   instance's upgrade kill registers its groups after that kill cleared the records.
//! - The Kubernetes conditions `Ready`, `DatabaseAvailable` and `SpecValid` follow
//!   ([`super::conditions`]).
//! - The status is written only if it changed; not reconciled ⇒ delayed requeue (10 s).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, coordinators, monitor, resources, step_error, taints, update_metadata};
use crate::admin::FdbStatus;
use crate::admin::status::ProcessInfo;
use crate::crd::{
    ClusterGenerationStatus, ClusterHealth, FoundationDBCluster, FoundationDBClusterStatus,
    ProcessGroupStatus, condition,
};

step_error!(UpdateStatusError, "updating the status");

/// The step.
pub struct UpdateStatus;

/// What was observed about one process group.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    /// Its pod.
    pub pod: Option<&'a Pod>,
    /// Its PVC exists.
    pub pvc: bool,
    /// Its processes in the status (empty when it has none or no status is known).
    pub processes: Vec<&'a ProcessInfo>,
    /// A status with processes is known (process checks run only then).
    pub status_has_processes: bool,
    /// The desired pod-spec hash.
    pub spec_hash: String,
    /// The desired config-map hash of the group's class (`None`: not checked).
    pub config_hash: Option<String>,
    /// The fdbserver processes its pod runs ([`resources::servers_per_pod`]; 0 means 1).
    pub processes_per_pod: i64,
    /// The command line each of its processes should run (process `n` at index `n - 1`): the
    /// desired monitor configuration rendered with the pod's substitutions (empty: the
    /// monitor has not published them; not checked).
    pub command_lines: Vec<String>,
    /// The version its processes should run (`None` during a patch upgrade: not checked).
    pub version: Option<String>,
    /// Its pod lacks desired labels or annotations.
    pub pod_metadata_missing: bool,
    /// Its pod's sidecar container runs another image than desired.
    pub sidecar_image_wrong: bool,
}

/// Which of `group`'s processes `p` is: `n` of its `process_id` locality `<group>-<n>` (0
/// for another form), or `None` for a process without one or with the group's ID (a process
/// group of one process, as the split image runs it), which stands for every process of its
/// group (upstream looks processes up by the group's ID first).
pub fn process_number(p: &ProcessInfo, group: &str) -> Option<i64> {
    let id = p.locality.get(crate::admin::status::LOCALITY_PROCESS_ID)?;
    if id == group {
        return None;
    }
    let n = id
        .strip_prefix(group)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse().ok());
    Some(n.unwrap_or(0))
}

/// Whether one of the `expected` processes of `group` does not report (`MissingProcesses`).
pub fn processes_missing(processes: &[&ProcessInfo], group: &str, expected: i64) -> bool {
    let numbers: BTreeSet<Option<i64>> =
        processes.iter().map(|p| process_number(p, group)).collect();
    if numbers.contains(&None) {
        return false;
    }
    (1..=expected.max(1)).any(|n| !numbers.contains(&Some(n)))
}

/// The command line each of a pod's `processes_per_pod` processes should run: the desired
/// monitor configuration (`desired`, JSON text) rendered with the substitutions the pod's
/// monitor published (`BINARY_DIR` among them), as upstream's `GetStartCommand`. Empty when
/// the pod is gone, its monitor published nothing or a substitution is missing: not judged.
pub fn expected_command_lines(
    desired: Option<&str>,
    pod: Option<&Pod>,
    processes_per_pod: i64,
) -> Vec<String> {
    desired
        .and_then(|text| serde_json::from_str(text).ok())
        .zip(pod.and_then(monitor::substitutions))
        .and_then(|(conf, env)| {
            (1..=processes_per_pod)
                .map(|n| monitor::command_line(&conf, &env, n as u32))
                .collect::<Option<Vec<_>>>()
        })
        .unwrap_or_default()
}

/// Marks `group` when the spec removes it (upstream's UpdateStatus): listed in
/// `processGroupsToRemoveWithoutExclusion` (what `kubectl fdb remove process-groups
/// --exclusion=false` adds), or of class `test` ⇒ marked for removal with `exclusionSkipped`
/// and counted as excluded at once, so no exclude is issued for it and no include follows
/// its removal; listed in `processGroupsToRemove` ⇒ marked only (it is excluded before its
/// resources go).
pub fn mark_spec_removal(
    cluster: &FoundationDBCluster,
    group: &mut ProcessGroupStatus,
    now: Timestamp,
) {
    let id = &group.process_group_id;
    let spec = &cluster.spec;
    if spec.process_groups_to_remove_without_exclusion.contains(id)
        || group.process_class.as_str() == "test"
    {
        group.mark_for_removal(now);
        group.exclusion_skipped = true;
        group.set_exclude(now);
    } else if spec.process_groups_to_remove.contains(id) {
        group.mark_for_removal(now);
    }
}

/// Whether a process runs the wrong command line or version (`IncorrectCommandLine`).
fn wrong_command_line(p: &ProcessInfo, group: &str, seen: &Observed) -> bool {
    let n = process_number(p, group).unwrap_or(1);
    let line = usize::try_from(n - 1)
        .ok()
        .and_then(|i| seen.command_lines.get(i))
        .is_some_and(|want| p.command_line != *want);
    let version = seen.version.as_ref().is_some_and(|want| {
        p.version != *want && p.version.strip_suffix("-PRERELEASE") != Some(want.as_str())
    });
    line || version
}

/// A storage group whose fault domain is the database's maintenance zone: its conditions
/// are left as they are while the zone is in maintenance, so a pod taken down on purpose
/// does not look failed (upstream's `IsUnderMaintenance`).
pub fn under_maintenance(group: &ProcessGroupStatus, zone: &str) -> bool {
    group.process_class.as_str() == "storage"
        && !zone.is_empty()
        && !group.fault_domain.is_empty()
        && group.fault_domain == zone
}

/// Updates `group`'s conditions and addresses from what was observed (upstream's rules for
/// the v1 scope: missing pod/PVC/processes, pending/failed pods, wrong spec hash, processes
/// excluded behind its back, resources terminating once removed and excluded).
pub fn update_group(
    group: &mut ProcessGroupStatus,
    seen: &Observed,
    available: bool,
    now: Timestamp,
) {
    let removed_excluded = group.is_marked_for_removal() && group.is_excluded();
    let deleting = seen
        .pod
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
    // Upstream's: a removed and excluded group's pod is gone or going (its timestamp paces
    // the next removal, see remove_process_groups::choose).
    group.update_condition(
        condition::RESOURCES_TERMINATING,
        removed_excluded && (deleting || seen.pod.is_none()),
        now,
    );
    group.update_condition(
        condition::MISSING_POD,
        seen.pod.is_none() && !removed_excluded,
        now,
    );
    group.update_condition(
        condition::MISSING_PVC,
        group.process_class.is_stateful() && !seen.pvc && !removed_excluded,
        now,
    );
    if let Some(pod) = seen.pod {
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        group.update_condition(condition::POD_PENDING, phase == "Pending", now);
        group.update_condition(condition::POD_FAILING, phase == "Failed", now);
        let hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(resources::LAST_SPEC_KEY));
        group.update_condition(
            condition::INCORRECT_POD_SPEC,
            hash.is_some_and(|h| *h != seen.spec_hash),
            now,
        );
        let config_hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(resources::LAST_CONFIG_MAP_KEY));
        group.update_condition(
            condition::INCORRECT_POD_METADATA,
            seen.pod_metadata_missing,
            now,
        );
        group.update_condition(
            condition::INCORRECT_SIDECAR_IMAGE,
            seen.sidecar_image_wrong,
            now,
        );
        group.update_condition(
            condition::INCORRECT_CONFIG_MAP,
            seen.config_hash
                .as_ref()
                .is_some_and(|want| config_hash != Some(want)),
            now,
        );
        let ips: Vec<String> = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ips.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|ip| ip.ip)
            .collect();
        group.add_addresses(&ips, group.is_marked_for_removal() || !available);
    } else {
        group.update_condition(condition::POD_PENDING, false, now);
        group.update_condition(condition::POD_FAILING, false, now);
        group.update_condition(condition::INCORRECT_POD_SPEC, false, now);
        group.update_condition(condition::INCORRECT_CONFIG_MAP, false, now);
        group.update_condition(condition::INCORRECT_POD_METADATA, false, now);
        group.update_condition(condition::INCORRECT_SIDECAR_IMAGE, false, now);
    }
    if seen.status_has_processes {
        let id = group.process_group_id.to_string();
        let missing = processes_missing(&seen.processes, &id, seen.processes_per_pod);
        group.update_condition(
            condition::MISSING_PROCESSES,
            missing && !removed_excluded,
            now,
        );
        group.update_condition(
            condition::INCORRECT_COMMAND_LINE,
            seen.processes
                .iter()
                .any(|p| wrong_command_line(p, &id, seen)),
            now,
        );
        let excluded = seen.processes.iter().any(|p| p.excluded);
        group.update_condition(
            condition::PROCESS_IS_MARKED_AS_EXCLUDED,
            excluded && !group.is_marked_for_removal(),
            now,
        );
        if let Some(zone) = seen.processes.iter().find_map(|p| p.locality.get("zoneid")) {
            group.fault_domain = zone.clone();
        }
    }
}

/// `status.storageServersPerDisk` and `status.logServersPerDisk` (upstream's): the desired
/// servers per pod of storage and of the log classes first, then every other count a
/// group's pod runs, in the order first seen (more than one value: a change is under way).
pub fn servers_per_disk(
    cluster: &FoundationDBCluster,
    groups: &[ProcessGroupStatus],
    pods: &BTreeMap<String, Pod>,
) -> (Vec<i64>, Vec<i64>) {
    let storage = crate::crd::ProcessClass::new(crate::crd::ProcessClass::STORAGE);
    let log = crate::crd::ProcessClass::new(crate::crd::ProcessClass::LOG);
    let mut seen = (
        vec![cluster.desired_servers_per_pod(&storage)],
        vec![cluster.desired_servers_per_pod(&log)],
    );
    for g in groups {
        let Some(pod) = pods.get(g.process_group_id.as_str()) else {
            continue;
        };
        let list = if g.process_class == storage {
            &mut seen.0
        } else if g.process_class.is_log_process() {
            &mut seen.1
        } else {
            continue;
        };
        let n = resources::servers_per_pod(pod, &g.process_class);
        if !list.contains(&n) {
            list.push(n);
        }
    }
    seen
}

/// Sets the generation markers (reference §2.3) and returns whether the cluster is
/// reconciled at `generation`.
pub fn check_reconciliation(
    cluster: &FoundationDBCluster,
    status: &mut FoundationDBClusterStatus,
) -> bool {
    let generation = cluster.metadata.generation.unwrap_or(0);
    let mut g = ClusterGenerationStatus {
        reconciled: status.generations.reconciled,
        ..ClusterGenerationStatus::default()
    };
    let mut reconciled = true;
    if !status.configured {
        g.needs_configuration_change = generation;
        status.generations = g;
        return false;
    }
    let desired = cluster.process_counts_with_defaults().map();
    let mut current: BTreeMap<_, i64> = BTreeMap::new();
    for group in &status.process_groups {
        if group.is_marked_for_removal() {
            if group.has_condition(condition::RESOURCES_TERMINATING) {
                g.has_pending_removal = generation;
            } else {
                g.needs_shrink = generation;
                reconciled = false;
            }
            continue;
        }
        *current.entry(group.process_class.clone()).or_default() += 1;
        if !group.process_group_conditions.is_empty() {
            g.has_unhealthy_process = generation;
            reconciled = false;
        }
        if group.has_condition(condition::INCORRECT_COMMAND_LINE) {
            g.needs_bounce = generation;
        }
        if group.has_condition(condition::INCORRECT_POD_SPEC) {
            g.needs_pod_deletion = generation;
        }
    }
    for (class, want) in &desired {
        let have = current.get(class).copied().unwrap_or(0);
        let want = (*want).max(0);
        if have < want {
            g.needs_grow = generation;
            reconciled = false;
        } else if have > want {
            g.needs_shrink = generation;
            reconciled = false;
        }
    }
    for (class, have) in &current {
        if !desired.contains_key(class) && *have > 0 {
            g.needs_shrink = generation;
            reconciled = false;
        }
    }
    if !status.health.available {
        g.database_unavailable = generation;
        reconciled = false;
    }
    if status.database_configuration != cluster.desired_database_configuration() {
        g.needs_configuration_change = generation;
        reconciled = false;
    }
    if status.has_incorrect_config_map {
        g.needs_monitor_conf_update = generation;
        reconciled = false;
    }
    if status.has_incorrect_service_config {
        g.needs_service_update = generation;
        reconciled = false;
    }
    if status.needs_new_coordinators {
        g.needs_coordinator_change = generation;
        reconciled = false;
    }
    let denied: BTreeSet<&String> = status.locks.deny_list.iter().collect();
    let converged = cluster
        .spec
        .lock_options
        .deny_list
        .iter()
        .all(|e| denied.contains(&e.id) != e.allow);
    if cluster.should_use_locks() && !converged {
        g.needs_lock_configuration_changes = generation;
        reconciled = false;
    }
    if reconciled {
        g.reconciled = generation;
    }
    status.generations = g;
    reconciled
}

fn processes_by_group(db: &FdbStatus) -> BTreeMap<String, Vec<&ProcessInfo>> {
    let mut map: BTreeMap<String, Vec<&ProcessInfo>> = BTreeMap::new();
    for p in db.cluster.processes.values() {
        if let Some(id) = p.instance_id() {
            map.entry(id.to_owned()).or_default().push(p);
        }
    }
    map
}

/// The version most processes report (ties: the newer), if any.
pub fn majority_version(db: &FdbStatus) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for p in db.cluster.processes.values() {
        if !p.version.is_empty() {
            *counts.entry(p.version.as_str()).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| {
            a.1.cmp(&b.1).then_with(|| {
                match (
                    crate::crd::FdbVersion::parse(a.0),
                    crate::crd::FdbVersion::parse(b.0),
                ) {
                    (Ok(va), Ok(vb)) if va == vb => std::cmp::Ordering::Equal,
                    (Ok(va), Ok(vb)) if va.is_at_least(&vb) => std::cmp::Ordering::Greater,
                    (Ok(_), Ok(_)) => std::cmp::Ordering::Less,
                    _ => a.0.cmp(b.0),
                }
            })
        })
        .map(|(v, _)| v.to_owned())
}

/// The connection string of a status that has none (upstream's UpdateStatus): the config
/// map's non-empty `cluster-file`, else `seed` (`spec.seedConnectionString`, possibly empty).
/// A config map controlled by another object than the cluster with UID `uid` (left by a
/// deleted cluster of the same name, not yet garbage-collected) does not count.
pub fn adopted_connection_string(config_map: Option<&ConfigMap>, uid: &str, seed: &str) -> String {
    let ours = |cm: &&ConfigMap| {
        cm.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .is_none_or(|o| o.uid == uid)
    };
    config_map
        .filter(ours)
        .and_then(|cm| cm.data.as_ref()?.get("cluster-file"))
        .filter(|cs| !cs.is_empty())
        .cloned()
        .unwrap_or_else(|| seed.to_owned())
}

impl UpdateStatus {
    async fn fetch(&self, pass: &mut Pass) -> Option<Flow> {
        let status = pass.status().clone();
        if status.connection_string.is_empty() {
            pass.db = None;
            return None;
        }
        match pass.admin().get_status().await {
            Ok(db) => {
                pass.db = Some(db);
                None
            }
            Err(e) => {
                pass.db = None;
                if status.configured {
                    tracing::warn!(cluster = %pass.name(), error = %e, "database status unavailable");
                    Some(Flow::delay(Duration::from_secs(10)))
                } else {
                    None
                }
            }
        }
    }

    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, UpdateStatusError> {
        let config_map = pass.config_map().await?;
        if pass.status().connection_string.is_empty() {
            let seed = &pass.cluster.spec.seed_connection_string;
            let uid = pass.cluster.metadata.uid.clone().unwrap_or_default();
            let adopted = adopted_connection_string(config_map.as_ref(), &uid, seed);
            if !adopted.is_empty() {
                tracing::info!(cluster = %pass.name(), connection_string = %adopted, "adopting a connection string");
                pass.status().connection_string = adopted;
            }
        }
        let unavailable = self.fetch(pass).await;
        let now = pass.now;
        let pods = pass.pods().await?;
        let pvcs = pass.pvcs().await?;
        let headless = pass
            .api::<k8s_openapi::api::core::v1::Service>()
            .get_opt(&pass.name())
            .await?;
        let cluster = pass.cluster.clone();
        let db = pass.db.clone();
        let mut status = cluster.status.clone().unwrap_or_default();
        if let Some(db) = &db {
            if !db.cluster.connection_string.is_empty() {
                status.connection_string = db.cluster.connection_string.clone();
            }
            status.configured |= db.is_configured();
            status.database_configuration = db
                .cluster
                .configuration
                .normalized(&cluster.spec.database_configuration);
            if let Some(v) = majority_version(db) {
                status.running_version = v;
            }
        }
        if status.running_version.is_empty() {
            status.running_version = cluster.spec.version.clone();
        }
        status.health = match &db {
            Some(db) => ClusterHealth {
                available: db.client.database_status.available,
                healthy: db.client.database_status.healthy,
                full_replication: db.cluster.full_replication,
                data_movement_priority: db.cluster.data.moving_data.highest_priority,
            },
            None => ClusterHealth::default(),
        };
        let by_group = db.as_ref().map(processes_by_group).unwrap_or_default();
        let has_processes = db.as_ref().is_some_and(|d| !d.cluster.processes.is_empty());
        let available = status.health.available;
        let mut hashed = cluster.clone();
        hashed.status = Some(status.clone());
        let desired_cm = resources::config_map(&hashed);
        let desired_data = desired_cm.data.clone().unwrap_or_default();
        let version = (!cluster.version_compatible_upgrade_in_progress())
            .then(|| cluster.spec.version.clone());
        let sidecar_image = resources::sidecar_image(&cluster);
        let maintenance_zone = db
            .as_ref()
            .map(|d| d.cluster.maintenance_zone.clone())
            .unwrap_or_default();
        let taint_options = &cluster
            .spec
            .automation_options
            .replacements
            .taint_replacement_options;
        let node_taints = if taints::enabled(&cluster) {
            let names: BTreeSet<String> = pods
                .values()
                .filter_map(|p| taints::checked_node(p))
                .map(str::to_owned)
                .collect();
            pass.ctx.nodes.lookup(&pass.ctx.client, &names).await
        } else {
            BTreeMap::new()
        };
        (status.storage_servers_per_disk, status.log_servers_per_disk) =
            servers_per_disk(&cluster, &status.process_groups, &pods);
        for group in &mut status.process_groups {
            let id = group.process_group_id.clone();
            mark_spec_removal(&cluster, group, now);
            if under_maintenance(group, &maintenance_zone) {
                tracing::debug!(cluster = %pass.name(), group = %id, zone = %maintenance_zone, "not checking a process group under maintenance");
                continue;
            }
            let pod = pods.get(id.as_str());
            let conf_key = resources::monitor_conf_key(&group.process_class);
            let processes_per_pod =
                pod.map_or(1, |p| resources::servers_per_pod(p, &group.process_class));
            let command_lines = expected_command_lines(
                desired_data.get(&conf_key).map(String::as_str),
                pod,
                processes_per_pod,
            );
            let seen = Observed {
                pod,
                pvc: pvcs.contains_key(id.as_str()),
                processes: by_group.get(id.as_str()).cloned().unwrap_or_default(),
                status_has_processes: has_processes,
                spec_hash: resources::hash(&resources::pod_spec(&hashed, group)),
                config_hash: Some(resources::config_map_hash(
                    &desired_cm,
                    &group.process_class,
                )),
                processes_per_pod,
                command_lines,
                version: version.clone(),
                sidecar_image_wrong: pod.is_some_and(|p| {
                    resources::container_image(p, resources::SIDECAR_CONTAINER)
                        .is_some_and(|i| i != sidecar_image)
                }),
                pod_metadata_missing: pod.is_some_and(|p| {
                    let want = resources::pod(&hashed, group, "");
                    update_metadata::missing_metadata(&p.metadata, &want.metadata).is_some()
                }),
            };
            update_group(group, &seen, available, now);
            if let Some(node) = pod.and_then(taints::checked_node) {
                if taint_options.is_empty() {
                    taints::clear(group, now);
                } else if let Some(node_taints) = node_taints.get(node) {
                    taints::update_conditions(group, taint_options, node_taints, now);
                }
            }
        }
        status
            .process_groups
            .sort_by(|a, b| a.process_group_id.cmp(&b.process_group_id));
        hashed.status = Some(status.clone());
        let desired_cm = resources::config_map(&hashed);
        status.has_incorrect_config_map = config_map.is_none_or(|cm| cm.data != desired_cm.data);
        status.has_incorrect_service_config =
            headless.is_some() != cluster.needs_headless_service();
        let removing: BTreeSet<String> = status
            .process_groups
            .iter()
            .filter(|g| g.is_marked_for_removal())
            .map(|g| g.process_group_id.to_string())
            .collect();
        status.needs_new_coordinators = match &db {
            Some(db) if status.configured => {
                !coordinators::valid(&cluster, &status.connection_string, db, &removing)
            }
            _ => false,
        };
        if status.configured
            && cluster.should_use_locks()
            && !cluster.spec.lock_options.deny_list.is_empty()
            && db.is_some()
        {
            match pass.lock().get_deny_list().await {
                Ok(list) => status.locks.deny_list = list,
                Err(e) => {
                    tracing::warn!(cluster = %pass.name(), error = %e, "reading the deny list failed")
                }
            }
        }
        status.desired_process_groups = cluster.process_counts_with_defaults().total();
        status.reconciled_process_groups = status
            .process_groups
            .iter()
            .filter(|g| !g.is_marked_for_removal() && g.process_group_conditions.is_empty())
            .count() as i64;
        let was_reconciled = cluster
            .status
            .as_ref()
            .is_some_and(|s| s.generations.reconciled == cluster.metadata.generation.unwrap_or(0));
        let reconciled = check_reconciliation(&cluster, &mut status);
        if let Some(db) = &db
            && reconciled
            && !was_reconciled
            && cluster.should_use_locks()
        {
            clear_leftover_upgrades(pass, db).await?;
        }
        super::conditions::apply(&cluster, &mut status, None, now);
        *pass.status() = status;
        pass.write_status().await?;
        if reconciled && pass.cluster.should_use_locks() && pass.db.is_some() {
            pass.lock().release_lock().await?;
        }
        if let Some(flow) = unavailable {
            return Ok(flow);
        }
        Ok(if reconciled {
            Flow::Continue
        } else {
            Flow::delay(Duration::from_secs(10))
        })
    }
}

/// On reaching reconciliation with locks: clears the pending-upgrade records of the cluster's
/// version left over after an upgrade every process of the database has finished
/// ([`super::bounce_processes::leftover_registrations`]); before the status is written, so a
/// failed clear is retried by the next pass.
async fn clear_leftover_upgrades(pass: &mut Pass, db: &FdbStatus) -> Result<(), UpdateStatusError> {
    let version = pass.cluster.spec.version.clone();
    let lock = pass.lock();
    let registered = lock.get_pending_upgrades(&version).await?;
    if super::bounce_processes::leftover_registrations(db, &version, &registered) {
        tracing::info!(cluster = %pass.name(), %version, groups = ?registered, "clearing pending-upgrade records left over after the upgrade");
        lock.clear_pending_upgrades().await?;
    }
    Ok(())
}

impl Step<Pass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "update_status"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
#[path = "update_status_tests.rs"]
mod tests;
