//! CheckClientCompatibility (reference §4 step 4, §6): before a protocol-incompatible upgrade,
//! every connected client must be able to speak the new version.
//!
//! Contract ([`check`] is the pure decision):
//! - Nothing when the cluster is neither configured nor being upgraded, or with
//!   `ignoreUpgradabilityChecks`.
//! - A change from the running version to `spec.version` that is neither protocol compatible
//!   nor an upgrade (a downgrade across minor versions) stops the pass (60 s) with a Warning
//!   Event `UnsupportedVersionChange`; the operator does nothing else until the spec changes.
//! - Protocol compatible (same major.minor and release candidate) ⇒ nothing to check.
//! - Otherwise every `cluster.clients.supported_versions` entry whose client version is
//!   neither protocol compatible with nor newer than the target contributes its
//!   `max_protocol_clients` (entries with protocol `Unknown` are skipped), except clients in a
//!   log group of `automationOptions.ignoreLogGroupsForUpgrade` (default
//!   `fdb-kubernetes-operator`) and clients at the IP of an fdbserver process. Any left ⇒
//!   Warning Event `UnsupportedClient` naming them and stop (60 s).
//! - No status (database unreachable) during an incompatible upgrade ⇒ delayed requeue
//!   (15 s): nothing is known about the clients.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;
use kit::pipeline::{Flow, Step, StepResult};

use super::{Pass, step_error};
use crate::admin::FdbStatus;
use crate::crd::{FdbVersion, FoundationDBCluster};

step_error!(
    CheckClientCompatibilityError,
    "checking client compatibility"
);

/// The step.
pub struct CheckClientCompatibility;

/// The verdict.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Go on.
    Compatible,
    /// The version change itself is not allowed.
    UnsupportedVersionChange(String),
    /// These clients (`address (log group)`) cannot speak the target version.
    UnsupportedClients(Vec<String>),
}

/// See the module docs; `db` is the cached status.
pub fn check(cluster: &FoundationDBCluster, db: &FdbStatus) -> Verdict {
    let (running, desired) = (cluster.running_version(), cluster.spec.version.clone());
    let (Ok(from), Ok(to)) = (FdbVersion::parse(&running), FdbVersion::parse(&desired)) else {
        return Verdict::Compatible;
    };
    if !from.supports_version_change(&to) {
        return Verdict::UnsupportedVersionChange(format!(
            "the version cannot change from {running} to {desired}: downgrades are only allowed within the same major.minor"
        ));
    }
    if from.is_protocol_compatible(&to) {
        return Verdict::Compatible;
    }
    let ignored = cluster.ignore_log_groups_for_upgrade();
    let servers: BTreeSet<String> = db
        .cluster
        .processes
        .values()
        .filter_map(|p| p.parsed_address().map(|a| a.host))
        .collect();
    let mut clients = BTreeSet::new();
    for v in &db.cluster.clients.supported_versions {
        if v.protocol_version == "Unknown" {
            continue;
        }
        let fine = FdbVersion::parse(&v.client_version)
            .is_ok_and(|c| c.is_protocol_compatible(&to) || c.is_at_least(&to));
        if fine {
            continue;
        }
        for c in &v.max_protocol_clients {
            let ip = c
                .address
                .rsplit_once(':')
                .map_or(c.address.as_str(), |(ip, _)| ip);
            let ip = ip.trim_start_matches('[').trim_end_matches(']');
            if ignored.contains(&c.log_group) || servers.contains(ip) {
                continue;
            }
            clients.insert(c.description());
        }
    }
    if clients.is_empty() {
        Verdict::Compatible
    } else {
        Verdict::UnsupportedClients(clients.into_iter().collect())
    }
}

impl CheckClientCompatibility {
    async fn run_step(&self, pass: &mut Pass) -> Result<Flow, CheckClientCompatibilityError> {
        let configured = pass.status().configured;
        let c = &pass.cluster;
        if c.spec.ignore_upgradability_checks || (!configured && !c.is_being_upgraded()) {
            return Ok(Flow::Continue);
        }
        let db = match &pass.db {
            Some(db) => db.clone(),
            None if pass.cluster.is_being_upgraded_with_incompatible_version() => {
                return Ok(Flow::delay(Duration::from_secs(15)));
            }
            None => FdbStatus::default(),
        };
        match check(&pass.cluster, &db) {
            Verdict::Compatible => Ok(Flow::Continue),
            Verdict::UnsupportedVersionChange(why) => {
                tracing::warn!(cluster = %pass.name(), %why, "version change refused");
                pass.event(true, "UnsupportedVersionChange", why).await;
                Ok(Flow::stop(Duration::from_secs(60)))
            }
            Verdict::UnsupportedClients(clients) => {
                let note = format!(
                    "upgrade to {} blocked: clients that cannot speak it are connected: {}",
                    pass.cluster.spec.version,
                    clients.join(", ")
                );
                tracing::warn!(cluster = %pass.name(), %note, "upgrade blocked by clients");
                pass.event(true, "UnsupportedClient", note).await;
                Ok(Flow::stop(Duration::from_secs(60)))
            }
        }
    }
}

impl Step<Pass> for CheckClientCompatibility {
    fn name(&self) -> &'static str {
        "check_client_compatibility"
    }

    fn run<'a>(&'a self, pass: &'a mut Pass) -> BoxFuture<'a, StepResult> {
        Box::pin(async move { Ok(self.run_step(pass).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::status::{ConnectedClient, ProcessInfo, SupportedVersion};
    use crate::crd::{FoundationDBClusterSpec, FoundationDBClusterStatus};

    fn cluster(running: &str, desired: &str) -> FoundationDBCluster {
        let mut c = FoundationDBCluster::new(
            "c",
            FoundationDBClusterSpec {
                version: desired.into(),
                ..Default::default()
            },
        );
        c.status = Some(FoundationDBClusterStatus {
            running_version: running.into(),
            configured: true,
            ..Default::default()
        });
        c
    }

    fn client(address: &str, group: &str) -> ConnectedClient {
        ConnectedClient {
            address: address.into(),
            log_group: group.into(),
        }
    }

    fn status(versions: &[(&str, &str, Vec<ConnectedClient>)]) -> FdbStatus {
        let mut s = FdbStatus::default();
        s.cluster.processes.insert(
            "p".into(),
            ProcessInfo {
                address: "127.1.0.5:4501".into(),
                ..Default::default()
            },
        );
        s.cluster.clients.supported_versions = versions
            .iter()
            .map(|(v, proto, clients)| SupportedVersion {
                client_version: (*v).into(),
                protocol_version: (*proto).into(),
                max_protocol_clients: clients.clone(),
                ..Default::default()
            })
            .collect();
        s
    }

    #[test]
    fn verdict_table() {
        let old_app = || vec![client("127.3.0.1:51234", "app")];
        #[rustfmt::skip]
        let cases: Vec<(&str, FoundationDBCluster, FdbStatus, Verdict)> = vec![
            ("no change", cluster("7.1.57", "7.1.57"), status(&[("7.1.0", "fdb00b071010000", old_app())]), Verdict::Compatible),
            ("patch upgrade: clients not checked", cluster("7.1.57", "7.1.63"), status(&[("7.1.0", "fdb00b071010000", old_app())]), Verdict::Compatible),
            ("patch downgrade allowed", cluster("7.1.63", "7.1.57"), status(&[]), Verdict::Compatible),
            ("minor downgrade refused", cluster("7.3.63", "7.1.57"), status(&[]),
                Verdict::UnsupportedVersionChange("the version cannot change from 7.3.63 to 7.1.57: downgrades are only allowed within the same major.minor".into())),
            ("old application client blocks", cluster("7.1.57", "7.3.63"), status(&[("7.1.0", "fdb00b071010000", old_app())]),
                Verdict::UnsupportedClients(vec!["127.3.0.1:51234 (app)".into()])),
            ("client already on the new version", cluster("7.1.57", "7.3.63"), status(&[("7.3.0", "fdb00b073000000", old_app())]), Verdict::Compatible),
            ("the operator's own log group is ignored", cluster("7.1.57", "7.3.63"), status(&[("7.1.0", "p", vec![client("127.3.0.1:5", "fdb-kubernetes-operator")])]), Verdict::Compatible),
            ("an fdbserver process's client is ignored", cluster("7.1.57", "7.3.63"), status(&[("7.1.0", "p", vec![client("127.1.0.5:40000", "")])]), Verdict::Compatible),
            ("unknown protocol skipped", cluster("7.1.57", "7.3.63"), status(&[("7.1.0", "Unknown", old_app())]), Verdict::Compatible),
        ];
        for (name, c, s, want) in cases {
            assert_eq!(check(&c, &s), want, "{name}");
        }
    }
}
