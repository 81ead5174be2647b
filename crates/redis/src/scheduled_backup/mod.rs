//! The RedisScheduledBackup controller: creates a RedisBackup on each tick of the schedule and
//! deletes old ones beyond the history limits.
//!
//! Contract of [`reconcile`], one pass as named steps:
//! `plan → check_cluster → create_backup → write_status → prune`.
//! - `plan` ([`decide::plan`]): pure, from the spec, the status and the clock. When the cached
//!   copy says a tick is due, the schedule is read again and planned from the stored copy, so a
//!   schedule suspended or ticked meanwhile never gets a backup from a stale view.
//! - `check_cluster`: a backup is created only for an existing RedisCluster; a missing one is
//!   a transient error (the tick fires once it exists).
//! - `create_backup`: `<name>-<unix seconds of the tick>` with labels `redis.io/cluster` and
//!   `redis.io/scheduled-backup`, the spec's target, method and destination, and no owner
//!   (deleting the schedule keeps its backups, as upstream). Created before the status is
//!   written; one that exists already (a repeated pass) counts as created. Event
//!   `ScheduledBackupTriggered`.
//! - `write_status`: only when it differs, conditional on the planned copy's
//!   `resourceVersion` (a stale copy never overwrites a newer status: the pass ends and looks
//!   again 0.5 s later). `InvalidSchedule` (Warning) when the schedule
//!   turns invalid.
//! - `prune` ([`decide::prune`]): every pass, from a fresh list of the schedule's backups, so a
//!   backup finishing beyond the limit is deleted right away. Event `BackupPruned`.
//!
//! [`run`] watches RedisScheduledBackups and the RedisBackups labelled with their name.

pub mod decide;

use std::sync::Arc;

use jiff::Timestamp;
use kit::controller::{ControllerSettings, RunContext, run_controller};
use kit::reconcile::{Outcome, ReconcileError};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, controller::Action, watcher};
use kube::{Resource, ResourceExt};

use crate::backup::Shared;
use crate::crd::{RedisBackup, RedisBackupSpec, RedisCluster, RedisScheduledBackup};
use crate::names;

/// A pass's context: what the backup controllers share.
pub struct Ctx {
    /// Shared with the backup controller.
    pub shared: Arc<Shared>,
}

/// A failed pass, by step.
#[derive(Debug, thiserror::Error)]
pub enum ScheduledError {
    /// The cluster does not exist (yet).
    #[error("RedisCluster {0} not found; no backup is created until it exists")]
    ClusterMissing(String),
    /// Reading the schedule before a tick failed.
    #[error("reading RedisScheduledBackup {name}: {source}")]
    ReadSchedule {
        /// The schedule.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading the cluster failed.
    #[error("reading RedisCluster {name}: {source}")]
    ReadCluster {
        /// The cluster.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Creating the backup failed.
    #[error("creating RedisBackup {name}: {source}")]
    CreateBackup {
        /// The backup.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the status failed.
    #[error("writing the status of RedisScheduledBackup {name}: {source}")]
    WriteStatus {
        /// The schedule.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the schedule's backups failed.
    #[error("listing the backups of RedisScheduledBackup {name}: {source}")]
    ListBackups {
        /// The schedule.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deleting an old backup failed.
    #[error("deleting RedisBackup {name}: {source}")]
    Prune {
        /// The backup.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for ScheduledError {
    fn category(&self) -> &'static str {
        match self {
            ScheduledError::ClusterMissing(_) => "cluster_missing",
            ScheduledError::ReadSchedule { .. } => "read_schedule",
            ScheduledError::ReadCluster { .. } => "read_cluster",
            ScheduledError::CreateBackup { .. } => "create_backup",
            ScheduledError::WriteStatus { .. } => "write_status",
            ScheduledError::ListBackups { .. } => "list_backups",
            ScheduledError::Prune { .. } => "prune",
        }
    }
}

/// One pass (see the module contract).
pub async fn reconcile(
    sb: Arc<RedisScheduledBackup>,
    ctx: Arc<Ctx>,
) -> Result<Action, ScheduledError> {
    let ns = sb.namespace().unwrap_or_default();
    let api = Api::<RedisScheduledBackup>::namespaced(ctx.shared.client.clone(), &ns);
    let now = Timestamp::now();
    let mut plan = decide::plan(&facts(&sb, now));
    let mut sb = sb;
    if plan.create.is_some() {
        // A tick is due by the cached copy: decide again from the stored one, so a schedule
        // suspended, changed or already ticked meanwhile never gets a backup from a stale view.
        let Some(fresh) =
            api.get_opt(&sb.name_any())
                .await
                .map_err(|source| ScheduledError::ReadSchedule {
                    name: sb.name_any(),
                    source,
                })?
        else {
            return Ok(Action::await_change());
        };
        sb = Arc::new(fresh);
        plan = decide::plan(&facts(&sb, now));
    }
    if let Some(backup) = &plan.create {
        check_cluster(&ctx, &ns, &sb.spec.cluster_name).await?;
        create_backup(&ctx, &sb, backup).await?;
    }
    if !write_status(&ctx, &api, &sb, &plan).await? {
        // The stored object moved on since this copy: look again from the newer one (a tick
        // just created is found again under the same name, so nothing is created twice).
        tracing::debug!(schedule = %sb.name_any(), "status not written: the copy is stale");
        return Ok(Action::requeue(STALE_RETRY));
    }
    prune(&ctx, &sb).await?;
    let outcome = plan.requeue.map_or(Outcome::Done, Outcome::RequeueAfter);
    Ok(ctx.shared.backoff.succeeded(&*sb, outcome))
}

/// How soon a pass that found its copy stale looks again.
const STALE_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

fn facts(sb: &RedisScheduledBackup, now: Timestamp) -> decide::Facts<'_> {
    let created = sb.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    decide::Facts {
        name: sb.metadata.name.as_deref().unwrap_or_default(),
        created,
        generation: sb.metadata.generation,
        spec: &sb.spec,
        status: sb.status.as_ref().unwrap_or(&EMPTY_STATUS),
        now,
    }
}

static EMPTY_STATUS: std::sync::LazyLock<crate::crd::RedisScheduledBackupStatus> =
    std::sync::LazyLock::new(Default::default);

async fn check_cluster(ctx: &Ctx, ns: &str, cluster: &str) -> Result<(), ScheduledError> {
    Api::<RedisCluster>::namespaced(ctx.shared.client.clone(), ns)
        .get_opt(cluster)
        .await
        .map_err(|source| ScheduledError::ReadCluster {
            name: cluster.to_owned(),
            source,
        })?
        .map(|_| ())
        .ok_or_else(|| ScheduledError::ClusterMissing(cluster.to_owned()))
}

/// The RedisBackup a tick of `sb` creates, named `name`.
pub fn backup_for(sb: &RedisScheduledBackup, name: &str) -> RedisBackup {
    let labels = [
        (
            names::LABEL_CLUSTER.to_owned(),
            sb.spec.cluster_name.clone(),
        ),
        (names::LABEL_SCHEDULED_BACKUP.to_owned(), sb.name_any()),
    ];
    RedisBackup {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: sb.namespace(),
            labels: Some(labels.into_iter().collect()),
            ..ObjectMeta::default()
        },
        spec: RedisBackupSpec {
            cluster_name: sb.spec.cluster_name.clone(),
            target: sb.spec.target,
            method: sb.spec.method,
            destination: sb.spec.destination.clone(),
            deletion_policy: sb.spec.backup_deletion_policy,
        },
        status: None,
    }
}

async fn create_backup(
    ctx: &Ctx,
    sb: &RedisScheduledBackup,
    name: &str,
) -> Result<(), ScheduledError> {
    let api = Api::<RedisBackup>::namespaced(
        ctx.shared.client.clone(),
        &sb.namespace().unwrap_or_default(),
    );
    let pp = PostParams {
        field_manager: Some(names::FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.create(&pp, &backup_for(sb, name)).await {
        Ok(_) => {}
        // A pass repeated before its status was written: the tick's backup exists.
        Err(e) if kit::errors::already_exists(&e) => return Ok(()),
        Err(source) => {
            return Err(ScheduledError::CreateBackup {
                name: name.to_owned(),
                source,
            });
        }
    }
    tracing::info!(schedule = %sb.name_any(), backup = %name, "scheduled backup created");
    let note = format!("Created backup {name} from schedule {}", sb.spec.schedule);
    event(ctx, sb, false, "ScheduledBackupTriggered", note).await;
    Ok(())
}

/// Writes the planned status, conditional on the copy's `resourceVersion`; `false` when the
/// stored object has moved on (409).
async fn write_status(
    ctx: &Ctx,
    api: &Api<RedisScheduledBackup>,
    sb: &RedisScheduledBackup,
    plan: &decide::Plan,
) -> Result<bool, ScheduledError> {
    let was_invalid = sb.status.as_ref().is_some_and(|s| {
        kit::conditions::get(&s.conditions, crate::crd::CONDITION_SCHEDULE_VALID)
            .is_some_and(|c| c.status == "False")
    });
    match kit::status::patch_status_if_changed_at(api, sb, &plan.status, names::FIELD_MANAGER).await
    {
        Ok(_) => {}
        Err(e) if kit::status::is_conflict(&e) => return Ok(false),
        Err(source) => {
            return Err(ScheduledError::WriteStatus {
                name: sb.name_any(),
                source,
            });
        }
    }
    if let (Some(why), false) = (&plan.invalid, was_invalid) {
        let note = format!("Cannot schedule backups: {why}");
        event(ctx, sb, true, "InvalidSchedule", note).await;
    }
    Ok(true)
}

async fn prune(ctx: &Ctx, sb: &RedisScheduledBackup) -> Result<(), ScheduledError> {
    let ns = sb.namespace().unwrap_or_default();
    let api = Api::<RedisBackup>::namespaced(ctx.shared.client.clone(), &ns);
    let selector = format!("{}={}", names::LABEL_SCHEDULED_BACKUP, sb.name_any());
    let listed = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| ScheduledError::ListBackups {
            name: sb.name_any(),
            source,
        })?;
    let children: Vec<&RedisBackup> = listed
        .items
        .iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .collect();
    for name in decide::prune(&children, &sb.spec) {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(source) => return Err(ScheduledError::Prune { name, source }),
        }
        tracing::info!(schedule = %sb.name_any(), backup = %name, "old backup deleted");
        let note = format!("Deleted RedisBackup {name}: beyond the history limit");
        event(ctx, sb, false, "BackupPruned", note).await;
    }
    Ok(())
}

async fn event(ctx: &Ctx, sb: &RedisScheduledBackup, warning: bool, reason: &str, note: String) {
    let reference = sb.object_ref(&());
    kit::events::publish(
        &ctx.shared.recorder,
        &reference,
        warning,
        reason,
        note,
        None,
    )
    .await;
}

/// What to do after a failed pass: per-object back-off.
pub fn error_policy(sb: Arc<RedisScheduledBackup>, err: &ScheduledError, ctx: Arc<Ctx>) -> Action {
    ctx.shared.backoff.failed(&*sb, err)
}

/// Runs the RedisScheduledBackup controller until `rc.shutdown`; `namespace` limits every
/// watch.
pub async fn run(
    shared: Arc<Shared>,
    rc: RunContext,
    namespace: Option<String>,
) -> anyhow::Result<()> {
    let client = shared.client.clone();
    let ns = namespace.as_deref();
    let wc = watcher::Config::default();
    let schedules = kit::events::scoped::<RedisScheduledBackup>(&client, ns);
    let backups = kit::events::scoped::<RedisBackup>(&client, ns);
    let controller =
        Controller::new(schedules, wc.clone()).watches(backups, wc, |b: RedisBackup| {
            let schedule = b.labels().get(names::LABEL_SCHEDULED_BACKUP)?.clone();
            Some(ObjectRef::new(&schedule).within(&b.namespace()?))
        });
    let ctx = Arc::new(Ctx { shared });
    let settings = ControllerSettings::new(names::controller::SCHEDULED_BACKUP);
    run_controller(controller, &settings, &rc, reconcile, error_policy, ctx).await;
    Ok(())
}
