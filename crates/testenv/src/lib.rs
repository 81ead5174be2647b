//! Flotilla's local Kubernetes control plane and the test support built on it.
//!
//! The plane is upstream kube-apiserver, kube-controller-manager, kube-scheduler and etcd,
//! built from pinned Go modules (`upstream/versions.env`, `upstream/build.sh`) into a cache
//! outside the repository, plus kwok simulating three nodes in three zones. Everything binds
//! 127.0.0.1 and pods get 127.1.x.y addresses. See `docs/testenv.md`.

pub mod admission;
pub mod azurite;
pub mod bench;
pub mod cargo;
pub mod chaos;
pub mod deployed;
pub mod identity;
pub mod kustomize;
pub mod packages;
pub mod pki;
pub mod plane;
pub mod process;
pub mod procnode;
pub mod rbac;
pub mod registry;
pub mod spaces;
mod support;
pub mod versions;

pub use identity::{service_account_client, service_account_token, write_kubeconfig_for_token};
pub use plane::{Up, down, kubeconfig_path, status, up};
pub use support::{
    RequestCounts, TestNamespace, bound_claim, capture_logs, client, counting, counting_client,
    ensure_plane, eventually, install_crd, list_labelled, resource_of, start_up_error, verb_of,
    wait_deleted, wait_for,
};
pub use versions::Versions;
