//! An in-memory stand-in for a cluster's instance managers, for step tests: status reports by
//! IP, scripted command answers, and a record of every command sent.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::future::BoxFuture;

use super::{Answer, CallError, Instances};
use crate::instance_api::{DemoteRequest, InstanceReport, PromoteRequest, SwitchoverRequest};

/// A command the fake received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// A promotion of the instance at the IP.
    Promote(String, PromoteRequest),
    /// A demotion.
    Demote(String, DemoteRequest),
    /// A switchover sent to the primary at the IP.
    Switchover(String, SwitchoverRequest),
}

/// The fake (see the module docs).
#[derive(Default)]
pub struct FakeInstances {
    /// Reports by IP; an IP without one fails as unreachable.
    pub reports: Mutex<BTreeMap<String, InstanceReport>>,
    /// Answers to commands by IP (default: done).
    pub answers: Mutex<BTreeMap<String, Answer>>,
    /// Every command, in order.
    pub sent: Mutex<Vec<Sent>>,
}

impl FakeInstances {
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
}
