//! `kube-whoami`: test support for the process-backed nodes. Connects with
//! `kube::Client::try_default()` (in a pod: the in-cluster configuration, i.e. the
//! ServiceAccount token, CA and `KUBERNETES_SERVICE_HOST`), asks the API server who it is
//! (SelfSubjectReview) and prints `user=<name>` and `namespace=<default namespace>`.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let namespace = client.default_namespace().to_string();
    let review: SelfSubjectReview = Api::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    println!("user={user}");
    println!("namespace={namespace}");
    Ok(())
}
