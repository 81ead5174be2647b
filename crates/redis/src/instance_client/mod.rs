//! The operator's side of the instance API ([`crate::instance_api`]), for every controller
//! (the cluster controller's polls and commands, the backup controller's backups): a port
//! with the real HTTPS client ([`https`]) and an in-memory fake for step tests ([`fake`]).
//!
//! Contract:
//! - Every call goes to one pod IP, never a Service; a call either gets the instance's answer
//!   ([`Answer::Done`], or [`Answer::Refused`] for a 409 with its reason; [`Started`] for a
//!   backup) or fails with a [`CallError`] that says whether anything may have happened (a
//!   transport failure after the request was sent may have taken effect: the caller
//!   re-observes before deciding again).
//! - `GET /v1/backup/<id>` answering 404 is `Ok(None)`: the instance does not know the
//!   backup (never started there, or the instance restarted and forgot it).
//! - [`Instances`] is per cluster: it carries that cluster's CA, server name and token
//!   ([`Credentials`], read from the cluster's Secrets by [`Credentials::read`]).

pub mod credentials;
pub mod fake;
pub mod https;

pub use credentials::{Credentials, CredentialsError};

use futures::future::BoxFuture;

use crate::instance_api::{
    BackupRequest, BackupResult, CommandResult, DemoteRequest, InstanceReport, PromoteRequest,
    SwitchoverRequest,
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
        /// The body (at most [`BODY_SHOWN`] characters).
        body: String,
    },
}

/// The most characters of an unexpected answer's body a [`CallError::Status`] keeps.
pub const BODY_SHOWN: usize = 500;

impl CallError {
    /// An answer the contract does not define for the call: HTTP `code` with `body`.
    pub fn status(ip: &str, code: u16, body: &str) -> Self {
        CallError::Status {
            ip: ip.to_owned(),
            code,
            body: body.chars().take(BODY_SHOWN).collect(),
        }
    }
}

/// The answer to `POST /v1/backup`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    /// Accepted (202), or the same backup answered again (200 once it ended).
    Accepted(BackupResult),
    /// Refused: 400 (a bad request: the destination or name) or 409 (the instance is not
    /// running redis-server), with the instance's reason.
    Refused(String),
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
    /// `POST /v1/backup`.
    fn start_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Started, CallError>>;
    /// `GET /v1/backup/<id>`; `None` when the instance does not know it (404).
    fn backup<'a>(
        &'a self,
        ip: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<BackupResult>, CallError>>;
    /// `DELETE /v1/backup/<id>` with the backup's request: deletes its stored artifact
    /// ([`Answer::Done`] once it is gone; [`Answer::Refused`] with the reason).
    fn delete_backup<'a>(
        &'a self,
        ip: &'a str,
        req: &'a BackupRequest,
    ) -> BoxFuture<'a, Result<Answer, CallError>>;
}

/// Makes a cluster's [`Instances`] from its credentials (the real one caches connections).
pub trait Connector: Send + Sync {
    /// The client for `creds`.
    fn connect(&self, creds: &Credentials) -> Result<std::sync::Arc<dyn Instances>, String>;
}
