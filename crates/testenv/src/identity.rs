//! Clients and kubeconfigs that act as a ServiceAccount instead of the plane's admin, so tests
//! and demos run an operator under its own RBAC.
//!
//! Contract:
//! - [`service_account_token`] asks the TokenRequest API (`serviceaccounts/token`) for a bound
//!   token of an existing ServiceAccount; nothing is stored in a Secret.
//! - [`service_account_client`] and [`write_kubeconfig_for_token`] use the plane's server URL
//!   and CA from [`crate::kubeconfig_path`] with that bearer token and no client certificate,
//!   so every request is authorised as `system:serviceaccount:<namespace>:<name>`.

use std::path::Path;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::plane;

/// Lifetime asked for tokens: long enough for a demo left running for a working day.
pub const TOKEN_SECONDS: i64 = 12 * 3600;

/// A bound token for ServiceAccount `namespace/name`, requested with `admin`.
pub async fn service_account_token(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|e| {
            anyhow::anyhow!("requesting a token for serviceaccount {namespace}/{name}: {e}")
        })?;
    let token = issued.status.and_then(|s| s.token).unwrap_or_default();
    anyhow::ensure!(
        !token.is_empty(),
        "the TokenRequest for {namespace}/{name} returned no token"
    );
    Ok(token)
}

/// A client acting as ServiceAccount `namespace/name` (default namespace `namespace`).
pub async fn service_account_client(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<kube::Client> {
    let config = service_account_config(admin, namespace, name).await?;
    Ok(kube::Client::try_from(config)?)
}

/// The client configuration of ServiceAccount `namespace/name` (for a client with layers, such
/// as `crate::counting`).
pub async fn service_account_config(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<kube::Config> {
    let token = service_account_token(admin, namespace, name).await?;
    let kubeconfig = Kubeconfig::from_yaml(&render_kubeconfig(&token, namespace)?)?;
    Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// Writes a kubeconfig for `token` against the plane to `path` (mode 0600: it holds a secret),
/// for running an operator binary as a ServiceAccount.
pub fn write_kubeconfig_for_token(path: &Path, token: &str, namespace: &str) -> anyhow::Result<()> {
    write_private(path, &render_kubeconfig(token, namespace)?)
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// The plane's server URL and CA file, from the admin kubeconfig's first cluster.
fn plane_cluster() -> anyhow::Result<(String, String)> {
    let admin = Kubeconfig::read_from(plane::kubeconfig_path())?;
    let cluster = admin
        .clusters
        .into_iter()
        .find_map(|c| c.cluster)
        .ok_or_else(|| anyhow::anyhow!("the plane's kubeconfig names no cluster"))?;
    let server = cluster
        .server
        .ok_or_else(|| anyhow::anyhow!("the plane's kubeconfig has no server"))?;
    let ca = cluster
        .certificate_authority
        .ok_or_else(|| anyhow::anyhow!("the plane's kubeconfig has no certificate-authority"))?;
    Ok((server, ca))
}

fn render_kubeconfig(token: &str, namespace: &str) -> anyhow::Result<String> {
    let (server, ca) = plane_cluster()?;
    Ok(kubeconfig_text(&server, &ca, token, namespace))
}

/// Writes a kubeconfig for `token` against `server` (which must present a certificate the
/// plane's CA signed, such as [`crate::chaos::FaultProxy`]) to `path` (mode 0600).
pub fn write_kubeconfig_for_server(
    path: &Path,
    server: &str,
    token: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    let (_, ca) = plane_cluster()?;
    write_private(path, &kubeconfig_text(server, &ca, token, namespace))
}

/// Writes a kubeconfig for `token` against `server`, trusting the CA file `ca`, to `path`
/// (mode 0600): for an API server other than the plane's (a space, or a proxy in front of
/// one).
pub fn write_kubeconfig_with_ca(
    path: &Path,
    server: &str,
    ca: &str,
    token: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    write_private(path, &kubeconfig_text(server, ca, token, namespace))
}

fn kubeconfig_text(server: &str, ca: &str, token: &str, namespace: &str) -> String {
    // JSON strings are valid YAML scalars, so every value is quoted safely.
    let q = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: flotilla\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\nusers:\n- name: serviceaccount\n  user:\n    token: {}\ncontexts:\n\
         - name: serviceaccount\n  context:\n    cluster: flotilla\n    user: serviceaccount\n    namespace: {}\n\
         current-context: serviceaccount\n",
        q(server),
        q(ca),
        q(token),
        q(namespace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_carries_token_ca_and_namespace_only() {
        let text = kubeconfig_text("https://127.0.0.1:6443", "/pki/ca.crt", "tok: en", "ops");
        let kc = Kubeconfig::from_yaml(&text).expect("valid kubeconfig");
        let cluster = kc.clusters[0].cluster.clone().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/pki/ca.crt")
        );
        let user = kc.auth_infos[0].auth_info.clone().expect("user");
        assert!(
            user.client_certificate.is_none() && user.client_key.is_none(),
            "no admin certificate"
        );
        assert!(user.token.is_some(), "bearer token present");
        let ctx = kc.contexts[0].context.clone().expect("context");
        assert_eq!(ctx.namespace.as_deref(), Some("ops"));
        assert_eq!(kc.current_context.as_deref(), Some("serviceaccount"));
    }
}
