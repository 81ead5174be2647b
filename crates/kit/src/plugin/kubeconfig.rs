//! Where a kubectl plugin connects, resolved like kubectl.
//!
//! Contract: the kubeconfig is `--kubeconfig` if given, else every file in `$KUBECONFIG`
//! (merged, first wins), else `~/.kube/config`. The context is `--context`, else the file's
//! current context. The namespace is `-n/--namespace`, else the context's namespace, else
//! `default`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

/// The kubeconfig could not be loaded or used.
#[derive(Debug, thiserror::Error)]
#[error("kubeconfig {paths:?}: {reason}")]
pub struct KubeconfigError {
    /// Files tried.
    pub paths: Vec<PathBuf>,
    /// Why it failed.
    pub reason: String,
}

/// The global connection flags, as kubectl spells them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GlobalFlags {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// A client and the namespace commands act in.
#[derive(Clone)]
pub struct Session {
    /// Client for the chosen context.
    pub client: Client,
    /// The resolved namespace.
    pub namespace: String,
}

impl GlobalFlags {
    /// Loads the kubeconfig, builds a client and resolves the namespace.
    pub async fn connect(&self) -> Result<Session, KubeconfigError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let env = std::env::var_os("KUBECONFIG");
        let paths = kubeconfig_paths(self.kubeconfig.as_deref(), env.as_deref(), home.as_deref());
        let config = self.load(&paths).await?;
        let namespace = resolve_namespace(self.namespace.as_deref(), &config.default_namespace);
        let client = Client::try_from(config).map_err(|e| KubeconfigError {
            paths: paths.clone(),
            reason: e.to_string(),
        })?;
        Ok(Session { client, namespace })
    }

    /// The client configuration for the chosen context of these files.
    pub async fn load(&self, paths: &[PathBuf]) -> Result<Config, KubeconfigError> {
        let fail = |reason: String| KubeconfigError {
            paths: paths.to_vec(),
            reason,
        };
        if paths.is_empty() {
            return Err(fail(
                "no kubeconfig: pass --kubeconfig or set KUBECONFIG or HOME".into(),
            ));
        }
        let mut merged = Kubeconfig::default();
        for path in paths {
            let one = Kubeconfig::read_from(path)
                .map_err(|e| fail(format!("{}: {e}", path.display())))?;
            merged = merged.merge(one).map_err(|e| fail(e.to_string()))?;
        }
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        Config::from_custom_kubeconfig(merged, &options)
            .await
            .map_err(|e| fail(e.to_string()))
    }
}

/// The kubeconfig files to read, in kubectl's order of precedence.
pub fn kubeconfig_paths(
    flag: Option<&Path>,
    env: Option<&OsStr>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    if let Some(path) = flag {
        return vec![path.to_path_buf()];
    }
    if let Some(value) = env {
        let paths: Vec<PathBuf> = std::env::split_paths(value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return paths;
        }
    }
    home.map(|h| vec![h.join(".kube").join("config")])
        .unwrap_or_default()
}

/// `-n` if given, else the context's namespace (kube already falls back to `default`).
pub fn resolve_namespace(flag: Option<&str>, context_namespace: &str) -> String {
    match flag {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ if !context_namespace.is_empty() => context_namespace.to_string(),
        _ => "default".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CONTEXTS: &str = r#"
apiVersion: v1
kind: Config
current-context: plain
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: plain
  context: {cluster: c, user: u}
- name: games
  context: {cluster: c, user: u, namespace: games}
"#;

    #[test]
    fn flag_beats_env_beats_home() {
        let home = Path::new("/home/me");
        let flag = Path::new("/tmp/k");
        assert_eq!(
            kubeconfig_paths(Some(flag), Some(OsStr::new("/a:/b")), Some(home)),
            vec![flag]
        );
        let from_env = kubeconfig_paths(None, Some(OsStr::new("/a::/b")), Some(home));
        assert_eq!(from_env, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(
            kubeconfig_paths(None, Some(OsStr::new("")), Some(home)),
            vec![home.join(".kube/config")]
        );
        assert!(kubeconfig_paths(None, None, None).is_empty());
    }

    #[test]
    fn namespace_flag_beats_context_beats_default() {
        assert_eq!(resolve_namespace(Some("x"), "games"), "x");
        assert_eq!(resolve_namespace(None, "games"), "games");
        assert_eq!(resolve_namespace(Some(""), ""), "default");
    }

    async fn namespace_of(context: Option<&str>, flag: Option<&str>) -> String {
        let dir = std::env::temp_dir().join(format!("kubectl-plugin-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, TWO_CONTEXTS).unwrap();
        let flags = GlobalFlags {
            kubeconfig: Some(path.clone()),
            context: context.map(Into::into),
            namespace: None,
        };
        let config = flags.load(&[path]).await.unwrap();
        resolve_namespace(flag, &config.default_namespace)
    }

    #[tokio::test]
    async fn context_namespace_is_used_unless_overridden() {
        assert_eq!(namespace_of(None, None).await, "default");
        assert_eq!(namespace_of(Some("games"), None).await, "games");
        assert_eq!(namespace_of(Some("games"), Some("other")).await, "other");
    }

    #[tokio::test]
    async fn unknown_context_is_a_clear_error() {
        let flags = GlobalFlags {
            context: Some("nope".into()),
            ..Default::default()
        };
        let path = std::env::temp_dir().join(format!("kubectl-plugin-kc2-{}", std::process::id()));
        std::fs::write(&path, TWO_CONTEXTS).unwrap();
        let err = flags.load(&[path]).await.unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
    }
}
