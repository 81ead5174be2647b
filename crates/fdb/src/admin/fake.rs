//! An in-memory FoundationDB database behind the admin and lock traits: test support for the
//! reconcilers (FoundationDB itself cannot run on the test machines), in the spirit of
//! upstream's mock admin client but with the lock's real semantics.
//!
//! Contract:
//! - The database is *unconfigured* until `configure new …` runs: `get_status` then fails
//!   with a timeout (an unconfigured database is unavailable), as real `status json` does.
//!   After that `configure` without `new` applies changes; `configure new` on a configured
//!   database is an error (FoundationDB refuses it), so a second one is visible to tests.
//! - Processes are what the test (or [`FakeDatabase::sync_pods`]) says they are; `excluded`
//!   follows the exclusion list (by address without port or `locality_instance_id:<id>`).
//!   An excluded storage or log process keeps its data role for [`FakeDatabase::set_drain_reads`]
//!   status reads after its exclusion, so exclusions are "in progress" for a while; a
//!   blocking `exclude` (no `no_wait`) fails with a timeout while any target still holds a role.
//!   The role's `stored_bytes` is [`STORED_BYTES`], or while draining [`DRAIN_BYTES_PER_READ`]
//!   per read left.
//! - Coordinators are the connection string's addresses; a process at such an address that is
//!   not excluded holds the `coordinator` role; `coordinators …` writes a new connection
//!   string with a new generation ID.
//! - Time is the wall clock plus an injectable offset ([`FakeDatabase::advance`]); configure,
//!   exclude, include, kill and coordinator changes reset the recovery timer.
//! - Each process has a start time (its `uptime_seconds`) and keeps the command line and
//!   version it started with; `kill` and `kill_for_upgrade` restart it (uptime 0) with what its
//!   pod's monitor has loaded by then (`fake_pods.rs`, [`super::fake_monitor`]).
//! - A stateful process that disappears without being excluded costs its teams a replica
//!   (data unhealthy, `min_replicas_remaining` lowered) until it comes back or
//!   [`FakeDatabase::set_heal_reads`] status reads have re-replicated its data.
//! - `cluster.clients.supported_versions` is what the test sets ([`FakeDatabase::set_clients`]).
//! - `maintenance on <zone> <secs>` sets `cluster.maintenance_zone` until the clock passes
//!   the duration or `maintenance off`; the operator's maintenance list is a map of group
//!   to timestamp. [`FakeDatabase::make_incompatible`] turns a process into an incompatible
//!   connection until its pod is replaced.
//! - The lock follows [`super::lock`] exactly (expiry against the clock, deny list, owner
//!   take-over); every instance created by [`FakeDatabase::lock_client`] shares the records.
//! - Every call is logged in fdbcli's words (lock takes as `lock <owner>: taken|held by
//!   <owner>|denied`) ([`FakeDatabase::calls`]); [`FakeDatabase::fail`]
//!   makes the next call of one method fail, [`FakeDatabase::set_available`] makes the whole
//!   database unavailable.
//! - Backups by tag and one restore at a time, as `fdbbackup`/`fdbrestore` report them
//!   (`fake_backups.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::lock::{self, LockRecord, TakeDecision};
use super::status::{
    ClientDatabaseStatus, Coordinator, DataState, FdbStatus, ProcessInfo, ProcessRoleInfo,
    RecoveryState, SupportedVersion, TeamTracker,
};
use super::{AdminClient, AdminError, LiveBackupStatus, LockClient};
use crate::crd::{
    ConnectionString, DatabaseConfiguration, ExcludedServers, FoundationDBBackup,
    FoundationDBRestore, LockDenyListEntry, ProcessAddress, ProcessClass,
};

/// One simulated `fdbserver` process.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeProcess {
    /// `ip:port`.
    pub address: String,
    /// The process class.
    pub class: ProcessClass,
    /// `locality_instance_id`: the process-group ID.
    pub instance_id: String,
    /// `locality_process_id`: `<group>-<n>` for process `n` of its pod (empty: not reported,
    /// the process is then listed under its instance ID).
    pub process_id: String,
    /// `locality_zoneid`.
    pub zone: String,
    /// The version it runs.
    pub version: String,
    /// Its command line.
    pub command_line: String,
    /// When it started, Unix seconds on the database's clock (`uptime_seconds` counts from
    /// here).
    pub started: i64,
    /// The command line and version its pod's monitor would start it with now: a `kill`
    /// restarts it with these (until then it keeps running what it started with).
    pub restart_with: Option<(String, String)>,
    /// The UID of the pod it runs in (empty when set by a test): a new pod at the same
    /// address is a new process.
    pub pod: String,
}

#[derive(Default)]
struct State {
    // Seconds added to the wall clock by `advance`.
    offset: i64,
    last_recovery: i64,
    available: bool,
    configuration: Option<DatabaseConfiguration>,
    connection_string: String,
    processes: BTreeMap<String, FakeProcess>,
    // exclusion string -> status reads left before its processes give up their roles
    exclusions: BTreeMap<String, u32>,
    drain_reads: u32,
    heal_reads: u32,
    // (clock, fdbcli words)
    calls: Vec<(i64, String)>,
    failures: BTreeMap<&'static str, AdminError>,
    lock: Option<LockRecord>,
    deny_list: BTreeSet<String>,
    upgrades: BTreeMap<String, BTreeSet<String>>,
    maintenance_zone: String,
    // Clock second at which the maintenance zone lapses (`maintenance on <zone> <secs>`).
    maintenance_until: i64,
    maintenance: BTreeMap<String, i64>,
    // Instance ID -> UID of the pod whose process speaks an incompatible protocol.
    incompatible: BTreeMap<String, String>,
    // Stateful instance IDs seen with data, not excluded: one that is gone costs a replica
    // until its data is re-replicated (status reads left) or it comes back.
    stateful: BTreeMap<String, u32>,
    // Processes (by key) whose exclusion had finished draining them when they were included
    // again: they hold no data (a pod gone right after the include lost nothing) until they
    // are excluded again or a new process starts in their place.
    drained: BTreeSet<String>,
    // `cluster.clients.supported_versions`, as the test sets them.
    clients: Vec<SupportedVersion>,
    // Backups by tag, the blob store's URLs and the restore (`fake_backups.rs`).
    backups: backups::Backups,
}

impl FakeProcess {
    /// Its key in `cluster.processes` and the table of lost data: its `process_id`, else its
    /// instance ID.
    pub fn key(&self) -> &str {
        if self.process_id.is_empty() {
            &self.instance_id
        } else {
            &self.process_id
        }
    }
}

impl State {
    fn excluded(&self, p: &FakeProcess) -> Option<&u32> {
        let ip = ProcessAddress::parse(&p.address)
            .map(|a| a.host.clone())
            .unwrap_or_default();
        self.exclusions
            .get(&format!("locality_instance_id:{}", p.instance_id))
            .or_else(|| self.exclusions.get(&ip))
            .or_else(|| self.exclusions.get(&p.address))
    }

    fn holds_data(&self, p: &FakeProcess) -> bool {
        let stateful = p.class.is_stateful() && !self.drained.contains(p.key());
        match self.excluded(p) {
            None => stateful,
            Some(left) => stateful && *left > 0,
        }
    }

    fn take_failure(&mut self, method: &'static str) -> Result<(), AdminError> {
        match self.failures.remove(method) {
            Some(e) => Err(e),
            None if !self.available => Err(AdminError::Timeout("database is unavailable".into())),
            None => Ok(()),
        }
    }

    fn now(&self) -> i64 {
        jiff::Timestamp::now().as_second() + self.offset
    }

    fn recovered(&mut self) {
        self.last_recovery = self.now();
    }
}

/// Whether one of the exclusion strings `targets` names `p` (its IP, address or instance ID).
fn targeted_by(p: &FakeProcess, targets: &[String]) -> bool {
    let ip = ProcessAddress::parse(&p.address)
        .map(|a| a.host)
        .unwrap_or_default();
    targets.iter().any(|t| {
        *t == ip || *t == p.address || *t == format!("locality_instance_id:{}", p.instance_id)
    })
}

/// The simulated database; clones share it.
#[derive(Clone)]
pub struct FakeDatabase {
    state: Arc<Mutex<State>>,
}

impl Default for FakeDatabase {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeDatabase {
    /// An available, unconfigured database whose clock starts at the real time and whose
    /// last recovery was an hour ago.
    pub fn new() -> Self {
        let now = jiff::Timestamp::now().as_second();
        FakeDatabase {
            state: Arc::new(Mutex::new(State {
                last_recovery: now - 3600,
                available: true,
                heal_reads: 50,
                ..State::default()
            })),
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clock, Unix seconds.
    pub fn now(&self) -> i64 {
        self.st().now()
    }

    /// Moves the clock forward.
    pub fn advance(&self, seconds: i64) {
        self.st().offset += seconds;
    }

    /// Every call so far, in fdbcli's words (`configure new double ssd-2`, `exclude no_wait …`).
    pub fn calls(&self) -> Vec<String> {
        self.st().calls.iter().map(|(_, c)| c.clone()).collect()
    }

    /// Every call so far with the database's clock (Unix seconds) when it was made.
    pub fn timed_calls(&self) -> Vec<(i64, String)> {
        self.st().calls.clone()
    }

    /// Makes the next call of `method` (the trait method's name) fail with `error`.
    pub fn fail(&self, method: &'static str, error: AdminError) {
        self.st().failures.insert(method, error);
    }

    /// Makes every call fail with a timeout (false) or answer again (true).
    pub fn set_available(&self, available: bool) {
        self.st().available = available;
    }

    /// How many status reads the data of a stateful process that disappeared (without
    /// exclusion) takes to be re-replicated (default 50).
    pub fn set_heal_reads(&self, reads: u32) {
        self.st().heal_reads = reads;
    }

    /// How many status reads an excluded stateful process keeps its data role.
    pub fn set_drain_reads(&self, reads: u32) {
        self.st().drain_reads = reads;
    }

    /// The current connection string (empty before the operator wrote a cluster file).
    pub fn connection_string(&self) -> String {
        self.st().connection_string.clone()
    }

    /// Sets the connection string (the operator's initial cluster file reaching the processes).
    pub fn set_connection_string(&self, text: &str) {
        self.st().connection_string = text.to_owned();
    }

    /// The live configuration, if configured.
    pub fn configuration(&self) -> Option<DatabaseConfiguration> {
        self.st().configuration.clone()
    }

    /// The exclusion list.
    pub fn exclusions(&self) -> BTreeSet<String> {
        self.st().exclusions.keys().cloned().collect()
    }

    /// Sets the connected clients (`cluster.clients.supported_versions`).
    pub fn set_clients(&self, versions: Vec<SupportedVersion>) {
        self.st().clients = versions;
    }

    /// The processes now.
    pub fn processes(&self) -> Vec<FakeProcess> {
        self.st().processes.values().cloned().collect()
    }

    /// Replaces the process table.
    pub fn set_processes(&self, processes: impl IntoIterator<Item = FakeProcess>) {
        self.st().processes = processes
            .into_iter()
            .map(|p| (p.address.clone(), p))
            .collect();
    }

    /// Instance IDs of processes that still hold data (stateful, not excluded or still
    /// draining), read without moving the drain along.
    pub fn holding_data(&self) -> BTreeSet<String> {
        let st = self.st();
        st.processes
            .values()
            .filter(|p| st.holds_data(p))
            .map(|p| p.instance_id.clone())
            .collect()
    }

    /// The zone in maintenance (empty when none, or once it lapsed).
    pub fn maintenance_zone(&self) -> String {
        let st = self.st();
        if st.now() >= st.maintenance_until {
            return String::new();
        }
        st.maintenance_zone.clone()
    }

    /// A lock client for the operator instance `owner` (its process-group-ID prefix).
    pub fn lock_client(&self, owner: &str, duration_secs: i64) -> FakeLockClient {
        FakeLockClient {
            db: self.clone(),
            owner: owner.to_owned(),
            duration_secs,
        }
    }

    /// The lock record, if any.
    pub fn lock_record(&self) -> Option<LockRecord> {
        self.st().lock.clone()
    }

    /// Writes (or clears) the lock record as a committed transaction would: the simulator's
    /// `set`/`clear` of the lock key (`crate::sim`), where the real lock client decides.
    pub fn set_lock_record(&self, record: Option<LockRecord>) {
        self.st().lock = record;
    }

    fn status(&self) -> Result<FdbStatus, AdminError> {
        let mut st = self.st();
        st.take_failure("get_status")?;
        let Some(configuration) = st.configuration.clone() else {
            return Err(AdminError::Timeout("database is unavailable".into()));
        };
        let coordinators: BTreeSet<String> = ConnectionString::parse(&st.connection_string)
            .map(|c| c.coordinators.into_iter().collect())
            .unwrap_or_default();
        let mut s = FdbStatus::default();
        s.client.database_status = ClientDatabaseStatus {
            available: true,
            healthy: true,
        };
        s.client.coordinators.coordinators = coordinators
            .iter()
            .map(|c| Coordinator {
                address: c.clone(),
                reachable: st.processes.contains_key(c),
            })
            .collect();
        let reachable = s
            .client
            .coordinators
            .coordinators
            .iter()
            .filter(|c| c.reachable)
            .count();
        s.client.coordinators.quorum_reachable = reachable * 2 > coordinators.len();
        let mut configuration = configuration;
        configuration.excluded_servers = st
            .exclusions
            .keys()
            .map(|e| match e.strip_prefix("locality_instance_id:") {
                Some(_) => ExcludedServers {
                    locality: e.clone(),
                    ..ExcludedServers::default()
                },
                None => ExcludedServers {
                    address: e.clone(),
                    ..ExcludedServers::default()
                },
            })
            .collect();
        s.cluster.configuration = configuration;
        let now = st.now();
        let elapsed = (now - st.last_recovery) as f64;
        if !st.maintenance_zone.is_empty() && now >= st.maintenance_until {
            st.maintenance_zone.clear();
        }
        for p in st.processes.values() {
            if st.incompatible.get(&p.instance_id) == Some(&p.pod) {
                s.cluster.incompatible_connections.push(p.address.clone());
                continue;
            }
            let excluded = st.excluded(p).is_some();
            let mut roles = Vec::new();
            if coordinators.contains(&p.address) && !excluded {
                roles.push(role("coordinator"));
            }
            if st.holds_data(p) {
                let mut r = role(if p.class.is_log_process() {
                    "log"
                } else {
                    "storage"
                });
                // A draining process reports what is left: one MiB per status read.
                r.stored_bytes = st
                    .excluded(p)
                    .map_or(STORED_BYTES, |left| i64::from(*left) * DRAIN_BYTES_PER_READ);
                roles.push(r);
            }
            let mut locality = BTreeMap::from([
                ("instance_id".to_owned(), p.instance_id.clone()),
                ("zoneid".to_owned(), p.zone.clone()),
                ("machineid".to_owned(), p.zone.clone()),
            ]);
            if !p.process_id.is_empty() {
                locality.insert("process_id".to_owned(), p.process_id.clone());
            }
            s.cluster.processes.insert(
                p.key().to_owned(),
                ProcessInfo {
                    address: p.address.clone(),
                    class_type: p.class.to_string(),
                    command_line: p.command_line.clone(),
                    excluded,
                    locality,
                    version: p.version.clone(),
                    uptime_seconds: (now - p.started).max(0) as f64,
                    roles,
                    ..ProcessInfo::default()
                },
            );
        }
        // A stateful process that is gone (not excluded) costs its teams a replica until it
        // comes back or its data is re-replicated after `heal_reads` status reads.
        let present: BTreeSet<String> = st.processes.values().map(|p| p.key().to_owned()).collect();
        let lost: Vec<String> = st
            .stateful
            .keys()
            .filter(|id| !present.contains(*id))
            .cloned()
            .collect();
        for id in &lost {
            let left = st.stateful.get(id).copied().unwrap_or(0);
            if left == 0 {
                st.stateful.remove(id);
            } else {
                st.stateful.insert(id.clone(), left - 1);
            }
        }
        let replicas = match s.cluster.configuration.redundancy_mode.as_str() {
            "single" => 1,
            "triple" | "three_data_hall" => 3,
            _ => 2,
        };
        let healthy = DataState {
            healthy: lost.is_empty(),
            name: if lost.is_empty() {
                "healthy"
            } else {
                "healthy_repartitioning"
            }
            .into(),
            min_replicas_remaining: (replicas - lost.len() as i64).max(0),
            ..DataState::default()
        };
        s.client.database_status.healthy = lost.is_empty();
        s.cluster.data.state = healthy.clone();
        s.cluster.data.team_trackers = vec![TeamTracker {
            primary: true,
            state: healthy,
            unhealthy_servers: Some(0),
        }];
        s.cluster.full_replication = true;
        s.cluster.generation = 2;
        s.cluster.connection_string = st.connection_string.clone();
        s.cluster.maintenance_zone = st.maintenance_zone.clone();
        s.cluster.clients.supported_versions = st.clients.clone();
        s.cluster.recovery_state = RecoveryState {
            active_generations: 1,
            name: "fully_recovered".into(),
            seconds_since_last_recovered: elapsed,
        };
        s.cluster.database_available = Some(true);
        // Each read moves draining exclusions along.
        for left in st.exclusions.values_mut() {
            *left = left.saturating_sub(1);
        }
        Ok(s)
    }

    fn call(
        &self,
        method: &'static str,
        words: String,
    ) -> Result<MutexGuard<'_, State>, AdminError> {
        let mut st = self.st();
        let now = st.now();
        st.calls.push((now, words));
        st.take_failure(method)?;
        Ok(st)
    }
}

/// `stored_bytes` of a data role of a process that is not excluded.
pub const STORED_BYTES: i64 = 64 << 20;

/// `stored_bytes` of an excluded process's data role per status read it has left to drain.
pub const DRAIN_BYTES_PER_READ: i64 = 1 << 20;

fn role(name: &str) -> ProcessRoleInfo {
    ProcessRoleInfo {
        role: name.to_owned(),
        ..ProcessRoleInfo::default()
    }
}

fn exclusion_strings(addresses: &[ProcessAddress]) -> Vec<String> {
    // `exclude`/`include` take addresses without ports, as the real client sends them.
    addresses.iter().map(|a| a.host.clone()).collect()
}

#[async_trait]
impl AdminClient for FakeDatabase {
    async fn get_status(&self) -> Result<FdbStatus, AdminError> {
        self.status()
    }

    async fn configure_database(
        &self,
        configuration: &DatabaseConfiguration,
        new: bool,
    ) -> Result<(), AdminError> {
        let text = configuration
            .configuration_string()
            .map_err(|e| AdminError::InvalidInput(e.to_string()))?;
        let words = if new {
            format!("configure new {text}")
        } else {
            format!("configure {text}")
        };
        let mut st = self.call("configure_database", words.clone())?;
        if st.connection_string.is_empty() {
            return Err(AdminError::Timeout("no cluster file".into()));
        }
        if new && st.configuration.is_some() {
            return Err(AdminError::Command {
                binary: "fdbcli".into(),
                code: Some(1),
                output: "ERROR: Database already exists! To change configuration, don't say `new'"
                    .into(),
            });
        }
        if !new && st.configuration.is_none() {
            return Err(AdminError::Command {
                binary: "fdbcli".into(),
                code: Some(1),
                output: "ERROR: Database not yet configured".into(),
            });
        }
        let mut live = configuration.clone();
        live.excluded_servers.clear();
        st.configuration = Some(live);
        st.recovered();
        Ok(())
    }

    async fn exclude(&self, addresses: &[ProcessAddress], no_wait: bool) -> Result<(), AdminError> {
        let targets = exclusion_strings(addresses);
        let words = format!(
            "exclude {}{}",
            if no_wait { "no_wait " } else { "" },
            targets.join(" ")
        );
        let mut st = self.call("exclude", words)?;
        let drain = st.drain_reads;
        for t in &targets {
            st.exclusions.entry(t.clone()).or_insert(drain);
        }
        // Excluded again: whatever data moved back since the last include drains again.
        let targeted: Vec<String> = st
            .processes
            .values()
            .filter(|p| targeted_by(p, &targets))
            .map(|p| p.key().to_owned())
            .collect();
        for key in &targeted {
            st.drained.remove(key);
        }
        let excluded: Vec<String> = st
            .processes
            .values()
            .filter(|p| st.excluded(p).is_some())
            .map(|p| p.key().to_owned())
            .collect();
        let groups: BTreeSet<&str> = targets
            .iter()
            .filter_map(|t| t.strip_prefix("locality_instance_id:"))
            .collect();
        // An excluded process (gone or not) hands its data over: it costs no replica.
        st.stateful.retain(|key, _| {
            !excluded.contains(key)
                && !groups
                    .iter()
                    .any(|g| key == g || key.strip_prefix(g).is_some_and(|n| n.starts_with('-')))
        });
        st.recovered();
        if !no_wait {
            let holding = st
                .processes
                .values()
                .filter(|p| {
                    st.excluded(p).is_some() && targeted_by(p, &targets) && st.holds_data(p)
                })
                .count();
            if holding > 0 {
                return Err(AdminError::Timeout(format!(
                    "{holding} excluded processes still hold data"
                )));
            }
        }
        Ok(())
    }

    async fn include(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError> {
        let targets = exclusion_strings(addresses);
        let mut st = self.call("include", format!("include {}", targets.join(" ")))?;
        // A process the exclusion had drained keeps holding nothing: data moves back to it
        // only over time (a later exclusion drains it again), and its pod may be gone already.
        let drained: Vec<String> = st
            .processes
            .values()
            .filter(|p| targeted_by(p, &targets) && st.excluded(p) == Some(&0))
            .map(|p| p.key().to_owned())
            .collect();
        st.drained.extend(drained);
        for t in &targets {
            st.exclusions.remove(t);
        }
        st.recovered();
        Ok(())
    }

    async fn get_exclusions(&self) -> Result<Vec<String>, AdminError> {
        let mut st = self.st();
        st.take_failure("get_exclusions")?;
        Ok(st.exclusions.keys().cloned().collect())
    }

    async fn kill(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError> {
        self.kill_with("kill", addresses)
    }

    async fn kill_for_upgrade(&self, addresses: &[ProcessAddress]) -> Result<(), AdminError> {
        self.kill_with("kill_for_upgrade", addresses)
    }

    async fn change_coordinators(
        &self,
        addresses: &[ProcessAddress],
    ) -> Result<String, AdminError> {
        let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        let mut st = self.call(
            "change_coordinators",
            format!("coordinators {}", list.join(" ")),
        )?;
        let mut cs =
            ConnectionString::parse(&st.connection_string).map_err(|e| AdminError::Command {
                binary: "fdbcli".into(),
                code: Some(1),
                output: e.to_string(),
            })?;
        cs.generation_id = ConnectionString::new_generation_id();
        cs.coordinators = list;
        st.connection_string = cs.to_string();
        st.recovered();
        Ok(st.connection_string.clone())
    }

    async fn version_supported(&self, _version: &str) -> Result<bool, AdminError> {
        Ok(true)
    }

    async fn protocol_version(&self, version: &str) -> Result<String, AdminError> {
        Ok(format!("fdb-protocol-{version}"))
    }

    async fn version_from_reachable_coordinators(&self) -> Option<String> {
        let st = self.st();
        st.processes.values().next().map(|p| p.version.clone())
    }

    async fn set_maintenance_zone(&self, zone: &str, seconds: i64) -> Result<(), AdminError> {
        let mut st = self.call(
            "set_maintenance_zone",
            format!("maintenance on {zone} {seconds}"),
        )?;
        st.maintenance_zone = zone.to_owned();
        st.maintenance_until = st.now() + seconds;
        Ok(())
    }

    async fn reset_maintenance_mode(&self) -> Result<(), AdminError> {
        let mut st = self.call("reset_maintenance_mode", "maintenance off".into())?;
        st.maintenance_zone.clear();
        Ok(())
    }

    async fn get_processes_under_maintenance(&self) -> Result<BTreeMap<String, i64>, AdminError> {
        let mut st = self.st();
        st.take_failure("get_processes_under_maintenance")?;
        Ok(st.maintenance.clone())
    }

    async fn set_processes_under_maintenance(
        &self,
        ids: &[String],
        timestamp: i64,
    ) -> Result<(), AdminError> {
        let mut st = self.st();
        st.take_failure("set_processes_under_maintenance")?;
        for id in ids {
            st.maintenance.insert(id.clone(), timestamp);
        }
        Ok(())
    }

    async fn remove_processes_under_maintenance(&self, ids: &[String]) -> Result<(), AdminError> {
        let mut st = self.st();
        st.take_failure("remove_processes_under_maintenance")?;
        for id in ids {
            st.maintenance.remove(id);
        }
        Ok(())
    }

    async fn start_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        self.fake_start_backup(backup)
    }

    async fn stop_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        self.fake_end_backup("stop_backup", "discontinue", backup)
    }

    async fn abort_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        self.fake_end_backup("abort_backup", "abort", backup)
    }

    async fn delete_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        self.fake_delete_backup(backup)
    }

    async fn pause_backups(&self) -> Result<(), AdminError> {
        self.fake_pause(true)
    }

    async fn resume_backups(&self) -> Result<(), AdminError> {
        self.fake_pause(false)
    }

    async fn modify_backup(&self, backup: &FoundationDBBackup) -> Result<(), AdminError> {
        self.fake_modify_backup(backup)
    }

    async fn get_backup_status(
        &self,
        backup: &FoundationDBBackup,
    ) -> Result<LiveBackupStatus, AdminError> {
        self.fake_backup_status(backup)
    }

    async fn start_restore(
        &self,
        url: &str,
        restore: &FoundationDBRestore,
    ) -> Result<(), AdminError> {
        self.fake_start_restore(url, restore)
    }

    async fn get_restore_status(&self) -> Result<String, AdminError> {
        self.fake_restore_status()
    }
}

impl FakeDatabase {
    fn kill_with(
        &self,
        method: &'static str,
        addresses: &[ProcessAddress],
    ) -> Result<(), AdminError> {
        let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        let mut st = self.call(method, format!("kill {}", list.join(" ")))?;
        let now = st.now();
        for a in &list {
            if let Some(p) = st.processes.get_mut(a) {
                p.started = now;
                if let Some((line, version)) = p.restart_with.clone() {
                    p.command_line = line;
                    p.version = version;
                }
            }
        }
        st.recovered();
        Ok(())
    }
}

/// One operator instance's view of the shared lock records.
#[derive(Clone)]
pub struct FakeLockClient {
    db: FakeDatabase,
    owner: String,
    duration_secs: i64,
}

#[async_trait]
impl LockClient for FakeLockClient {
    fn disabled(&self) -> bool {
        false
    }

    async fn take_lock(&self) -> Result<(), AdminError> {
        let mut st = self.db.st();
        st.take_failure("take_lock")?;
        let me_denied = st.deny_list.contains(&self.owner);
        let owner_denied = st
            .lock
            .as_ref()
            .is_some_and(|l| st.deny_list.contains(&l.owner));
        let decision = lock::take(
            st.lock.as_ref(),
            &self.owner,
            me_denied,
            owner_denied,
            st.now(),
            self.duration_secs,
        );
        let (entry, result) = match decision {
            TakeDecision::Write(record) => {
                st.lock = Some(record);
                ("taken".to_owned(), Ok(()))
            }
            TakeDecision::Denied => (
                "denied".to_owned(),
                Err(AdminError::LockDenied(self.owner.clone())),
            ),
            TakeDecision::Held(record) => (
                format!("held by {}", record.owner),
                Err(AdminError::LockHeld {
                    owner: record.owner,
                    expires: record.end,
                }),
            ),
        };
        let now = st.now();
        st.calls
            .push((now, format!("lock {}: {entry}", self.owner)));
        result
    }

    async fn release_lock(&self) -> Result<(), AdminError> {
        let mut st = self.db.st();
        st.take_failure("release_lock")?;
        if lock::release(st.lock.as_ref(), &self.owner, st.now()) {
            st.lock = None;
        }
        Ok(())
    }

    async fn add_pending_upgrades(&self, version: &str, ids: &[String]) -> Result<(), AdminError> {
        let mut st = self.db.st();
        st.take_failure("add_pending_upgrades")?;
        st.upgrades
            .entry(version.to_owned())
            .or_default()
            .extend(ids.iter().cloned());
        Ok(())
    }

    async fn get_pending_upgrades(&self, version: &str) -> Result<BTreeSet<String>, AdminError> {
        let mut st = self.db.st();
        st.take_failure("get_pending_upgrades")?;
        Ok(st.upgrades.get(version).cloned().unwrap_or_default())
    }

    async fn clear_pending_upgrades(&self) -> Result<(), AdminError> {
        let mut st = self.db.st();
        st.take_failure("clear_pending_upgrades")?;
        st.upgrades.clear();
        Ok(())
    }

    async fn get_deny_list(&self) -> Result<Vec<String>, AdminError> {
        let mut st = self.db.st();
        st.take_failure("get_deny_list")?;
        Ok(st.deny_list.iter().cloned().collect())
    }

    async fn update_deny_list(&self, entries: &[LockDenyListEntry]) -> Result<(), AdminError> {
        let mut st = self.db.st();
        st.take_failure("update_deny_list")?;
        for e in entries {
            if e.allow {
                st.deny_list.remove(&e.id);
            } else {
                st.deny_list.insert(e.id.clone());
            }
        }
        Ok(())
    }
}

#[path = "fake_pods.rs"]
mod pods;

#[path = "fake_backups.rs"]
pub mod backups;

#[cfg(test)]
#[path = "fake_tests.rs"]
mod tests;
