//! Watches the API server refuses: a missing RBAC permission made visible.
//!
//! Contract:
//! - [`Denial::of`] recognises a watcher error that is a 403 Forbidden (the initial list, the
//!   watch start, or an error event during the watch) and says what was refused: the verb
//!   (`list` or `watch`), the resource and API group, and the namespace (or the cluster
//!   scope). Any other error is not a denial.
//! - [`WatchAccess`] is what `controller::run_controller` feeds every watch error of a
//!   controller into. A denial logs an ERROR naming the controller, verb, resource and scope,
//!   and blocks the operator's readiness under a key per controller, resource and scope
//!   (`/readyz` answers 503 and lists it). While blocked, the permission is re-checked every
//!   [`RECHECK`] with a SelfSubjectAccessReview (every authenticated identity may create
//!   one) for both `list` and `watch`; once both are allowed the blocker is cleared and an
//!   INFO line says so. The watch itself recovers by its own retry; if it is refused again,
//!   the next denial blocks again.
//! - Errors that are not denials are logged at WARN: the watch retries with back-off.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{
    Client,
    api::{Api, PostParams},
    core::Status,
    runtime::watcher,
};
use tokio_util::sync::CancellationToken;

use crate::health::Readiness;

/// How often a blocked watch's permission is re-checked.
pub const RECHECK: Duration = Duration::from_secs(2);

/// A list or watch the API server refused (403 Forbidden).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// `list` or `watch`.
    pub verb: String,
    /// The resource (plural), e.g. `services`.
    pub resource: String,
    /// The API group, empty for the core group.
    pub group: String,
    /// The namespace, or `None` for the cluster scope.
    pub namespace: Option<String>,
    /// The API server's message.
    pub message: String,
}

impl Denial {
    /// The denial `err` reports, if it is a 403 Forbidden.
    pub fn of(err: &watcher::Error) -> Option<Denial> {
        let (status, verb) = match err {
            watcher::Error::InitialListFailed(kube::Error::Api(s)) => (s.as_ref(), "list"),
            watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s)) => (s.as_ref(), "watch"),
            watcher::Error::WatchError(s) => (s.as_ref(), "watch"),
            _ => return None,
        };
        Self::from_status(status, verb)
    }

    /// The denial a Forbidden `status` describes; `verb` when the message names none.
    pub fn from_status(status: &Status, verb: &str) -> Option<Denial> {
        if status.code != 403 {
            return None;
        }
        let msg = status.message.as_str();
        let details = status.details.as_ref();
        let resource = details
            .map(|d| d.kind.clone())
            .filter(|k| !k.is_empty())
            .or_else(|| quoted_after(msg, "resource "))
            .unwrap_or_default();
        let group = details
            .map(|d| d.group.clone())
            .filter(|g| !g.is_empty())
            .or_else(|| quoted_after(msg, "in API group "))
            .unwrap_or_default();
        let verb = word_after(msg, "cannot ").unwrap_or_else(|| verb.to_owned());
        Some(Denial {
            verb,
            resource,
            group,
            namespace: quoted_after(msg, "in the namespace "),
            message: msg.to_owned(),
        })
    }

    /// `services`, or `jobs.batch` for a named group.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// `namespace "x"`, or `the cluster scope`.
    pub fn scope(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("namespace {ns:?}"),
            None => "the cluster scope".to_owned(),
        }
    }

    /// One line for people: what was refused, where, for whom.
    pub fn describe(&self, controller: &str) -> String {
        format!(
            "controller {controller}: {} of {} in {} is forbidden",
            self.verb,
            self.qualified_resource(),
            self.scope()
        )
    }

    /// The readiness key: one per controller, resource and scope (not verb: the watch
    /// needs both, and is healthy again only once both are allowed).
    pub fn key(&self, controller: &str) -> String {
        format!(
            "watch/{controller}/{}/{}",
            self.qualified_resource(),
            self.namespace.as_deref().unwrap_or("")
        )
    }

    fn review(&self, verb: &str) -> SelfSubjectAccessReview {
        SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: self.namespace.clone(),
                    group: Some(self.group.clone()),
                    resource: Some(self.resource.clone()),
                    verb: Some(verb.to_owned()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        }
    }
}

// The `"…"`-quoted text right after `marker` in `msg`.
fn quoted_after(msg: &str, marker: &str) -> Option<String> {
    let rest = &msg[msg.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

// The word right after `marker` in `msg`.
fn word_after(msg: &str, marker: &str) -> Option<String> {
    let rest = &msg[msg.find(marker)? + marker.len()..];
    let word: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
    (!word.is_empty()).then_some(word)
}

/// Whether the client's identity may now `list` and `watch` what `denial` was refused.
pub async fn allowed(client: &Client, denial: &Denial) -> Result<bool, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["list", "watch"] {
        let answer = api
            .create(&PostParams::default(), &denial.review(verb))
            .await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One controller's view of its watches' permissions (see the module docs).
#[derive(Clone)]
pub struct WatchAccess {
    controller: String,
    client: Client,
    readiness: Readiness,
    shutdown: CancellationToken,
    checking: Arc<Mutex<BTreeSet<String>>>,
}

impl WatchAccess {
    /// Tracks the watches of `controller`; re-checks stop at `shutdown`.
    pub fn new(
        controller: impl Into<String>,
        client: Client,
        readiness: Readiness,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            controller: controller.into(),
            client,
            readiness,
            shutdown,
            checking: Arc::default(),
        }
    }

    /// Handles one watch error of the controller.
    pub fn failed(&self, err: &watcher::Error) {
        let Some(denial) = Denial::of(err) else {
            tracing::warn!(controller = %self.controller, error = %err, "watch failed; retrying with back-off");
            return;
        };
        tracing::error!(
            controller = %self.controller,
            verb = %denial.verb,
            resource = %denial.qualified_resource(),
            namespace = %denial.namespace.as_deref().unwrap_or(""),
            scope = %denial.scope(),
            message = %denial.message,
            "watch forbidden: grant {} on {} in {}; the operator is not ready until then",
            denial.verb,
            denial.qualified_resource(),
            denial.scope(),
        );
        let key = denial.key(&self.controller);
        self.readiness
            .block(key.clone(), denial.describe(&self.controller));
        let fresh = self
            .checking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
        if fresh {
            tokio::spawn(self.clone().recheck(key, denial));
        }
    }

    // Clears the blocker once list and watch are allowed again (or at shutdown).
    async fn recheck(self, key: String, denial: Denial) {
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                () = tokio::time::sleep(RECHECK) => {}
            }
            match allowed(&self.client, &denial).await {
                Ok(true) => {
                    tracing::info!(
                        controller = %self.controller,
                        resource = %denial.qualified_resource(),
                        scope = %denial.scope(),
                        "watch permission granted again; ready once no other watch is refused",
                    );
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(controller = %self.controller, error = %e, "access review failed")
                }
            }
        }
        // Forget the check before clearing the blocker: a denial arriving in between then
        // starts a new check instead of leaving a blocker nobody clears.
        self.checking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
        self.readiness.unblock(&key);
    }
}

#[cfg(test)]
mod tests {
    use kube::core::response::StatusDetails;

    use super::*;

    fn forbidden(message: &str, details: Option<(&str, &str)>) -> Box<Status> {
        Box::new(Status {
            code: 403,
            message: message.to_owned(),
            reason: "Forbidden".into(),
            details: details.map(|(group, kind)| {
                serde_json::from_value::<StatusDetails>(
                    serde_json::json!({"group": group, "kind": kind}),
                )
                .expect("details")
            }),
            ..Status::default()
        })
    }

    #[test]
    fn namespaced_list_denial_names_verb_resource_and_namespace() {
        let msg = r#"services is forbidden: User "system:serviceaccount:ns:op" cannot list resource "services" in API group "" in the namespace "games""#;
        let err = watcher::Error::InitialListFailed(kube::Error::Api(forbidden(
            msg,
            Some(("", "services")),
        )));
        let d = Denial::of(&err).expect("denial");
        assert_eq!(
            (d.verb.as_str(), d.resource.as_str(), d.group.as_str()),
            ("list", "services", "")
        );
        assert_eq!(d.namespace.as_deref(), Some("games"));
        assert_eq!(
            d.describe("redroidinstance"),
            r#"controller redroidinstance: list of services in namespace "games" is forbidden"#
        );
        assert_eq!(
            d.key("redroidinstance"),
            "watch/redroidinstance/services/games"
        );
    }

    #[test]
    fn cluster_scope_watch_denial_without_details_is_parsed_from_the_message() {
        let msg = r#"jobs.batch is forbidden: User "u" cannot watch resource "jobs" in API group "batch" at the cluster scope"#;
        let err = watcher::Error::WatchStartFailed(kube::Error::Api(forbidden(msg, None)));
        let d = Denial::of(&err).expect("denial");
        assert_eq!(
            (d.verb.as_str(), d.qualified_resource().as_str()),
            ("watch", "jobs.batch")
        );
        assert_eq!(d.namespace, None);
        assert_eq!(d.scope(), "the cluster scope");
        let event = watcher::Error::WatchError(forbidden("forbidden", Some(("batch", "jobs"))));
        assert_eq!(Denial::of(&event).map(|d| d.verb), Some("watch".into()));
    }

    #[test]
    fn other_errors_are_not_denials() {
        let mut gone = forbidden("too old", None);
        gone.code = 410;
        assert_eq!(Denial::of(&watcher::Error::WatchError(gone)), None);
        assert_eq!(Denial::of(&watcher::Error::NoResourceVersion), None);
    }
}
