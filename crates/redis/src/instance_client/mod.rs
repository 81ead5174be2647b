//! The operator's side of the instance API ([`crate::instance_api`]): a port with the real
//! HTTPS client ([`https`]) and an in-memory fake for step tests ([`fake`]).
//!
//! Contract:
//! - Every call goes to one pod IP, never a Service; a call either gets the instance's answer
//!   ([`Answer::Done`], or [`Answer::Refused`] for a 409 with its reason) or fails with a
//!   [`CallError`] that says whether anything may have happened (a transport failure after the
//!   request was sent may have taken effect: the caller re-observes before deciding again).
//! - [`Instances`] is per cluster: it carries that cluster's CA, server name and token.

pub mod fake;
pub mod https;

use futures::future::BoxFuture;

use crate::instance_api::{
    CommandResult, DemoteRequest, InstanceReport, PromoteRequest, SwitchoverRequest,
};

/// What an instance answered to a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Done (or already done), with its message.
    Done(String),
    /// Refused (409): it is not in a state to do it; why.
    Refused(String),
}

impl Answer {
    /// The answer a [`CommandResult`] with HTTP status `code` means, if it is one.
    pub fn of(code: u16, r: CommandResult) -> Option<Answer> {
        match (code, r.done) {
            (200, true) => Some(Answer::Done(r.message)),
            (409, _) => Some(Answer::Refused(r.message)),
            _ => None,
        }
    }
}

/// A call that did not get an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No connection, TLS failure, timeout: the request may or may not have been acted on.
    #[error("calling {ip}: {message}")]
    Transport {
        /// The pod IP.
        ip: String,
        /// What failed.
        message: String,
    },
    /// An HTTP status other than the contract's answers.
    #[error("{ip} answered HTTP {code}: {body}")]
    Status {
        /// The pod IP.
        ip: String,
        /// The status code.
        code: u16,
        /// The body.
        body: String,
    },
}

/// One cluster's instances.
pub trait Instances: Send + Sync {
    /// `GET /v1/status`.
    fn status<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<InstanceReport, CallError>>;
    /// `POST /v1/promote`.
    fn promote<'a>(
        &'a self,
        ip: &'a str,
        req: &'a PromoteRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>>;
    /// `POST /v1/demote`.
    fn demote<'a>(
        &'a self,
        ip: &'a str,
        req: &'a DemoteRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>>;
    /// `POST /v1/switchover`, to the current primary.
    fn switchover<'a>(
        &'a self,
        ip: &'a str,
        req: &'a SwitchoverRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>>;
}

/// What a cluster's client needs: from the Secrets the operator created.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// The per-cluster CA certificate (PEM).
    pub ca_pem: String,
    /// The DNS name the instances' certificate carries ([`crate::instance_api::server_name`]).
    pub server_name: String,
    /// The bearer token.
    pub token: String,
}

/// Makes a cluster's [`Instances`] from its credentials (the real one caches connections).
pub trait Connector: Send + Sync {
    /// The client for `creds`.
    fn connect(&self, creds: &Credentials) -> Result<std::sync::Arc<dyn Instances>, String>;
}
