//! Control plane: Events published through `kit::events` keep every distinct message visible,
//! and fold only true repeats into a series.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kit::events::{Recorder, Reporter, publish};
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use testenv::{TestNamespace, client};

#[tokio::test]
async fn every_distinct_message_of_a_reason_is_its_own_event_and_repeats_form_a_series() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "kit-events").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let regarding: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "subject"}
    }))
    .expect("configmap");
    let regarding = cms
        .create(&PostParams::default(), &regarding)
        .await
        .expect("create the regarding object");
    let reference = regarding.object_ref(&());
    let recorder = Recorder::new(client.clone(), Reporter::from("kit-events-test"));
    for note in [
        "slot 1 attempt 1/4",
        "slot 1 attempt 2/4",
        "slot 1 attempt 2/4",
        "slot 1 attempt 3/4",
    ] {
        publish(
            &recorder,
            &reference,
            true,
            "SubAgentRebuild",
            note.into(),
            None,
        )
        .await;
    }

    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    let mut seen: Vec<(String, i32)> = list
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SubAgentRebuild"))
        .map(|e| {
            (
                e.note.clone().unwrap_or_default(),
                e.series.as_ref().map_or(1, |s| s.count),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("slot 1 attempt 1/4".to_owned(), 1),
            ("slot 1 attempt 2/4".to_owned(), 2),
            ("slot 1 attempt 3/4".to_owned(), 1),
        ],
        "each message is visible once; the repeat is a series of 2"
    );
    assert!(
        list.items
            .iter()
            .all(|e| e.type_.as_deref() == Some("Warning")
                && e.action.as_deref() == Some("SubAgentRebuild")
                && e.reporting_controller.as_deref() == Some("kit-events-test")),
        "{list:#?}"
    );
}
