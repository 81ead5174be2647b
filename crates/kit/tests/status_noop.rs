//! Control plane: a reconcile with nothing to do makes zero write requests.
//!
//! A test-only namespaced kind with a status subresource; a reconcile-like function computes
//! its status (observedGeneration and a Ready condition) and writes it with
//! `kit::status::patch_status_if_changed` through a request-counting client.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::conditions::{self, Desired};
use kit::status::{observed_generation, patch_status_if_changed};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A test-only kind.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kit-test.flotilla.dev",
    version = "v1",
    kind = "Probe",
    namespaced,
    status = "ProbeStatus"
)]
pub struct ProbeSpec {
    /// How many replicas.
    pub replicas: i32,
}

/// Status of a Probe.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProbeStatus {
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

// k8s-openapi's `schemars` feature is off in this workspace, so Condition's schema is spelled out.
fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64"},
            },
        },
    })
}

const MANAGER: &str = "kit-status-noop-test";

// Observe, compute status, write it only if it differs. Returns whether it wrote.
async fn reconcile(api: &Api<Probe>, name: &str, now: Timestamp) -> bool {
    let obj = api.get(name).await.expect("get probe");
    let generation = observed_generation(&obj);
    let mut conds = obj.status.clone().unwrap_or_default().conditions;
    let message = format!("{} replicas", obj.spec.replicas);
    let ready = Desired::new("Ready", true, "Converged", message).observed(generation);
    conditions::upsert(&mut conds, ready, now);
    let desired = ProbeStatus {
        observed_generation: generation,
        conditions: conds,
    };
    patch_status_if_changed(api, &obj, &desired, MANAGER)
        .await
        .expect("patch status")
}

fn status_of(p: &Probe) -> ProbeStatus {
    p.status.clone().expect("status written")
}

fn ready_of(p: &Probe) -> Condition {
    conditions::get(&status_of(p).conditions, "Ready")
        .cloned()
        .expect("Ready condition")
}

#[tokio::test]
async fn no_op_reconcile_makes_zero_writes() {
    let admin = testenv::client().await;
    testenv::install_crd(&admin, Probe::crd())
        .await
        .expect("install Probe CRD");
    let ns = testenv::TestNamespace::new(&admin, "kit-status").await;
    let admin_api: Api<Probe> = Api::namespaced(admin.clone(), &ns.name);
    let probe = Probe::new("p", ProbeSpec { replicas: 1 });
    admin_api
        .create(&PostParams::default(), &probe)
        .await
        .expect("create probe");

    let (client, counts) = testenv::counting_client().await;
    let api: Api<Probe> = Api::namespaced(client, &ns.name);
    let t0 = Timestamp::from_second(Timestamp::now().as_second()).expect("now");
    let later = |s: u64| t0 + Duration::from_secs(s);

    // First pass: the status is new, so exactly one write.
    counts.reset();
    assert!(reconcile(&api, "p", t0).await);
    assert_eq!(counts.writes(), 1, "{:?}", counts.by_verb());
    assert_eq!(counts.by_verb().get("patch"), Some(&1));
    let seen = admin_api.get("p").await.expect("get");
    assert_eq!(status_of(&seen).observed_generation, Some(1));
    assert_eq!(ready_of(&seen).status, "True");
    assert_eq!(ready_of(&seen).last_transition_time.0, t0);

    // Second pass, nothing changed: zero writes.
    counts.reset();
    assert!(!reconcile(&api, "p", later(60)).await);
    assert_eq!(counts.writes(), 0, "{:?}", counts.by_verb());

    // A spec change bumps the generation: one write, observedGeneration follows, and the
    // Ready condition keeps its lastTransitionTime because its status did not change.
    let bump = serde_json::json!({"spec": {"replicas": 3}});
    admin_api
        .patch("p", &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .expect("patch spec");
    counts.reset();
    assert!(reconcile(&api, "p", later(120)).await);
    assert_eq!(counts.writes(), 1, "{:?}", counts.by_verb());
    let seen = admin_api.get("p").await.expect("get");
    assert_eq!(seen.metadata.generation, Some(2));
    assert_eq!(status_of(&seen).observed_generation, Some(2));
    let ready = ready_of(&seen);
    assert_eq!(ready.observed_generation, Some(2));
    assert_eq!(ready.message, "3 replicas");
    assert_eq!(ready.last_transition_time.0, t0);

    // And converged again.
    counts.reset();
    assert!(!reconcile(&api, "p", later(180)).await);
    assert_eq!(counts.writes(), 0, "{:?}", counts.by_verb());
}
