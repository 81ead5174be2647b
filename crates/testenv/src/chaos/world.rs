//! What every scenario's world starts with, and the limits the scenarios share.
//!
//! Contract:
//! - [`Base::new`] installs the operator's CRDs, makes the run's namespace
//!   (`<prefix>-base` for the fault-free run, `<prefix>-<seed>` for a seeded one) and binds the
//!   operator's shipped RBAC (`deploy/<operator>/rbac`) to its ServiceAccount there; the RBAC's
//!   cluster-scoped objects go when the [`Base`] is dropped, the namespace in the background.
//! - [`Base::dir`] is where the run's operator log and proxy journal go:
//!   `<test crate's CARGO_TARGET_TMPDIR>/chaos/<namespace>`.
//! - [`Bounds::standard`] are the hot-loop bounds every scenario so far keeps (why each holds
//!   is on the constant); a scenario gives its own convergence and teardown deadlines.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::Bounds;
use crate::TestNamespace;
use crate::rbac::ClusterCleanup;

/// How to make a scenario's [`Base`].
pub struct Setup<'a> {
    /// The operator's CRDs.
    pub crds: Vec<CustomResourceDefinition>,
    /// The namespace prefix (`rd-chaos`, ...).
    pub prefix: &'a str,
    /// The operator's shipped RBAC directory.
    pub rbac: PathBuf,
    /// The namespace the shipped RBAC names (rewritten to the run's).
    pub deploy_namespace: &'a str,
}

/// The admin client, the run's namespace and the operator's RBAC in it.
pub struct Base {
    /// An admin client (not behind the proxy).
    pub admin: kube::Client,
    /// The run's namespace.
    pub ns: TestNamespace,
    _rbac: ClusterCleanup,
}

impl Base {
    /// Sets up a run of seed `seed` (`None`: the fault-free run); see the module contract.
    pub async fn new(setup: Setup<'_>, seed: Option<u64>) -> anyhow::Result<Self> {
        let admin = crate::client().await;
        for crd in setup.crds {
            crate::install_crd(&admin, crd).await?;
        }
        let prefix = match seed {
            None => format!("{}-base", setup.prefix),
            Some(s) => format!("{}-{s}", setup.prefix),
        };
        let ns = TestNamespace::new(&admin, &prefix).await;
        let rbac = crate::rbac::install_rbac(&admin, &setup.rbac, setup.deploy_namespace, &ns.name)
            .await?;
        Ok(Self {
            admin,
            ns,
            _rbac: rbac,
        })
    }

    /// The run's log directory under `tmp` (the test crate's `CARGO_TARGET_TMPDIR`).
    pub fn dir(&self, tmp: &str) -> PathBuf {
        Path::new(tmp).join("chaos").join(&self.ns.name)
    }
}

impl Bounds {
    /// The limits every scenario keeps, with its own deadlines to converge once the faults
    /// stop and to finish the deletion.
    ///
    /// - Quiet, once converged: 2.5 requests/s (reads and writes; watches excluded) over
    ///   10 s. A converged operator renews its Lease (a GET and a PUT every 2 s: 1/s); a
    ///   watch re-established after the last cut costs every object one more pass, so a
    ///   first window above the bound is followed by a second, and only the second counts.
    ///   A requeue loop runs at tens per second, in both.
    /// - Peak, during the run: 80 requests/s over any 5 s window. The fault-free runs peak at
    ///   about 45/s while a scenario creates or deletes several objects at once (each costs a
    ///   pass of reads and a few writes); a reconcile that requeues itself without waiting
    ///   runs at hundreds.
    pub const fn standard(converge: Duration, teardown: Duration) -> Self {
        Self {
            quiet_window: Duration::from_secs(10),
            quiet: 2.5,
            peak: 80.0,
            converge,
            teardown,
        }
    }
}
