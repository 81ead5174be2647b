//! The plugin's single error type: every failure is one line naming the object involved, and
//! carries a category (`user`, `not-found`, `api`, `local`) for callers that want to branch.

/// A failed plugin command.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The named object does not exist.
    #[error("{kind} {name:?} not found in namespace {namespace:?}")]
    NotFound {
        /// Lower-case kind, like kubectl prints it (`redroidinstance`).
        kind: &'static str,
        /// Object name.
        name: String,
        /// Namespace searched.
        namespace: String,
    },
    /// An API request failed for another reason.
    #[error("{action}: {source}")]
    Api {
        /// What was being done, naming the object.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The kubeconfig could not be loaded.
    #[error(transparent)]
    Kubeconfig(#[from] kit::plugin::kubeconfig::KubeconfigError),
    /// A `--for` value is not a duration.
    #[error("invalid duration {input:?}: {reason} (examples: 90s, 30m, 2h, 1h30m)")]
    InvalidDuration {
        /// The rejected text.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `task trigger` on a task without a schedule.
    #[error(
        "redroidtask {name:?} in namespace {namespace:?} is a one-shot task (no spec.schedule); only scheduled tasks can be triggered — delete and re-create a one-shot task to run it again"
    )]
    OneShotTask {
        /// Task name.
        name: String,
        /// Its namespace.
        namespace: String,
    },
    /// A scheduled task has no CronJob for one of its instances (yet).
    #[error(
        "redroidtask {task:?} in namespace {namespace:?} has no CronJob for instance {instance:?} yet"
    )]
    NoCronJob {
        /// Task name.
        task: String,
        /// Instance name.
        instance: String,
        /// Namespace.
        namespace: String,
    },
    /// The task has never created a Job (matching the filter).
    #[error("redroidtask {task:?} in namespace {namespace:?} has no Jobs{filter}")]
    NoJobs {
        /// Task name.
        task: String,
        /// Namespace.
        namespace: String,
        /// ` for instance "x"` or empty.
        filter: String,
    },
    /// The instance has no Pod to talk to.
    #[error("redroidinstance {name:?} in namespace {namespace:?} has no running pod ({detail})")]
    NoPod {
        /// Instance name.
        name: String,
        /// Namespace.
        namespace: String,
        /// Phase or reason.
        detail: String,
    },
    /// Port-forwarding to a pod failed.
    #[error("port-forward to pod {pod:?} in namespace {namespace:?}: {reason}")]
    Forward {
        /// Pod name.
        pod: String,
        /// Namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
    /// `adb` is not installed.
    #[error("adb was not found on PATH; install the Android platform-tools and try again")]
    AdbNotFound,
    /// `adb` ran but failed.
    #[error("`adb {args}` failed: {reason}")]
    Adb {
        /// The adb arguments.
        args: String,
        /// Exit status or spawn error.
        reason: String,
    },
    /// A local I/O failure (listening socket, output).
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl PluginError {
    /// A coarse category: `not-found`, `user` (bad input or state), `api` or `local`.
    pub fn category(&self) -> &'static str {
        match self {
            PluginError::NotFound { .. }
            | PluginError::NoCronJob { .. }
            | PluginError::NoJobs { .. } => "not-found",
            PluginError::InvalidDuration { .. }
            | PluginError::OneShotTask { .. }
            | PluginError::NoPod { .. } => "user",
            PluginError::Api { .. } | PluginError::Forward { .. } => "api",
            PluginError::Kubeconfig(_)
            | PluginError::AdbNotFound
            | PluginError::Adb { .. }
            | PluginError::Io { .. } => "local",
        }
    }

    /// Maps a client error, turning 404 into [`PluginError::NotFound`] for the named object.
    pub fn from_kube(
        kind: &'static str,
        name: &str,
        namespace: &str,
        action: &str,
        e: kube::Error,
    ) -> Self {
        match &e {
            kube::Error::Api(s) if s.is_not_found() => PluginError::NotFound {
                kind,
                name: name.to_string(),
                namespace: namespace.to_string(),
            },
            _ => PluginError::Api {
                action: format!("{action} {kind} {name:?} in namespace {namespace:?}"),
                source: e,
            },
        }
    }

    /// An [`PluginError::Io`] error.
    pub fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        PluginError::Io {
            action: action.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_object_and_namespace() {
        let e = PluginError::NotFound {
            kind: "redroidinstance",
            name: "x".into(),
            namespace: "y".into(),
        };
        assert_eq!(
            e.to_string(),
            r#"redroidinstance "x" not found in namespace "y""#
        );
        assert_eq!(e.category(), "not-found");
    }
}
