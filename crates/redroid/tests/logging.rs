//! What the operator logs at its default level (info): every write it makes and every change
//! of an instance's phase or a task's conditions, with structured fields, and nothing for
//! passes that change nothing (issue item 16: a whole run used to log four lines).

mod support;

use std::sync::Arc;
use std::time::Duration;

use kit::controller::RunContext;
use kube::Client;
use kube::api::{Api, PostParams};
use redroid::context::{Context, Settings};
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

async fn create<K>(client: &Client, ns: &str, kind: &str, name: &str, spec: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(json!({
        "apiVersion": "redroid.isning.moe/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("object");
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_logs_say_what_the_operator_does() {
    let logs = support::logs::capture();
    let client = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let ns = testenv::TestNamespace::new(&client, "redroid-logs").await;
    for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
        testenv::bound_claim(&client, &ns.name, claim)
            .await
            .expect("claim");
    }
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    let ctx = Arc::new(Context::new(client.clone(), Settings::default()));
    let addr = "127.0.0.1:0".parse().expect("addr");
    let rc = RunContext {
        client: client.clone(),
        metrics: kit::metrics::Metrics::new(),
        readiness: kit::health::Readiness::new(),
        shutdown: stop.clone(),
        metrics_addr: addr,
        probe_addr: addr,
    };
    let scope = Some(ns.name.clone());
    tokio::spawn(redroid::instance::run(
        ctx.clone(),
        rc.clone(),
        scope.clone(),
    ));
    tokio::spawn(redroid::task::run(ctx, rc, scope));

    let instances: Api<RedroidInstance> = Api::namespaced(client.clone(), &ns.name);
    create::<RedroidInstance>(
        &client,
        &ns.name,
        "RedroidInstance",
        "a",
        json!({"index": 0}),
    )
    .await;
    testenv::wait_for(&instances, "a", WAIT, |i| {
        i.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(InstancePhase::Running))
    })
    .await
    .expect("a Running");
    create::<RedroidInstance>(
        &client,
        &ns.name,
        "RedroidInstance",
        "b",
        json!({"index": 0}),
    )
    .await;
    create::<RedroidInstance>(
        &client,
        &ns.name,
        "RedroidInstance",
        "c",
        json!({"index": 5}),
    )
    .await;
    let task = json!({
        "instances": [{"name": "c"}], "suspendInstance": true,
        "integrations": [{"name": "probe", "image": "adb:1", "command": ["adb"], "args": ["devices"]}],
    });
    create::<RedroidTask>(&client, &ns.name, "RedroidTask", "t", task).await;
    let tasks: Api<RedroidTask> = Api::namespaced(client.clone(), &ns.name);
    testenv::wait_for(&tasks, "t", WAIT, |t| {
        t.status.as_ref().is_some_and(|s| {
            kit::conditions::get(&s.conditions, "Complete").is_some_and(|c| c.status == "True")
        })
    })
    .await
    .expect("task Complete");
    testenv::wait_for(&instances, "c", WAIT, |i| {
        i.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(InstancePhase::Running) && s.suspended.is_none())
    })
    .await
    .expect("c resumed");

    // Each line is logged just after the write it reports (the task's `Complete` just after
    // the status write waited for above), or by a pass nothing above waited for (b's
    // conflict): the lines are waited for, not read once.
    let ns_field = format!("namespace={}", ns.name);
    let wanted: [(&str, &[&str]); 9] = [
        ("the Pod created", &["created Pod", "name=a", "pod=a-pod-"]),
        (
            "the Service applied",
            &["applied Service", "service=a", "created=true"],
        ),
        (
            "a phase transition",
            &["instance phase changed", "name=a", "to=Running"],
        ),
        (
            "a conflict",
            &["instance held back", "name=b", "reason=IndexConflict"],
        ),
        (
            "an override set",
            &["set status.suspended", "task=t", "instance=c"],
        ),
        ("the Pod deleted", &["deleted Pod", "name=c"]),
        ("the Job created", &["created Job", "task=t", "job=t-c"]),
        (
            "the override cleared",
            &["cleared status.suspended", "instance=c"],
        ),
        (
            "the task completing",
            &[
                "task condition changed",
                "condition=Complete",
                "status=True",
            ],
        ),
    ];
    let missing = || {
        wanted
            .iter()
            .filter(|(_, needles)| {
                let mut all = vec!["INFO", ns_field.as_str()];
                all.extend_from_slice(needles);
                logs.lines_with(&all).is_empty()
            })
            .map(|(what, needles)| format!("{what} {needles:?}"))
            .collect::<Vec<_>>()
    };
    let logged = testenv::eventually("an INFO line for every write", WAIT, || {
        let left = missing();
        async move { left.is_empty().then_some(()) }
    })
    .await;
    if let Err(e) = logged {
        panic!(
            "{e}: no INFO line (with {ns_field}) for {:?}; logged:\n{}",
            missing(),
            logs.lines_with(&[ns_field.as_str()]).join("\n")
        );
    }
    // Passes that change nothing stay at debug.
    assert!(
        logs.lines_with(&["INFO", "reconciled"]).is_empty(),
        "no-op passes are not logged at info"
    );
}
