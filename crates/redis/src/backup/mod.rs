//! The RedisBackup controller: each backup is taken by an instance manager in the
//! background (`POST /v1/backup`) and followed on later passes (`GET /v1/backup/<id>`);
//! no pass waits for it.
//!
//! Contract of [`reconcile`], one pass as named steps:
//! `observe → decide → (fail | wait | start | follow) → sync_cluster`.
//! - `observe` ([`observe`]): the cluster; while the backup is not over, its data pods, the
//!   instance API client and, to choose a target, every instance's status.
//! - `decide` ([`decide::decide`]): pure; the target is chosen by [`target::select`].
//! - `start`: the status goes `Running` with `targetPod` and `startedAt` **before** the
//!   request, so a pass that stops in between follows the backup on the next one (a 404
//!   there starts it again, the request being idempotent by name).
//! - `follow`: one `GET /v1/backup/<name>` per pass, [`decide::follow`] says what it means;
//!   the next pass is a requeue ([`decide::poll_interval`]).
//! - `sync_cluster`: the cluster's `lastSuccessfulBackup`, `lastFailedBackup` and
//!   `LastBackupSucceeded` ([`summary::cluster_status`], written by [`apply::cluster_status`])
//!   and the metrics ([`metrics`]), from every backup of the cluster in the cache. The
//!   write carries the cluster's `resourceVersion`; a 409 (the cluster controller wrote
//!   meanwhile) is computed again on a fresh read, up to [`CLUSTER_WRITE_ATTEMPTS`] times,
//!   then the pass ends as a stale view.
//!
//! Every status write is conditional on the pass's `resourceVersion` ([`status::write`]): a
//! backup changed since it was read (another writer, or the cache behind this controller's
//! own last write) ends the pass with nothing written, and the next one follows after
//! [`REREAD`] (no Warning, no back-off), so no transition is decided on an older view.
//!
//! Before these steps, [`cleanup`]: a backup with `deletionPolicy: Delete` carries the
//! finalizer `redis.io/artifact-cleanup`, and a deleted one has its artifact deleted from the
//! object store (through a data pod) before it goes; a deleted backup is never started or
//! followed.
//!
//! Events: `BackupPending` (when the reason changes), `BackupStarted`, `BackupRestarted`,
//! `BackupCompleted`, `BackupFailed` (Warning); `ArtifactDeleted`, `ArtifactDeletionPending`,
//! `ArtifactKept` (Warning).
//!
//! [`run`] watches RedisBackups, and RedisClusters mapped to their newest finished backup
//! (so a cluster status that lost the backup fields is repaired).

pub mod apply;
pub mod cleanup;
pub mod decide;
pub mod metrics;
pub mod observe;
pub mod status;
pub mod summary;
pub mod target;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::events::{Recorder, Reporter};
use kit::reconcile::{Backoff, Outcome, ReconcileError};
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller::Action, watcher};
use kube::{Client, ResourceExt};

use crate::crd::{BackupDestination, BackupMethod, BackupPhase, RedisBackup, RedisCluster};
use crate::instance_api::BackupRequest;
use crate::instance_client::{Connector, Started};
use crate::names;
use decide::{Next, Poll, Step};
use observe::Observed;

/// Default of `--backup-timeout`: how long a backup may wait for an instance, and then run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// What both backup controllers share.
pub struct Shared {
    /// The operator's client.
    pub client: Client,
    /// Publishes Events as `redis-operator`.
    pub recorder: Recorder,
    /// Per-object back-off of failed passes.
    pub backoff: Backoff,
    /// The backup metrics.
    pub metrics: metrics::BackupMetrics,
    /// How long a backup may wait for an instance, and then run.
    pub timeout: Duration,
    /// Makes the instance API clients.
    pub connector: Arc<dyn Connector>,
    /// How long a deleted backup's artifact may take to be deleted (`deletionPolicy:
    /// Delete`) before it is kept with a Warning and the object released.
    pub artifact_timeout: Duration,
    // The last pending reason announced per backup (uid), so BackupPending is published
    // when it changes, not every pass.
    pending: Mutex<HashMap<String, String>>,
    // Why the last attempt to delete a backup's artifact failed, per backup.
    last_errors: Mutex<HashMap<String, String>>,
}

impl Shared {
    /// Shared state for the controllers.
    pub fn new(
        client: Client,
        metrics: &kit::metrics::Metrics,
        timeout: Duration,
        connector: Arc<dyn Connector>,
    ) -> Self {
        let reporter = Reporter {
            controller: names::FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            backoff: Backoff::default(),
            metrics: metrics::BackupMetrics::register(metrics),
            timeout,
            connector,
            artifact_timeout: cleanup::DEFAULT_TIMEOUT,
            pending: Mutex::default(),
            last_errors: Mutex::default(),
        }
    }

    fn last_error(&self, uid: &str) -> Option<String> {
        let m = self.last_errors.lock().unwrap_or_else(|p| p.into_inner());
        m.get(uid).cloned()
    }

    fn set_last_error(&self, uid: &str, why: &str) {
        let mut m = self.last_errors.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(uid.to_owned(), why.to_owned());
    }

    fn forget_last_error(&self, uid: &str) {
        let mut m = self.last_errors.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(uid);
    }

    fn announce_pending(&self, uid: &str, why: &str) -> bool {
        let mut m = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(uid.to_owned(), why.to_owned()).as_deref() != Some(why)
    }

    fn forget_pending(&self, uid: &str) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }
}

/// A backup pass's context: the shared state and the cache of RedisBackups.
pub struct Ctx {
    /// Shared state.
    pub shared: Arc<Shared>,
    /// Every RedisBackup (the controller's own cache).
    pub backups: Store<RedisBackup>,
}

/// A failed pass, by step.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Reading failed.
    #[error(transparent)]
    Observe(#[from] observe::ObserveError),
    /// Writing the backup's status failed.
    #[error(transparent)]
    Status(#[from] status::StatusError),
    /// Writing the cluster's backup status failed.
    #[error(transparent)]
    ClusterStatus(#[from] apply::ClusterStatusError),
    /// Adding or removing the artifact-cleanup finalizer failed.
    #[error("updating the finalizers of RedisBackup {name}: {source}")]
    Finalizer {
        /// The backup.
        name: String,
        /// The API error (409 when the backup changed meanwhile).
        #[source]
        source: kube::Error,
    },
    /// Listing the namespace's RedisClusters (is one still restoring from the backup?)
    /// failed.
    #[error("listing the RedisClusters of namespace {namespace}: {source}")]
    ListClusters {
        /// The namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for BackupError {
    fn category(&self) -> &'static str {
        match self {
            BackupError::Observe(e) => e.category(),
            BackupError::Status(status::StatusError::Stale { .. }) => STALE_VIEW,
            BackupError::Status(status::StatusError::Api { .. }) => "write_status",
            BackupError::ClusterStatus(e) if kit::status::is_conflict(&e.source) => STALE_VIEW,
            BackupError::ClusterStatus(_) => "write_cluster_status",
            BackupError::Finalizer { source, .. } if kit::status::is_conflict(source) => STALE_VIEW,
            BackupError::Finalizer { .. } => "finalizer",
            BackupError::ListClusters { .. } => "list_clusters",
        }
    }
}

fn phase(b: &RedisBackup) -> Option<BackupPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

fn created(b: &RedisBackup) -> Timestamp {
    b.metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0)
}

fn started(b: &RedisBackup) -> Timestamp {
    b.status
        .as_ref()
        .and_then(|s| s.started_at.as_ref())
        .map_or_else(|| created(b), |t| t.0)
}

/// One pass (see the module contract).
pub async fn reconcile(b: Arc<RedisBackup>, ctx: Arc<Ctx>) -> Result<Action, BackupError> {
    if b.metadata.deletion_timestamp.is_some() {
        return match cleanup::reconcile(&ctx, &b).await {
            Err(e) if e.category() == STALE_VIEW => Ok(Action::requeue(REREAD)),
            other => other,
        };
    }
    let b = match cleanup::ensure_finalizer(&ctx, &b).await {
        Ok(Some(stored)) => Arc::new(stored),
        Ok(None) => return Ok(Action::requeue(REREAD)),
        Err(e) if e.category() == STALE_VIEW => return Ok(Action::requeue(REREAD)),
        Err(e) => return Err(e),
    };
    let now = Timestamp::now();
    let active = !matches!(
        phase(&b),
        Some(BackupPhase::Completed | BackupPhase::Failed)
    );
    let obs = observe::observe(&ctx, &b, active).await?;
    let choosing = active
        && (phase(&b) != Some(BackupPhase::Running)
            || b.status.as_ref().is_none_or(|s| s.target_pod.is_empty()));
    let candidates = if choosing {
        observe::candidates(&obs).await
    } else {
        Vec::new()
    };
    let step = decide::decide(&decide::Facts {
        now,
        created: created(&b),
        phase: phase(&b),
        started: b
            .status
            .as_ref()
            .and_then(|s| s.started_at.as_ref().map(|t| t.0)),
        target_pod: b.status.as_ref().map_or("", |s| s.target_pod.as_str()),
        destination: BackupDestination::validate(b.spec.destination.as_ref()),
        cluster: match &obs.cluster {
            None => decide::Cluster::Missing,
            Some(c) => decide::Cluster::Present(observe::check_cluster(c)),
        },
        choice: target::select(b.spec.target, &obs.primary(), &candidates),
        credentials: obs.credentials.clone(),
        timeout: ctx.shared.timeout,
    });
    let (outcome, b) = match run_step(&ctx, &b, &obs, step, now).await {
        Err(e) if e.category() == STALE_VIEW => {
            tracing::info!(error = %e, "stale view of the backup; reading it again");
            return Ok(Action::requeue(REREAD));
        }
        other => other?,
    };
    match sync_cluster(&ctx, &b, &obs, now).await {
        Err(e) if e.category() == STALE_VIEW => {
            tracing::info!(error = %e, "the cluster kept changing under the backup status write; reading it again");
            return Ok(Action::requeue(REREAD));
        }
        other => other?,
    }
    Ok(ctx.shared.backoff.succeeded(&b, outcome))
}

/// The category of a pass whose status write found the backup changed since it was read:
/// not a failure (no Warning, no back-off); the next pass follows after [`REREAD`].
pub const STALE_VIEW: &str = "stale_view";

/// How soon a pass that ended on a stale view is followed by the next.
pub const REREAD: Duration = Duration::from_millis(500);

async fn run_step(
    ctx: &Ctx,
    b: &RedisBackup,
    obs: &Observed,
    step: Step,
    now: Timestamp,
) -> Result<(Outcome, RedisBackup), BackupError> {
    let s = b.status.clone().unwrap_or_default();
    match step {
        Step::Finished => Ok((Outcome::Done, b.clone())),
        Step::Fail(msg) => fail(ctx, b, &msg, now).await,
        Step::Wait(why) => {
            let b = write(ctx, b, status::pending(&s)).await?;
            if ctx
                .shared
                .announce_pending(&b.uid().unwrap_or_default(), &why)
            {
                let note = format!("the backup waits: {why}");
                apply::event(&ctx.shared.recorder, &b, false, "BackupPending", note).await;
            }
            Ok((Outcome::RequeueAfter(decide::WAIT_INTERVAL), b))
        }
        Step::Start(c) => {
            let b = write(ctx, b, status::running(&s, &c.pod, now)).await?;
            ctx.shared.forget_pending(&b.uid().unwrap_or_default());
            let role = if c.replica { "replica" } else { "primary" };
            let note = format!("taking the backup on {} ({role})", c.pod);
            apply::event(&ctx.shared.recorder, &b, false, "BackupStarted", note).await;
            send(ctx, &b, obs, &c.ip, now).await
        }
        Step::Follow { .. } => follow(ctx, b, obs, now).await,
    }
}

async fn write(
    ctx: &Ctx,
    b: &RedisBackup,
    desired: crate::crd::RedisBackupStatus,
) -> Result<RedisBackup, BackupError> {
    let api = Api::<RedisBackup>::namespaced(
        ctx.shared.client.clone(),
        &b.namespace().unwrap_or_default(),
    );
    // The stored object after a write carries its new resourceVersion: a second write in the
    // same pass (started, then answered at once) is conditional on it, not on the read one.
    if let Some(stored) = status::write(&api, b, &desired).await? {
        tracing::info!(backup = %b.name_any(), phase = ?desired.phase, target = %desired.target_pod, error = %desired.error, "backup status");
        return Ok(stored);
    }
    let mut b = b.clone();
    b.status = Some(desired);
    Ok(b)
}

async fn fail(
    ctx: &Ctx,
    b: &RedisBackup,
    msg: &str,
    now: Timestamp,
) -> Result<(Outcome, RedisBackup), BackupError> {
    let s = b.status.clone().unwrap_or_default();
    let b = write(ctx, b, status::failed(&s, msg, now)).await?;
    ctx.shared.forget_pending(&b.uid().unwrap_or_default());
    apply::event(
        &ctx.shared.recorder,
        &b,
        true,
        "BackupFailed",
        msg.to_owned(),
    )
    .await;
    Ok((Outcome::Done, b))
}

fn request(b: &RedisBackup) -> BackupRequest {
    BackupRequest {
        backup_name: b.name_any(),
        method: match b.spec.method {
            BackupMethod::Rdb => "rdb",
            BackupMethod::Aof => "aof",
        }
        .into(),
        destination: b.spec.destination.clone().unwrap_or_default(),
    }
}

// `POST /v1/backup` to the target; its answer is handled like a poll's.
async fn send(
    ctx: &Ctx,
    b: &RedisBackup,
    obs: &Observed,
    ip: &str,
    now: Timestamp,
) -> Result<(Outcome, RedisBackup), BackupError> {
    let instances = match &obs.instances {
        Ok(i) => i.clone(),
        Err(e) => return Ok((again(e), b.clone())),
    };
    match instances.start_backup(ip, &request(b)).await {
        Ok(Started::Accepted(r)) if r.phase != "Running" => {
            let next = decide::follow(Poll::Answer(r), now, started(b), ctx.shared.timeout, false);
            act(ctx, b, obs, next, now).await
        }
        Ok(Started::Accepted(_)) => Ok((Outcome::RequeueAfter(Duration::from_secs(1)), b.clone())),
        Ok(Started::Refused(reason)) => {
            fail(ctx, b, &format!("the instance refused: {reason}"), now).await
        }
        Err(e) => Ok((again(&e.to_string()), b.clone())),
    }
}

fn again(why: &str) -> Outcome {
    tracing::info!(reason = %why, "the instance did not answer; asking again");
    Outcome::RequeueAfter(Duration::from_secs(1))
}

async fn follow(
    ctx: &Ctx,
    b: &RedisBackup,
    obs: &Observed,
    now: Timestamp,
) -> Result<(Outcome, RedisBackup), BackupError> {
    let pod_name = b
        .status
        .as_ref()
        .map(|s| s.target_pod.clone())
        .unwrap_or_default();
    let poll = match (obs.pod(&pod_name), &obs.instances) {
        (None, _) => Poll::PodGone,
        (Some(_), Err(e)) => Poll::NoAnswer(e.clone()),
        (Some(p), Ok(i)) => match observe::ip_of(p) {
            None => Poll::NoAnswer(format!("{pod_name} has no IP")),
            Some(ip) => match i.backup(&ip, &b.name_any()).await {
                Ok(Some(r)) => Poll::Answer(r),
                Ok(None) => Poll::Unknown,
                Err(e) => Poll::NoAnswer(e.to_string()),
            },
        },
    };
    let restartable = poll == Poll::Unknown && {
        let candidates = observe::candidates(obs).await;
        target::qualifies(b.spec.target, &obs.primary(), &candidates, &pod_name)
    };
    let next = decide::follow(poll, now, started(b), ctx.shared.timeout, restartable);
    act(ctx, b, obs, next, now).await
}

async fn act(
    ctx: &Ctx,
    b: &RedisBackup,
    obs: &Observed,
    next: Next,
    now: Timestamp,
) -> Result<(Outcome, RedisBackup), BackupError> {
    let s = b.status.clone().unwrap_or_default();
    match next {
        Next::Again(d) => Ok((Outcome::RequeueAfter(d), b.clone())),
        Next::Fail(msg) => fail(ctx, b, &msg, now).await,
        Next::Complete(r) => {
            let b = write(ctx, b, status::completed(&s, &r, now)).await?;
            let note = format!("stored at {} ({} bytes)", r.backup_path, r.backup_size);
            apply::event(&ctx.shared.recorder, &b, false, "BackupCompleted", note).await;
            Ok((Outcome::Done, b))
        }
        Next::Reselect(why) => {
            let pending = crate::crd::RedisBackupStatus {
                target_pod: String::new(),
                ..status::pending(&s)
            };
            let b = write(ctx, b, pending).await?;
            let note = format!("{}: {why}; choosing an instance again", s.target_pod);
            apply::event(&ctx.shared.recorder, &b, true, "BackupPending", note).await;
            Ok((Outcome::RequeueAfter(Duration::from_secs(1)), b))
        }
        Next::Restart => {
            let pod = obs.pod(&s.target_pod).and_then(observe::ip_of);
            let note = format!(
                "{} no longer knows the backup (it restarted): starting it again there",
                s.target_pod
            );
            apply::event(&ctx.shared.recorder, b, true, "BackupRestarted", note).await;
            match pod {
                Some(ip) => Box::pin(send(ctx, b, obs, &ip, now)).await,
                None => Ok((again("no IP"), b.clone())),
            }
        }
    }
}

// The cluster's backup status and the metrics, from every backup of the cluster.
async fn sync_cluster(
    ctx: &Ctx,
    b: &RedisBackup,
    obs: &Observed,
    now: Timestamp,
) -> Result<(), BackupError> {
    let ns = b.namespace().unwrap_or_default();
    let cluster = &b.spec.cluster_name;
    let cached = ctx.backups.state();
    let mut backups: Vec<&RedisBackup> = cached
        .iter()
        .map(|a| a.as_ref())
        .filter(|a| a.namespace().as_deref() == Some(&ns) && &a.spec.cluster_name == cluster)
        .filter(|a| a.uid() != b.uid())
        .collect();
    backups.push(b);
    let mut read = obs.cluster.clone();
    for attempt in 1..=CLUSTER_WRITE_ATTEMPTS {
        let live = read
            .as_ref()
            .and_then(|c| c.status.clone())
            .unwrap_or_default();
        let floor = live.last_successful_backup.as_ref().map(|t| t.0);
        ctx.shared.metrics.refresh(&ns, cluster, &backups, floor);
        let Some(c) = &read else {
            return Ok(());
        };
        let Some(d) = summary::cluster_status(&live, &backups, c.metadata.generation, now) else {
            return Ok(());
        };
        match apply::cluster_status(&ctx.shared.client, c, &d).await {
            Ok(()) => return Ok(()),
            // The cluster controller wrote meanwhile: compute again on a fresh read.
            Err(e) if kit::status::is_conflict(&e.source) && attempt < CLUSTER_WRITE_ATTEMPTS => {
                tracing::debug!(cluster = %cluster, attempt, "the cluster changed under the backup status write; reading it again");
                read = Api::<RedisCluster>::namespaced(ctx.shared.client.clone(), &ns)
                    .get_opt(cluster)
                    .await
                    .map_err(|source| observe::ObserveError::Cluster {
                        name: cluster.clone(),
                        source,
                    })?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// How many times a pass computes and writes the cluster's backup status when the cluster
/// keeps changing under the write (each a fresh read); after that the pass ends as a stale
/// view and the next follows after [`REREAD`].
pub const CLUSTER_WRITE_ATTEMPTS: u32 = 3;

/// What to do after a failed pass: per-object back-off.
pub fn error_policy(b: Arc<RedisBackup>, err: &BackupError, ctx: Arc<Ctx>) -> Action {
    ctx.shared.backoff.failed(&*b, err)
}

// The newest finished backup of a cluster: the one whose pass re-checks the cluster's
// backup status when the cluster changes.
fn newest_finished(store: &Store<RedisBackup>, c: &RedisCluster) -> Option<ObjectRef<RedisBackup>> {
    let ns = c.namespace();
    let cached = store.state();
    let mine: Vec<&RedisBackup> = cached
        .iter()
        .map(|b| b.as_ref())
        .filter(|b| b.namespace() == ns && b.spec.cluster_name == c.name_any())
        .collect();
    [BackupPhase::Completed, BackupPhase::Failed]
        .into_iter()
        .filter_map(|p| summary::newest(&mine, p))
        .max_by_key(|b| summary::finished_at(b))
        .map(ObjectRef::from_obj)
}

/// Runs the RedisBackup controller until `rc.shutdown`; `namespace` limits every watch.
pub async fn run(
    shared: Arc<Shared>,
    rc: RunContext,
    namespace: Option<String>,
    concurrency: usize,
) -> anyhow::Result<()> {
    let client = shared.client.clone();
    let ns = namespace.as_deref();
    let wc = watcher::Config::default();
    let controller = Controller::new(kit::events::scoped::<RedisBackup>(&client, ns), wc.clone());
    let store = controller.store();
    let mapper = store.clone();
    let clusters = kit::events::scoped::<RedisCluster>(&client, ns);
    let controller = controller.watches(clusters, wc, move |c| newest_finished(&mapper, &c));
    let ctx = Arc::new(Ctx {
        shared,
        backups: store,
    });
    let settings = ControllerSettings {
        max_concurrent_reconciles: concurrency,
        ..ControllerSettings::new(names::controller::BACKUP)
    };
    run_controller(controller, &settings, &rc, reconcile, error_policy, ctx).await;
    Ok(())
}
