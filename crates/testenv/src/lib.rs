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

/// The root of the checkout being run.
///
/// Not `env!("CARGO_MANIFEST_DIR")` alone: cargo fingerprints path packages relative to their
/// workspace, so a second checkout that shares a target directory (a CI clone next to a working
/// copy, or the same repository mounted elsewhere) reuses binaries whose compiled-in path names
/// the first checkout, which may hold other files or not exist. The checkout is found from the
/// `CARGO_MANIFEST_DIR` cargo sets at run time (`cargo run`, `cargo test`, `cargo xtask test`),
/// else the working directory, else the compiled-in path.
pub fn workspace_root() -> std::path::PathBuf {
    let compiled = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let starts = [
        std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from),
        std::env::current_dir().ok(),
    ];
    starts
        .into_iter()
        .flatten()
        .find_map(|start| {
            start
                .ancestors()
                .find(|d| d.join("crates/testenv/upstream/build.sh").is_file())
                .map(std::path::Path::to_path_buf)
        })
        .unwrap_or(compiled)
}
