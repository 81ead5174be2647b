//! What every operator's kubectl plugin shares: connecting like kubectl ([`kubeconfig`]),
//! printing like it ([`table`]), failing like it ([`PluginError`]) and ending like it
//! ([`finish`]).

pub mod kubeconfig;
pub mod table;

/// A failed plugin command: one line naming the object involved.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The named object does not exist.
    #[error("{kind} {name:?} not found in namespace {namespace:?}")]
    NotFound {
        /// Lower-case kind, as kubectl prints it.
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
    /// The kubeconfig could not be used.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    /// The request cannot be carried out as asked, or it found issues.
    #[error("{0}")]
    Refused(String),
    /// A local failure (output, input, running kubectl).
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
    /// `e` from `action` (`get`, `patch`, …) on `kind` `name` in `ns`: [`PluginError::NotFound`]
    /// for a 404, a "changed while this command ran" refusal for a 409, else
    /// [`PluginError::Api`].
    pub fn kube(kind: &'static str, name: &str, ns: &str, action: &str, e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(s) if s.is_not_found() => PluginError::NotFound {
                kind,
                name: name.to_owned(),
                namespace: ns.to_owned(),
            },
            kube::Error::Api(s) if s.code == 409 => PluginError::Refused(format!(
                "{kind} {name:?} changed while this command ran; run it again"
            )),
            _ => PluginError::Api {
                action: format!("{action} {kind} {name:?} in namespace {ns:?}"),
                source: e,
            },
        }
    }

    /// A local failure while doing `action`.
    pub fn io(action: &str, e: std::io::Error) -> Self {
        PluginError::Io {
            action: action.to_owned(),
            source: e,
        }
    }
}

use std::process::ExitCode;

/// The exit of a plugin binary after `result`: success; success too when the output was
/// piped into `head` and closed early (not a failure worth reporting); a usage error as clap
/// renders it; any other error as one `error: …` line. Failures exit with code 1.
pub fn finish(result: anyhow::Result<()>) -> ExitCode {
    let Err(e) = result else {
        return ExitCode::SUCCESS;
    };
    let broken_pipe = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    match e.downcast_ref::<clap::Error>() {
        Some(usage) => eprint!("{}", usage.render()),
        None => eprintln!("error: {e}"),
    }
    ExitCode::FAILURE
}
