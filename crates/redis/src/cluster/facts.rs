//! What one pass observed about each data instance, reduced to plain facts the pure decisions
//! read ([`super::handoff`], [`super::plan`], [`super::status`]). No client here: the observe
//! and poll steps fill these in.
//!
//! Contract: a [`Member`] exists for every ordinal that is desired (`< instances`) or has a pod
//! or was named by the status; [`Members`] iterates them in ordinal order (numerically, never
//! by name: upstream's string sort churned ≥ 11-pod clusters).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::instance_api::{Boot, InstanceReport};
use crate::names;

/// The outcome of polling one instance manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Not polled: no pod, or a pod without an IP.
    NotPolled,
    /// It answered.
    Report(Box<InstanceReport>),
    /// It did not answer (the error).
    Failed(String),
}

/// One data pod as the API shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// `status.podIP`.
    pub ip: Option<String>,
    /// The `Ready` condition is True.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Phase `Failed` or `Succeeded`: nothing runs in it any more.
    pub terminal: bool,
    /// The `redis.io/spec-hash` annotation.
    pub hash: String,
    /// The `redis.io/role` label.
    pub role_label: String,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// Its node is cordoned (`spec.unschedulable`).
    pub node_cordoned: bool,
    /// Its PVC waits for a file-system resize that needs a restart.
    pub resize_pending: bool,
}

impl PodFacts {
    /// The facts of `pod`; `cordoned` says whether its node is unschedulable.
    pub fn of(pod: &Pod, cordoned: bool) -> PodFacts {
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
        PodFacts {
            ip: status
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty()),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            terminal: phase == "Failed" || phase == "Succeeded",
            hash: pod
                .annotations()
                .get(names::ANN_SPEC_HASH)
                .cloned()
                .unwrap_or_default(),
            role_label: pod
                .labels()
                .get(names::LABEL_ROLE)
                .cloned()
                .unwrap_or_default(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            node_cordoned: cordoned,
            resize_pending: false,
        }
    }
}

/// One data instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Pod name.
    pub name: String,
    /// Its ordinal.
    pub ordinal: i32,
    /// The pod, if it exists.
    pub pod: Option<PodFacts>,
    /// The poll of its instance manager.
    pub poll: Poll,
    /// The spec hash its pod should have (empty for an ordinal beyond `instances`).
    pub desired_hash: String,
}

impl Member {
    /// The report, when the instance answered.
    pub fn report(&self) -> Option<&InstanceReport> {
        match &self.poll {
            Poll::Report(r) => Some(r),
            _ => None,
        }
    }

    /// redis-server runs (the instance answered and says so).
    pub fn running(&self) -> bool {
        self.report().is_some_and(|r| r.boot == Boot::Running)
    }

    /// It answered as a running primary.
    pub fn is_master(&self) -> bool {
        self.running() && self.report().is_some_and(|r| r.role == "master")
    }

    /// It answered as a running replica.
    pub fn is_replica(&self) -> bool {
        self.running() && self.report().is_some_and(|r| r.role == "slave")
    }

    /// The pod's IP.
    pub fn ip(&self) -> Option<&str> {
        self.pod.as_ref().and_then(|p| p.ip.as_deref())
    }

    /// The pod exists and is not being deleted or finished.
    pub fn pod_live(&self) -> bool {
        self.pod
            .as_ref()
            .is_some_and(|p| !p.deleting && !p.terminal)
    }

    /// Nothing runs for this instance and nothing can start without the operator: no pod, or
    /// a pod that finished.
    pub fn pod_gone(&self) -> bool {
        self.pod.as_ref().is_none_or(|p| p.terminal)
    }

    /// The pod is Ready.
    pub fn ready(&self) -> bool {
        self.pod.as_ref().is_some_and(|p| p.ready)
    }

    /// The pod's spec hash is the desired one.
    pub fn up_to_date(&self) -> bool {
        self.pod
            .as_ref()
            .is_some_and(|p| p.hash == self.desired_hash && !p.resize_pending)
    }

    /// A replica following `primary_ip` with its link up and no full sync in progress.
    pub fn in_sync_with(&self, primary_ip: Option<&str>) -> bool {
        let Some(r) = self.report().filter(|_| self.is_replica()) else {
            return false;
        };
        r.master_link_status == "up"
            && !r.master_sync_in_progress
            && primary_ip.is_none_or(|ip| r.master_host == ip)
    }
}

/// Every instance of a cluster, by ordinal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members(pub BTreeMap<i32, Member>);

impl Members {
    /// The member called `name`.
    pub fn get(&self, name: &str) -> Option<&Member> {
        self.0.values().find(|m| m.name == name)
    }

    /// Mutable access to the member called `name`.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Member> {
        self.0.values_mut().find(|m| m.name == name)
    }

    /// In ordinal order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Member> {
        self.0.values()
    }

    /// The members that answered as running primaries.
    pub fn masters(&self) -> Vec<&Member> {
        self.iter().filter(|m| m.is_master()).collect()
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Short constructors for decision tables.

    use super::*;

    /// A running instance's report.
    pub fn report(role: &str, replid: &str, offset: i64) -> InstanceReport {
        InstanceReport {
            pod: String::new(),
            boot: Boot::Running,
            fenced: false,
            role: role.into(),
            replication_id: replid.into(),
            replication_id2: String::new(),
            replication_offset: offset,
            connected_replicas: 0,
            replicas: Vec::new(),
            master_host: if role == "slave" {
                "10.0.0.0".into()
            } else {
                String::new()
            },
            master_port: if role == "slave" { 6379 } else { 0 },
            master_link_status: if role == "slave" {
                "up".into()
            } else {
                String::new()
            },
            master_sync_in_progress: false,
            master_link_down_since_seconds: 0,
            min_replicas_to_write: 0,
            writes_refused: false,
            auth_generation: String::new(),
        }
    }

    /// A Ready pod at `10.0.0.<ordinal>` with hash `h`.
    pub fn pod(ordinal: i32) -> PodFacts {
        PodFacts {
            ip: Some(format!("10.0.0.{ordinal}")),
            ready: true,
            hash: "h".into(),
            role_label: "replica".into(),
            node: Some(format!("node-{ordinal}")),
            ..PodFacts::default()
        }
    }

    /// Member `demo-<ordinal>` with a Ready pod and `poll`.
    pub fn member(ordinal: i32, poll: Poll) -> Member {
        Member {
            name: format!("demo-{ordinal}"),
            ordinal,
            pod: Some(pod(ordinal)),
            poll,
            desired_hash: "h".into(),
        }
    }

    /// A running primary with replication ID `replid`.
    pub fn primary(ordinal: i32, replid: &str, offset: i64) -> Member {
        let mut m = member(
            ordinal,
            Poll::Report(Box::new(report("master", replid, offset))),
        );
        if let Some(p) = m.pod.as_mut() {
            p.role_label = "primary".into();
        }
        m
    }

    /// A running replica of `10.0.0.<of>` in sync at `offset`.
    pub fn replica(ordinal: i32, of: i32, replid: &str, offset: i64) -> Member {
        let mut r = report("slave", replid, offset);
        r.master_host = format!("10.0.0.{of}");
        member(ordinal, Poll::Report(Box::new(r)))
    }

    /// `members` keyed by ordinal.
    pub fn members(list: Vec<Member>) -> Members {
        Members(list.into_iter().map(|m| (m.ordinal, m)).collect())
    }

    /// Changes the report of `m` with `f`.
    pub fn with_report(mut m: Member, f: impl FnOnce(&mut InstanceReport)) -> Member {
        if let Poll::Report(r) = &mut m.poll {
            f(r);
        }
        m
    }

    /// Changes the pod of `m` with `f`.
    pub fn with_pod(mut m: Member, f: impl FnOnce(&mut PodFacts)) -> Member {
        if let Some(p) = m.pod.as_mut() {
            f(p);
        }
        m
    }
}
