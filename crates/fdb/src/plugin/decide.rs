//! The pure part of `kubectl-fdb`: what each command reports or changes, from objects already
//! read. Nothing here talks to the API server or the database.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::admin::status::FdbStatus;
use crate::crd::{
    CrashLoopContainerObject, DatabaseConfiguration, FoundationDBCluster, ProcessGroupId,
    ProcessGroupStatus, condition,
};

/// Every process-group condition type `--ignore-condition` and `--process-condition` accept.
pub const CONDITIONS: [&str; 19] = [
    condition::INCORRECT_POD_SPEC,
    condition::INCORRECT_POD_METADATA,
    condition::INCORRECT_CONFIG_MAP,
    condition::INCORRECT_COMMAND_LINE,
    condition::POD_FAILING,
    condition::MISSING_POD,
    condition::MISSING_PVC,
    condition::MISSING_SERVICE,
    condition::MISSING_PROCESSES,
    condition::RESOURCES_TERMINATING,
    condition::SIDECAR_UNREACHABLE,
    condition::POD_PENDING,
    condition::READY,
    condition::NODE_TAINT_DETECTED,
    condition::NODE_TAINT_REPLACING,
    condition::PROCESS_IS_MARKED_AS_EXCLUDED,
    condition::PROCESS_HAS_IO_ERROR,
    condition::INCORRECT_SIDECAR_IMAGE,
    condition::PROCESS_HAS_HIGH_RUN_LOOP_BUSY,
];

/// `Err` naming every entry of `given` that is not a condition type, one per line.
pub fn check_conditions(given: &[String]) -> Result<(), String> {
    let unknown: Vec<String> = given
        .iter()
        .filter(|c| !CONDITIONS.contains(&c.as_str()))
        .map(|c| format!("unknown condition: {c}"))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(unknown.join("\n"))
    }
}

/// How a line of `analyze` is shown: `✔` on stdout, `⚠` and `✖` on stderr (as upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// All is well.
    Good,
    /// Worth knowing, not an issue.
    Warn,
    /// An issue.
    Error,
    /// A heading or blank line, on stdout with no sign.
    Plain,
}

impl Mark {
    /// The line as printed.
    pub fn render(self, text: &str) -> String {
        let sign = match self {
            Mark::Good => '✔',
            Mark::Warn => '⚠',
            Mark::Error => '✖',
            Mark::Plain => return format!("{text}\n"),
        };
        format!("{sign} {text}\n")
    }
}

/// What `analyze` found in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// The lines, in order.
    pub lines: Vec<(Mark, String)>,
    /// Whether anything is wrong.
    pub found_issues: bool,
    /// With `--auto-fix`: process groups to replace (a replacement-worthy condition, or a pod
    /// stuck terminating for more than 5 minutes).
    pub replace: Vec<ProcessGroupId>,
    /// With `--auto-fix`: pods to delete (a container that exited non-zero more than 30
    /// minutes ago and is not ready), other than the pods of groups being replaced.
    pub delete_pods: Vec<String>,
}

/// The options of `analyze`.
#[derive(Clone, Debug, Default)]
pub struct AnalyzeOptions {
    /// Collect fixes.
    pub auto_fix: bool,
    /// Condition types not reported.
    pub ignore_conditions: Vec<String>,
    /// Count the groups marked for removal instead of listing them.
    pub ignore_removals: bool,
}

/// `analyze` of `cluster` and its `pods` at `now` (upstream's checks, in its order).
pub fn analyze(
    cluster: &FoundationDBCluster,
    pods: &[Pod],
    opts: &AnalyzeOptions,
    now: Timestamp,
) -> Analysis {
    let mut a = Analysis::default();
    let status = cluster.status.clone().unwrap_or_default();
    let check = |a: &mut Analysis, ok: bool, good: &str, bad: &str| {
        if ok {
            a.lines.push((Mark::Good, good.to_owned()));
        } else {
            a.found_issues = true;
            a.lines.push((Mark::Error, bad.to_owned()));
        }
    };
    check(
        &mut a,
        status.health.available,
        "Cluster is available",
        "Cluster is not available",
    );
    check(
        &mut a,
        status.health.full_replication,
        "Cluster is fully replicated",
        "Cluster is not fully replicated",
    );
    check(
        &mut a,
        status.generations.reconciled == cluster.metadata.generation.unwrap_or_default(),
        "Cluster is reconciled",
        "Cluster is not reconciled",
    );

    let known: BTreeSet<&str> = status
        .process_groups
        .iter()
        .map(|g| g.process_group_id.0.as_str())
        .collect();
    let mut removed: BTreeSet<&str> = BTreeSet::new();
    let mut group_issue = false;
    let mut ignored = 0;
    for g in &status.process_groups {
        let id = g.process_group_id.0.as_str();
        if g.is_marked_for_removal() {
            removed.insert(id);
            if !opts.ignore_removals {
                a.lines.push((
                    Mark::Warn,
                    format!(
                        "ProcessGroup: {id} is marked for removal, excluded state: {}",
                        g.is_excluded()
                    ),
                ));
            }
            continue;
        }
        if g.process_group_conditions.is_empty() {
            continue;
        }
        group_issue = true;
        for c in &g.process_group_conditions {
            if opts.ignore_conditions.contains(&c.kind) {
                ignored += 1;
                continue;
            }
            let since = Timestamp::from_second(c.timestamp).unwrap_or(Timestamp::UNIX_EPOCH);
            a.lines.push((
                Mark::Error,
                format!(
                    "ProcessGroup: {id} has the following condition: {} since {since}",
                    c.kind
                ),
            ));
        }
        if opts.auto_fix && g.needs_replacement(0, 0, now).is_some() {
            a.replace.push(g.process_group_id.clone());
        }
    }
    if opts.ignore_removals && !removed.is_empty() {
        a.lines.push((
            Mark::Warn,
            format!(
                "Ignored {} process groups marked for removal",
                removed.len()
            ),
        ));
    }
    if ignored > 0 {
        a.lines
            .push((Mark::Warn, format!("Ignored {ignored} conditions")));
    }
    if group_issue {
        a.found_issues = true;
    } else {
        a.lines.push((
            Mark::Good,
            "ProcessGroups are all in ready condition".to_owned(),
        ));
    }

    let label = cluster.process_group_id_label();
    let mut pod_issue = false;
    if pods.is_empty() {
        a.found_issues = true;
        a.lines
            .push((Mark::Error, "Found no Pods for this cluster".to_owned()));
    }
    let mut stuck_pods = Vec::new();
    for pod in pods {
        let id = pod.labels().get(&label).cloned().unwrap_or_default();
        if removed.contains(id.as_str()) {
            continue;
        }
        let name = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        if let Some(deleted) = &pod.metadata.deletion_timestamp
            && deleted.0.as_second() + 300 < now.as_second()
        {
            pod_issue = true;
            a.lines.push((
                Mark::Error,
                format!(
                    "Pod {name} has been stuck in terminating since {}",
                    deleted.0
                ),
            ));
            if opts.auto_fix {
                a.replace.push(ProcessGroupId(id.clone()));
            }
            continue;
        }
        let st = pod.status.clone().unwrap_or_default();
        let phase = st.phase.clone().unwrap_or_default();
        if phase != "Running" {
            pod_issue = true;
            a.lines.push((
                Mark::Error,
                format!(
                    "Pod {name} has unexpected Phase {phase} with Reason: {}",
                    st.reason.clone().unwrap_or_default()
                ),
            ));
        }
        let mut delete = false;
        for c in st.container_statuses.iter().flatten() {
            if c.ready {
                continue;
            }
            pod_issue = true;
            a.lines.push((
                Mark::Error,
                format!("Pod {name} has an unready container: {}", c.name),
            ));
            let long_failed = c
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| {
                    t.exit_code != 0
                        && t.finished_at
                            .as_ref()
                            .is_some_and(|f| f.0.as_second() + 1800 < now.as_second())
                });
            delete |= long_failed;
        }
        if delete && opts.auto_fix {
            stuck_pods.push((id.clone(), pod.name_any()));
        }
        if !known.contains(id.as_str()) {
            pod_issue = true;
            a.lines.push((
                Mark::Error,
                format!("Pod {name} with the ID {id} is not part of the cluster spec status"),
            ));
        }
    }
    if pod_issue {
        a.found_issues = true;
    } else {
        a.lines
            .push((Mark::Good, "Pods are all running and available".to_owned()));
    }
    if !fault_domains(cluster, &mut a.lines) {
        a.found_issues = true;
    }
    a.lines.push((Mark::Plain, String::new()));
    // A pod whose group is replaced goes with its group (upstream compared the groups' IDs
    // with pod names here, so such pods were deleted as well).
    a.delete_pods = stuck_pods
        .into_iter()
        .filter(|(id, _)| !a.replace.iter().any(|r| &r.0 == id))
        .map(|(_, pod)| pod)
        .collect();
    a
}

/// The fault-domain summary of `analyze`, as upstream prints it: per process class (classes in
/// descending order), the fault domains its process groups use, counting neither groups
/// marked for removal nor groups never scheduled (no fault domain); where some domain holds
/// several groups, the three that hold the most. A class spread over more domains than the
/// redundancy mode needs is good, exactly as many a warning, fewer an issue; so is a cluster
/// with no fault domain known at all. Returns whether no issue was found.
pub fn fault_domains(cluster: &FoundationDBCluster, lines: &mut Vec<(Mark, String)>) -> bool {
    use std::collections::BTreeMap;
    let mut summary: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let groups = cluster
        .status
        .as_ref()
        .map(|s| s.process_groups.as_slice())
        .unwrap_or_default();
    for g in groups {
        if g.is_marked_for_removal() || g.fault_domain.is_empty() {
            continue;
        }
        *summary
            .entry(g.process_class.0.as_str())
            .or_default()
            .entry(g.fault_domain.as_str())
            .or_default() += 1;
    }
    if summary.is_empty() {
        lines.push((
            Mark::Warn,
            "Could not fetch fault domain information for cluster".to_owned(),
        ));
        return false;
    }
    lines.push((Mark::Plain, "Fault Domain Summary for cluster:".to_owned()));
    let minimum = usize::try_from(cluster.minimum_fault_domains()).unwrap_or(0);
    let mut valid = true;
    for (class, domains) in summary.iter().rev() {
        let total: usize = domains.values().sum();
        let mut line = format!(
            "{class}: Total: {} fault domains, {total} process groups",
            domains.len()
        );
        if domains.len() != total {
            // Most groups first; a tie in name order (upstream's order there is Go's map order).
            let mut top: Vec<(&str, usize)> = domains.iter().map(|(d, n)| (*d, *n)).collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            line.push_str(" top 3 fault domains:");
            for (d, n) in top.iter().take(3) {
                line.push_str(&format!(" {d}: {n}"));
            }
        }
        let mark = match domains.len().cmp(&minimum) {
            std::cmp::Ordering::Greater => Mark::Good,
            std::cmp::Ordering::Equal => Mark::Warn,
            std::cmp::Ordering::Less => {
                valid = false;
                Mark::Error
            }
        };
        lines.push((mark, line));
    }
    valid
}

/// How process groups are chosen (upstream's selection flags).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Pod names, or process-group IDs with `use_process_group_id`.
    pub ids: Vec<String>,
    /// `ids` are process-group IDs.
    pub use_process_group_id: bool,
    /// Every group of this class (the IDs are then ignored).
    pub process_class: Option<String>,
    /// Every group with any of these conditions.
    pub conditions: Vec<String>,
    /// Every group whose pod carries these labels (the IDs are then ignored).
    pub match_labels: BTreeMap<String, String>,
}

impl Selection {
    /// Whether it selects anything at all.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
            && self.process_class.is_none()
            && self.conditions.is_empty()
            && self.match_labels.is_empty()
    }
}

/// The process groups of `cluster` that `sel` chooses, given the cluster's `pods`; `Err`
/// names a pod or group that is not the cluster's.
pub fn select(
    cluster: &FoundationDBCluster,
    pods: &[Pod],
    sel: &Selection,
) -> Result<Vec<ProcessGroupId>, String> {
    let groups = groups(cluster);
    let label = cluster.process_group_id_label();
    let mut out: Vec<ProcessGroupId> = Vec::new();
    let mut push = |id: ProcessGroupId| {
        if !out.contains(&id) {
            out.push(id);
        }
    };
    if let Some(class) = &sel.process_class {
        for g in groups.iter().filter(|g| g.process_class.as_str() == class) {
            push(g.process_group_id.clone());
        }
    } else if !sel.match_labels.is_empty() {
        for pod in pods {
            let labels = pod.labels();
            if sel
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
                && let Some(id) = labels.get(&label)
            {
                push(ProcessGroupId(id.clone()));
            }
        }
    } else {
        for id in &sel.ids {
            if sel.use_process_group_id {
                if !groups.iter().any(|g| &g.process_group_id.0 == id) {
                    return Err(format!(
                        "process group {id:?} is not part of cluster {:?}",
                        cluster.name_any()
                    ));
                }
                push(ProcessGroupId(id.clone()));
                continue;
            }
            let pod = pods.iter().find(|p| &p.name_any() == id).ok_or_else(|| {
                format!(
                    "pod {id:?} is not a pod of cluster {:?}",
                    cluster.name_any()
                )
            })?;
            let pg = pod
                .labels()
                .get(&label)
                .ok_or_else(|| format!("pod {id:?} has no {label} label"))?;
            push(ProcessGroupId(pg.clone()));
        }
    }
    for g in &groups {
        if sel.conditions.iter().any(|c| g.has_condition(c)) {
            push(g.process_group_id.clone());
        }
    }
    Ok(out)
}

/// Upstream's cross-cluster selection (`-l/--cluster-label` without `-c`): the named pods
/// grouped by the value of their `label` (the name of their cluster), clusters in name order
/// and pods in the order given; `Err` names a pod without that label.
pub fn group_by_cluster(
    pods: &[Pod],
    label: &str,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in pods {
        let name = pod.name_any();
        let cluster = pod
            .labels()
            .get(label)
            .ok_or_else(|| format!("no cluster-label '{label}' found for pod '{name}'"))?;
        let names = out.entry(cluster.clone()).or_default();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(out)
}

/// Why a selection cannot go across clusters (no `-c`), as upstream refuses it: only pods
/// named by their names can be looked up by their cluster label.
pub fn check_cross_cluster(sel: &Selection) -> Result<(), String> {
    if sel.process_class.is_some() || !sel.conditions.is_empty() || !sel.match_labels.is_empty() {
        return Err(
            "selection of process groups by cluster-label (cross-cluster selection) is \
            incompatible with process-class, process-condition, and match-labels options.  \
            Please specify a cluster"
                .into(),
        );
    }
    if sel.use_process_group_id {
        return Err(
            "process-group IDs do not name a cluster: pass -c with --use-process-group-id".into(),
        );
    }
    if sel.ids.is_empty() {
        return Err("podNames will not be selected without cluster specification".into());
    }
    Ok(())
}

fn groups(cluster: &FoundationDBCluster) -> Vec<ProcessGroupStatus> {
    cluster
        .status
        .as_ref()
        .map(|s| s.process_groups.clone())
        .unwrap_or_default()
}

/// Every group of `cluster` that needs a replacement now (`--remove-all-failed`).
pub fn failed(cluster: &FoundationDBCluster, now: Timestamp) -> Vec<ProcessGroupId> {
    groups(cluster)
        .into_iter()
        .filter(|g| g.needs_replacement(0, 0, now).is_some())
        .map(|g| g.process_group_id)
        .collect()
}

/// The cluster's removal list (`processGroupsToRemove`, or `…WithoutExclusion`) with `ids`
/// added, or `None` when every one is already there.
pub fn removal_list(
    cluster: &FoundationDBCluster,
    ids: &[ProcessGroupId],
    with_exclusion: bool,
) -> Option<Vec<ProcessGroupId>> {
    let mut list = if with_exclusion {
        cluster.spec.process_groups_to_remove.clone()
    } else {
        cluster
            .spec
            .process_groups_to_remove_without_exclusion
            .clone()
    };
    let before = list.len();
    for id in ids {
        if !list.contains(id) {
            list.push(id.clone());
        }
    }
    (list.len() != before).then_some(list)
}

/// How `kubectl fdb buggify` changes a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEdit {
    /// Add the process groups (kept in order, no duplicates).
    Add,
    /// Remove the process groups (`--clear`).
    Clear,
    /// Empty the list (`--clean`).
    Clean,
}

/// `list` after `edit` with `ids`.
pub fn edit_list(
    list: &[ProcessGroupId],
    ids: &[ProcessGroupId],
    edit: ListEdit,
) -> Vec<ProcessGroupId> {
    match edit {
        ListEdit::Add => {
            let mut out = list.to_vec();
            for id in ids {
                if !out.contains(id) {
                    out.push(id.clone());
                }
            }
            out
        }
        ListEdit::Clear => list
            .iter()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect(),
        ListEdit::Clean => Vec::new(),
    }
}

/// `buggify.crashLoopContainers` after `edit` of `container`'s targets, as upstream's: adding
/// creates the container's entry when missing; cleaning empties its targets and keeps it.
pub fn edit_crash_loop(
    list: &[CrashLoopContainerObject],
    container: &str,
    ids: &[ProcessGroupId],
    edit: ListEdit,
) -> Vec<CrashLoopContainerObject> {
    let mut out = list.to_vec();
    match out.iter_mut().find(|c| c.container_name == container) {
        Some(entry) => entry.targets = edit_list(&entry.targets, ids, edit),
        None if edit == ListEdit::Add => out.push(CrashLoopContainerObject {
            container_name: container.to_owned(),
            targets: edit_list(&[], ids, edit),
        }),
        None => {}
    }
    out
}

/// The `configure` arguments of the configuration the operator would apply, with
/// `fail_over` the priorities of the two main data centers swapped first.
pub fn configuration(cluster: &FoundationDBCluster, fail_over: bool) -> Result<String, String> {
    let spec = &cluster.spec.database_configuration;
    let mut desired = DatabaseConfiguration::desired(spec);
    if fail_over {
        fail_over_regions(&mut desired);
    }
    desired
        .configuration_string()
        .map_err(|e| format!("cluster {:?}: {e}", cluster.name_any()))
}

/// `get configuration --update`: the database configuration to write into the spec (the
/// spec's own, with `fail_over` the priorities of the two main data centers swapped, as
/// upstream's `updateConfig`), or `None` when that is what the spec already says.
pub fn updated_configuration(
    cluster: &FoundationDBCluster,
    fail_over: bool,
) -> Option<DatabaseConfiguration> {
    let current = &cluster.spec.database_configuration;
    let mut updated = current.clone();
    if fail_over {
        fail_over_regions(&mut updated);
    }
    (updated != *current).then_some(updated)
}

/// Swaps the priorities of the main (non-satellite) data centers of a two-region
/// configuration (upstream's `FailOver`); satellites and the regions' satellite settings are
/// kept (upstream dropped the latter). One region or none: unchanged.
pub fn fail_over_regions(c: &mut DatabaseConfiguration) {
    if c.regions.len() <= 1 {
        return;
    }
    let mains: BTreeMap<String, i64> = c
        .regions
        .iter()
        .flat_map(|r| r.data_centers.iter())
        .filter(|d| d.satellite == 0)
        .map(|d| (d.id.clone(), d.priority))
        .collect();
    for dc in c
        .regions
        .iter_mut()
        .flat_map(|r| r.data_centers.iter_mut())
        .filter(|d| d.satellite == 0)
    {
        if let Some((_, p)) = mains.iter().find(|(id, _)| **id != dc.id) {
            dc.priority = *p;
        }
    }
}

/// One ongoing exclusion: a process still holding a stateful role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exclusion {
    /// The process ID (`process_id` locality, else `instance_id`).
    pub id: String,
    /// Bytes its role still stores.
    pub stored_bytes: i64,
    /// When it was read (Unix seconds).
    pub at: i64,
}

/// The ongoing exclusions in `status` read at `at` (sorted by ID), and the lines for fully
/// excluded processes when `ignore_fully_excluded` is off.
pub fn exclusions(
    status: &FdbStatus,
    at: i64,
    ignore_fully_excluded: bool,
) -> (Vec<Exclusion>, Vec<String>) {
    let mut ongoing = Vec::new();
    let mut done = Vec::new();
    for p in status.cluster.processes.values() {
        if !p.excluded {
            continue;
        }
        let id = p
            .locality
            .get("process_id")
            .or_else(|| p.locality.get("instance_id"))
            .cloned()
            .unwrap_or_default();
        if !ignore_fully_excluded && p.roles.is_empty() {
            done.push(format!("{id} is fully excluded"));
            continue;
        }
        for r in &p.roles {
            if matches!(r.role.as_str(), "storage" | "log") {
                ongoing.push(Exclusion {
                    id: id.clone(),
                    stored_bytes: r.stored_bytes,
                    at,
                });
            }
        }
    }
    ongoing.sort_by(|a, b| a.id.cmp(&b.id));
    done.sort();
    (ongoing, done)
}

/// The line of one ongoing exclusion, with an estimate from the previous reading of the same
/// process: the time left at the rate its bytes went down, `N/A` without a reading or without
/// progress (upstream divided by the difference and stopped on no progress).
pub fn exclusion_line(now: &Exclusion, before: Option<&Exclusion>) -> String {
    let estimate = match before {
        Some(b) if b.stored_bytes > now.stored_bytes && now.at > b.at => {
            let rate = (b.stored_bytes - now.stored_bytes) as f64 / (now.at - b.at) as f64;
            let secs = (now.stored_bytes as f64 / rate).ceil() as i64;
            format!("{secs}s")
        }
        _ => "N/A".to_owned(),
    };
    format!(
        "{}:\t {} are left - estimate: {estimate}\n",
        now.id,
        pretty_bytes(now.stored_bytes)
    )
}

/// Bytes as upstream prints them: `%3.2f` with a binary unit (`1.50Mi`).
pub fn pretty_bytes(bytes: i64) -> String {
    let mut v = bytes as f64;
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi"] {
        if v < 1024.0 {
            return format!("{v:.2}{unit}");
        }
        v /= 1024.0;
    }
    bytes.to_string()
}

/// The addresses (as status json reports them) of the processes of `ids`.
pub fn addresses_of(status: &FdbStatus, ids: &[ProcessGroupId]) -> Vec<String> {
    let mut out: Vec<String> = status
        .cluster
        .processes
        .values()
        .filter(|p| {
            p.locality
                .get("instance_id")
                .is_some_and(|i| ids.iter().any(|id| &id.0 == i))
        })
        .map(|p| p.address.clone())
        .collect();
    out.sort();
    out
}

/// The arguments of `kubectl` that restart the fdbserver processes of `pod` as upstream does
/// (`pkill fdbserver` in its main container; fdbmonitor starts them again).
pub fn restart_argv(namespace: &str, pod: &str) -> Vec<String> {
    in_main_container(
        namespace,
        pod,
        false,
        &["/bin/bash", "-c", "pkill fdbserver || true"],
    )
}

/// What `fix-coordinator-ips` found: a line per coordinator, and the connection string with
/// each coordinator's IP replaced by its process group's current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorFix {
    /// What was decided for each coordinator (upstream's lines).
    pub lines: Vec<String>,
    /// The new connection string.
    pub connection_string: String,
}

/// Upstream's `fix-coordinator-ips`, from the cluster's status and its pods: a coordinator is
/// matched to the process group that has its IP among its addresses (any of them; upstream
/// looked at the first only), and takes the IP of that group's pod, or, without a pod or pod
/// IP, the group's last known address. Port and flags are kept; an unmatched coordinator is
/// kept as it is.
pub fn fix_coordinator_ips(
    cluster: &FoundationDBCluster,
    pods: &[Pod],
) -> Result<CoordinatorFix, String> {
    let status = cluster.status.clone().unwrap_or_default();
    let mut cs = crate::crd::ConnectionString::parse(&status.connection_string)
        .map_err(|e| format!("cluster {:?}: {e}", cluster.name_any()))?;
    let mut lines = Vec::new();
    let name = cluster.name_any();
    for coordinator in &mut cs.coordinators {
        let mut address =
            crate::crd::ProcessAddress::parse(coordinator).map_err(|e| e.to_string())?;
        let machine = format!("{}:{}", address.host, address.port);
        let Some(group) = status
            .process_groups
            .iter()
            .find(|g| g.addresses.contains(&address.host))
        else {
            lines.push(format!(
                "ProcessGroup for {machine} is missing in the FoundationDBCluster status, coordinator address will not be updated"
            ));
            continue;
        };
        lines.push(format!(
            "{machine} is associated with process group: {}",
            group.process_group_id
        ));
        let pod_name = group.pod_name(&name);
        let pod_ip = pods
            .iter()
            .find(|p| p.name_any() == pod_name)
            .and_then(|p| {
                p.status
                    .as_ref()?
                    .pod_ips
                    .as_ref()?
                    .first()
                    .map(|ip| ip.ip.clone())
            })
            .filter(|ip| !ip.is_empty());
        let new_host = match pod_ip {
            Some(ip) => {
                lines.push(format!(
                    "Update the coordinator address for {} to new IP address: {ip}",
                    address.host
                ));
                ip
            }
            None => {
                lines.push(format!(
                    "Pod for process group {} not found will try to read information from FoundationDBCluster status",
                    group.process_group_id
                ));
                group
                    .addresses
                    .last()
                    .cloned()
                    .unwrap_or_else(|| address.host.clone())
            }
        };
        address.host = new_host;
        *coordinator = address.to_string();
    }
    Ok(CoordinatorFix {
        lines,
        connection_string: cs.to_string(),
    })
}

/// The arguments of `kubectl` that write `connection_string` into `pod`'s cluster file and
/// restart its fdbserver processes (upstream's `fix-coordinator-ips`).
pub fn fix_cluster_file_argv(namespace: &str, pod: &str, connection_string: &str) -> Vec<String> {
    let command =
        format!("echo {connection_string} > /var/fdb/data/fdb.cluster && pkill fdbserver");
    in_main_container(namespace, pod, false, &["/bin/bash", "-c", &command])
}

/// The arguments of `kubectl` for `kubectl fdb exec`: `command` (`bash` when empty) in the
/// main container of `pod`, with stdin, and a TTY with `tty`.
pub fn exec_argv(namespace: &str, pod: &str, command: &[String], tty: bool) -> Vec<String> {
    let command: Vec<&str> = if command.is_empty() {
        vec!["bash"]
    } else {
        command.iter().map(String::as_str).collect()
    };
    let mut argv = in_main_container(namespace, pod, true, &command);
    if tty {
        argv.insert(2, "-t".into());
    }
    argv
}

/// The arguments of `kubectl` that print `status json` from inside `pod`.
pub fn status_argv(namespace: &str, pod: &str) -> Vec<String> {
    fdbcli_argv(namespace, pod, "status json")
}

/// The arguments of `kubectl` that run `fdbcli --exec COMMAND` inside `pod` (no shell).
pub fn fdbcli_argv(namespace: &str, pod: &str, command: &str) -> Vec<String> {
    in_main_container(namespace, pod, false, &["fdbcli", "--exec", command])
}

/// `kubectl exec [-i] -n NS POD -c foundationdb -- COMMAND…`.
pub(super) fn in_main_container(
    namespace: &str,
    pod: &str,
    stdin: bool,
    command: &[&str],
) -> Vec<String> {
    let mut argv = vec!["exec".to_owned()];
    if stdin {
        argv.push("-i".into());
    }
    argv.extend(
        [
            "-n",
            namespace,
            pod,
            "-c",
            crate::cluster::resources::MAIN_CONTAINER,
            "--",
        ]
        .iter()
        .chain(command)
        .map(|s| (*s).to_owned()),
    );
    argv
}

/// The operator's version: the tag of container `container` of its Deployment.
pub fn operator_version(d: &Deployment, container: &str) -> Result<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == container))
        .and_then(|c| c.image.as_ref())
        .map(|image| image.rsplit(':').next().unwrap_or_default().to_owned())
        .ok_or_else(|| {
            format!(
                "could not find container: {container} in {}/{}",
                d.namespace().unwrap_or_default(),
                d.name_any()
            )
        })
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
