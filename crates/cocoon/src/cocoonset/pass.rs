//! One reconcile pass of a CocoonSet: what it observed and every write it makes.
//!
//! Contract: [`Pass`] is the only writer of the CocoonSet controller. Pod writes are idempotent
//! (deterministic names: AlreadyExists and NotFound are reported, not failed), annotation
//! patches are JSON merge patches that touch only the keys named (a `null` deletes a key, so
//! "unsuspend" really removes `vm.cocoonstack.io/hibernate`), and status goes through
//! `kit::status::write_status_if_changed`, so a pass with nothing to do writes nothing (compared
//! with this process's last write while the cached copy lags it: [`kit::written`]); a
//! transition's progress report may wait ([`super::progress`]).
//! Registry calls are wrapped so every error names the VM and tag.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Error, progress};
use crate::cache::Hibernations;
use crate::context::Context;
use crate::crd::{CocoonHibernation, CocoonSet, CocoonSetPhase, CocoonSetStatus, HibernationPhase};
use crate::names;
use crate::pods::classify::Classified;
use crate::pods::state;

/// Result of creating a pod.
#[derive(Debug, PartialEq, Eq)]
pub enum Created {
    /// Created now.
    Yes,
    /// A pod of that name exists (maybe still terminating).
    AlreadyExists,
}

/// One pass over one CocoonSet.
pub struct Pass<'a> {
    /// The operator context.
    pub ctx: &'a Context,
    /// The set, as this pass saw it.
    pub set: Arc<CocoonSet>,
    /// Its pods, classified.
    pub pods: Classified,
    pods_api: Api<Pod>,
    sets_api: Api<CocoonSet>,
    namespace: String,
    crs: Hibernations,
    /// Pods that still need this set's generation stamp: it rides along with the next
    /// annotation patch of the pod, or goes alone at the end of the pass ([`Pass::flush_stamps`]).
    stamps: std::sync::Mutex<BTreeMap<String, String>>,
    deferred: std::sync::Mutex<Option<Duration>>,
}

impl<'a> Pass<'a> {
    /// A pass over `set` that observed `pods`, reading CocoonHibernations from `crs`.
    pub fn new(ctx: &'a Context, set: Arc<CocoonSet>, pods: Classified, crs: Hibernations) -> Self {
        let namespace = set.namespace().unwrap_or_default();
        Self {
            pods_api: Api::namespaced(ctx.client.clone(), &namespace),
            sets_api: Api::namespaced(ctx.client.clone(), &namespace),
            ctx,
            set,
            pods,
            namespace,
            crs,
            stamps: Default::default(),
            deferred: Default::default(),
        }
    }

    /// When a progress report this pass held back is due ([`super::progress`]).
    pub fn deferred(&self) -> Option<Duration> {
        *self.deferred.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The set's uid.
    pub fn uid(&self) -> &str {
        self.set.metadata.uid.as_deref().unwrap_or_default()
    }

    /// The set's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The set's name.
    pub fn name(&self) -> String {
        self.set.name_any()
    }

    /// The set's generation (0 when unknown).
    pub fn generation(&self) -> i64 {
        self.set.meta().generation.unwrap_or(0)
    }

    /// The set's current status phase.
    pub fn phase(&self) -> Option<CocoonSetPhase> {
        self.set.status.as_ref().and_then(|s| s.phase)
    }

    /// An operator-private annotation of the set.
    pub fn set_annotation(&self, key: &str) -> Option<&str> {
        self.set
            .annotations()
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The VM name of the main agent.
    pub fn main_vm(&self) -> String {
        names::agent_vm_name(&self.namespace, &self.name(), 0)
    }

    /// Creates `pod`.
    pub async fn create_pod(&self, pod: &Pod) -> Result<Created, Error> {
        match self.pods_api.create(&PostParams::default(), pod).await {
            Ok(created) => {
                self.ctx.expectations.created(self.uid(), &created);
                Ok(Created::Yes)
            }
            Err(e) if kit::errors::already_exists(&e) => Ok(Created::AlreadyExists),
            Err(source) => Err(Error::CreatePod {
                pod: pod.name_any(),
                source,
            }),
        }
    }

    /// Deletes pod `name`; a pod already gone counts as deleted.
    pub async fn delete_pod(&self, name: &str) -> Result<(), Error> {
        self.stamps().remove(name);
        match self.pods_api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(Error::DeletePod {
                pod: name.to_owned(),
                source,
            }),
        }
    }

    /// Queues this set's generation stamp for pod `name` (see [`Pass::flush_stamps`]).
    pub fn stamp_later(&self, name: &str, generation: String) {
        self.stamps().insert(name.to_owned(), generation);
    }

    fn stamps(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.stamps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes the stamps no other patch carried, one patch per pod, all at once.
    pub async fn flush_stamps(&self) -> Result<(), Error> {
        let pending: Vec<String> = self.stamps().keys().cloned().collect();
        futures::future::try_join_all(pending.iter().map(|name| self.annotate_pod(name, &[])))
            .await?;
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) annotations of pod `name` with one merge patch, the
    /// pod's queued generation stamp included.
    pub async fn annotate_pod(
        &self,
        name: &str,
        changes: &[(&str, Option<&str>)],
    ) -> Result<(), Error> {
        let stamp = self.stamps().remove(name);
        let mut changes = changes.to_vec();
        if let Some(generation) = stamp.as_deref() {
            changes.push((names::ANN_GENERATION, Some(generation)));
        }
        let patch = annotation_patch(&changes);
        let params = PatchParams::default();
        match self
            .pods_api
            .patch(name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(Error::PatchPod {
                pod: name.to_owned(),
                source,
            }),
        }
    }

    /// Sets or removes operator-private annotations on the set itself.
    /// Returns the set as the patch left it.
    pub async fn annotate_set(&self, changes: &[(&str, Option<&str>)]) -> Result<CocoonSet, Error> {
        let patch = annotation_patch(changes);
        let params = PatchParams::default();
        self.sets_api
            .patch(&self.name(), &params, &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::PatchSet { source })
    }

    /// Reads pod `name` from the API, bypassing the cache (`None` when gone or terminating).
    pub async fn live_pod(&self, name: &str) -> Result<Option<Pod>, Error> {
        let pod = self
            .pods_api
            .get_opt(name)
            .await
            .map_err(|source| Error::ReadPod {
                pod: name.to_owned(),
                source,
            })?;
        Ok(pod.filter(|p| p.metadata.deletion_timestamp.is_none()))
    }

    /// Lists the set's pods from the API (a deleted set whose cache may still miss a pod it
    /// created, see [`crate::cache::Expectations`]).
    pub async fn list_pods(&self) -> Result<Vec<Pod>, Error> {
        let lp = ListParams::default().labels(&format!("{}={}", names::LABEL_SET, self.name()));
        self.pods_api
            .list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|source| Error::ListPods { source })
    }

    /// The CocoonHibernations naming pod `pod` of this namespace, from the watch cache.
    fn hibernations_of(&self, pod: &str) -> Vec<Arc<CocoonHibernation>> {
        self.crs.get(&(self.namespace.clone(), pod.to_owned()))
    }

    /// Whether a CocoonHibernation in `Hibernated` or `Waking` names `pod` (restore intent).
    pub fn restore_intent(&self, pod: &str) -> bool {
        self.hibernations_of(pod).iter().any(|cr| {
            matches!(
                cr.status.as_ref().and_then(|s| s.phase),
                Some(HibernationPhase::Hibernated | HibernationPhase::Waking)
            )
        })
    }

    /// Whether a CocoonHibernation wants `pod` hibernated (desire Hibernate, or still
    /// Hibernating): unsuspend and migration must leave its flag alone.
    pub fn held_by_cr(&self, pod: &str) -> bool {
        self.hibernations_of(pod).iter().any(|cr| {
            cr.spec.desire == crate::crd::Desire::Hibernate
                || cr.status.as_ref().and_then(|s| s.phase) == Some(HibernationPhase::Hibernating)
        })
    }

    /// Whether `<vm>:<tag>` is in the registry.
    pub async fn has_tag(&self, vm: &str, tag: &str) -> Result<bool, Error> {
        self.ctx
            .registry
            .has_manifest(vm, tag)
            .await
            .map_err(|source| Error::Registry {
                op: "probe",
                reference: format!("{vm}:{tag}"),
                source,
            })
    }

    /// Deletes the main's `<vm>:hibernate` once a fresh read of the main (not the cache, which
    /// may be behind the registry: the snapshot of a hibernation this pass has not seen yet)
    /// shows a live pod that no longer needs it ([`state::needs_snapshot`]). `false`: kept,
    /// because the main is gone, terminating or still needs it; the caller looks again later.
    pub async fn drop_main_snapshot(&self) -> Result<bool, Error> {
        let name = format!("{}-0", self.name());
        let main = self
            .pods_api
            .get_opt(&name)
            .await
            .map_err(|source| Error::ReadPod {
                pod: name.clone(),
                source,
            })?;
        let done_with = main
            .as_ref()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .is_some_and(|p| !state::needs_snapshot(p));
        if !done_with {
            tracing::info!(
                pod = name,
                "keeping the snapshot tag: the main pod (read fresh) still needs it or is gone"
            );
            return Ok(false);
        }
        self.drop_tag(&self.main_vm(), names::TAG_HIBERNATE).await?;
        Ok(true)
    }

    /// Deletes `<vm>:<tag>` from the registry (absent is fine).
    pub async fn drop_tag(&self, vm: &str, tag: &str) -> Result<(), Error> {
        if tag == names::TAG_HIBERNATE {
            self.ctx.hibernate_tags.forget(vm);
        }
        self.ctx
            .registry
            .delete_manifest(vm, tag)
            .await
            .map_err(|source| Error::Registry {
                op: "delete",
                reference: format!("{vm}:{tag}"),
                source,
            })
    }

    /// Writes the status computed from the observed pods; `phase` overrides the auto phase.
    pub async fn write_status(&self, phase: Option<CocoonSetPhase>) -> Result<(), Error> {
        self.write_status_noted(phase, None).await
    }

    /// Like [`Pass::write_status`], with the Ready condition False for `(reason, message)`:
    /// why the set cannot become ready (a failed main, an invalid spec).
    pub async fn write_status_noted(
        &self,
        phase: Option<CocoonSetPhase>,
        note: Option<(&str, String)>,
    ) -> Result<(), Error> {
        let now = Timestamp::now();
        // What is stored: this process's last write while the cached copy lags it.
        let rv = self.set.resource_version().unwrap_or_default();
        let stored = match self.ctx.written.lagging(self.uid(), &rv) {
            Some(written) => Arc::new(CocoonSet {
                status: Some(written),
                ..(*self.set).clone()
            }),
            None => self.set.clone(),
        };
        let mut status = crate::pods::status::compute(&stored, &self.pods, phase, now);
        let arrived = status.phase.unwrap_or(CocoonSetPhase::Pending);
        let generation = self.generation();
        let transitional = progress::transitional(arrived);
        if note.is_none() && arrived == CocoonSetPhase::Running && vms_unreported(&status) {
            let waited = self.ctx.progress.awaiting_details(self.uid(), generation);
            if let Some(wait) = progress::await_details(arrived, true, waited) {
                self.defer(wait);
                return Ok(());
            }
        }
        if !transitional {
            self.ctx.progress.settled(self.uid());
        } else if note.is_none() {
            let clock = self.ctx.progress.clock(self.uid(), generation);
            let live_status = stored.status.as_ref();
            let live = progress::Live {
                observed: live_status.and_then(|s| s.observed_generation),
                phase: live_status.and_then(|s| s.phase),
            };
            if let Some(wait) = progress::defer(arrived, false, live, generation, clock) {
                self.defer(wait);
                return Ok(());
            }
        }
        if let Some((reason, message)) = note {
            let ready = kit::conditions::Desired::new("Ready", false, reason, message)
                .observed(self.set.meta().generation);
            kit::conditions::upsert(&mut status.conditions, ready, now);
        }
        let produced = kit::status::write_status_if_changed(
            &self.sets_api,
            &stored,
            &status,
            names::FIELD_MANAGER,
        )
        .await
        .map_err(|source| Error::Status { source })?;
        if let Some(produced) = produced {
            let produced = produced.resource_version().unwrap_or_default();
            self.ctx
                .written
                .record(self.uid(), &rv, &produced, status.clone());
            if transitional {
                self.ctx.progress.reported(self.uid(), generation);
            }
        }
        Ok(())
    }

    /// Asks to look again within `wait` (a held-back status write).
    fn defer(&self, wait: Duration) {
        let mut deferred = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
        *deferred = Some(deferred.map_or(wait, |d| d.min(wait)));
    }

    /// The set as stored now (`None`: deleted), for a decision the cached copy may be too old
    /// for.
    pub async fn stored(&self) -> Result<Option<CocoonSet>, Error> {
        self.sets_api
            .get_opt(&self.set.name_any())
            .await
            .map_err(|source| Error::ReadSet { source })
    }

    /// Publishes an Event on the set; failures are logged, never fatal.
    pub async fn event(&self, warning: bool, reason: &str, note: String) {
        let reference = self.set.object_ref(&());
        kit::events::publish(&self.ctx.recorder, &reference, warning, reason, note, None).await;
    }
}

/// Whether some VM whose pod runs has no id or IP reported yet.
fn vms_unreported(status: &CocoonSetStatus) -> bool {
    let unreported =
        |phase: &str, id: &str, ip: &str| phase == "Running" && (id.is_empty() || ip.is_empty());
    status
        .agents
        .iter()
        .any(|a| unreported(&a.phase, &a.vm_id, &a.ip))
        || status
            .toolboxes
            .iter()
            .any(|t| unreported(&t.phase, &t.vm_id, &t.ip))
}

/// A merge patch of `metadata.annotations`: `Some` sets a key, `None` deletes it.
pub fn annotation_patch(changes: &[(&str, Option<&str>)]) -> Value {
    let annotations: BTreeMap<&str, Value> = changes
        .iter()
        .map(|(k, v)| (*k, v.map_or(Value::Null, |v| Value::String(v.to_owned()))))
        .collect();
    json!({ "metadata": { "annotations": annotations } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_an_annotation_sends_null() {
        let p = annotation_patch(&[
            (names::ANN_HIBERNATE, None),
            (names::ANN_RESTORE, Some("true")),
        ]);
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {
                "vm.cocoonstack.io/hibernate": null,
                "vm.cocoonstack.io/restore-from-hibernate": "true"
            }}})
        );
    }
}
