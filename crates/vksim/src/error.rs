//! The simulator's errors. None of them stops the simulator: a registry failure during a VM
//! transition becomes lifecycle `failed` (as in vk-cocoon), a failed pod patch is retried.

/// A failed simulator action.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A registry push, pull or delete failed.
    #[error("registry {op} {repo}:{tag}: {source:#}")]
    Registry {
        /// `push`, `pull` or `delete`.
        op: &'static str,
        /// The repository (`[<prefix>/]<vm>`).
        repo: String,
        /// The tag.
        tag: &'static str,
        /// The cause.
        #[source]
        source: anyhow::Error,
    },
    /// A pod annotation patch failed for another reason than the pod being gone.
    #[error("patch pod {namespace}/{name}: {source}")]
    Patch {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The configuration is unusable.
    #[error("config: {0}")]
    Config(String),
}

impl SimError {
    /// A short category for logs.
    pub fn category(&self) -> &'static str {
        match self {
            SimError::Registry { .. } => "RegistryError",
            SimError::Patch { .. } => "PatchFailed",
            SimError::Config(_) => "InvalidConfig",
        }
    }
}
