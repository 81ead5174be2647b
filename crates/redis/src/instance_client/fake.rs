//! An in-memory stand-in for a cluster's instance managers, for step tests: status reports by
//! IP, scripted command answers and backups, and a record of every command sent.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::future::BoxFuture;

use super::{Answer, CallError, Instances, Started};
use crate::instance_api::{
    BackupRequest, BackupResult, DemoteRequest, InstanceReport, PromoteRequest, SwitchoverRequest,
};

/// A command the fake received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// A promotion of the instance at the IP.
    Promote(String, PromoteRequest),
    /// A demotion.
    Demote(String, DemoteRequest),
    /// A switchover sent to the primary at the IP.
    Switchover(String, SwitchoverRequest),
    /// A backup started on the instance at the IP.
    Backup(String, BackupRequest),
    /// A backup's artifact deleted through the instance at the IP.
    DeleteBackup(String, BackupRequest),
}

/// The fake (see the module docs).
#[derive(Default)]
pub struct FakeInstances {
    /// Reports by IP; an IP without one fails as unreachable.
    pub reports: Mutex<BTreeMap<String, InstanceReport>>,
    /// Answers to commands by IP (default: done).
    pub answers: Mutex<BTreeMap<String, Answer>>,
    /// Backups the instances know, by id: `POST /v1/backup` for a backup name without one
    /// is refused, `GET /v1/backup/<id>` without one is `None`.
    pub backups: Mutex<BTreeMap<String, BackupResult>>,
    /// Every command, in order.
    pub sent: Mutex<Vec<Sent>>,
}

impl FakeInstances {
    fn known(&self, id: &str) -> Option<BackupResult> {
        self.backups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn answer(&self, ip: &str, sent: Sent) -> Result<Answer, CallError> {
        self.sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sent);
        if !self
            .reports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(ip)
        {
            return Err(CallError::Transport {
                ip: ip.to_owned(),
                message: "unreachable".into(),
            });
        }
        Ok(self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ip)
            .cloned()
            .unwrap_or_else(|| Answer::Done("done".into())))
    }
}

impl Instances for FakeInstances {
    fn status<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<InstanceReport, CallError>> {
        let r = self
            .reports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ip)
            .cloned();
        Box::pin(async move {
            r.ok_or_else(|| CallError::Transport {
                ip: ip.to_owned(),
                message: "unreachable".into(),
            })
        })
    }

    fn promote<'a>(
        &'a self,
        ip: &'a str,
        req: &'a PromoteRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let r = self.answer(ip, Sent::Promote(ip.to_owned(), req.clone()));
        Box::pin(async move { r })
    }

    fn demote<'a>(
        &'a self,
        ip: &'a str,
        req: &'a DemoteRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let r = self.answer(ip, Sent::Demote(ip.to_owned(), req.clone()));
        Box::pin(async move { r })
    }

    fn switchover<'a>(
        &'a self,
        ip: &'a str,
        req: &'a SwitchoverRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let r = self.answer(ip, Sent::Switchover(ip.to_owned(), req.clone()));
        Box::pin(async move { r })
    }

    fn start_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Started, CallError>> {
        let r = self
            .answer(ip, Sent::Backup(ip.to_owned(), req.clone()))
            .map(|_| match self.known(&req.backup_name) {
                Some(b) => Started::Accepted(b),
                None => Started::Refused(format!("no backup {} scripted", req.backup_name)),
            });
        Box::pin(async move { r })
    }

    fn backup<'a>(
        &'a self,
        ip: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<BackupResult>, CallError>> {
        let reachable = self
            .reports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(ip);
        let r = if reachable {
            Ok(self.known(id))
        } else {
            Err(CallError::Transport {
                ip: ip.to_owned(),
                message: "unreachable".into(),
            })
        };
        Box::pin(async move { r })
    }

    fn delete_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>> {
        let r = self.answer(ip, Sent::DeleteBackup(ip.to_owned(), req.clone()));
        Box::pin(async move { r })
    }
}
