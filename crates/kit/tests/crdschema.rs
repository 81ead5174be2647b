//! Control plane: the committed facts about Kubernetes types (list/map markers, required
//! fields) are what the pinned API server's own OpenAPI says.

use kit::crdschema::{K8sFacts, live_facts};

#[tokio::test]
async fn committed_kubernetes_schema_facts_match_the_api_server() {
    let client = testenv::client().await;
    let live = live_facts(&client)
        .await
        .expect("read the OpenAPI v3 documents");
    let committed = K8sFacts::committed();
    assert_eq!(live.kubernetes, testenv::Versions::pinned().kubernetes);
    assert!(
        live == committed,
        "crates/kit/src/k8s_schema_facts.json differs from the API server's OpenAPI \
         ({} types live, {} committed): run `cargo xtask gen-k8s-facts` and then `cargo xtask gen`",
        live.types.len(),
        committed.types.len()
    );
}
