//! The floor: what the API server (with the scheduler and kwok) needs for the operator's
//! essential writes when no operator logic sits in between.
//!
//! While `kubectl create` adds the instances, a plain client watching them creates each
//! instance's Pod and Service, built by the operator's own pure builders (so they are the
//! objects the operator writes, owner references included), and writes the instance's
//! status once, `--floor-concurrency` instances at a time. The create clock stops when every
//! Pod is Running; "writes done" is when the client's last write returned. The delete is one
//! collection delete of the Pods, until none is left.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use redroid::crd::RedroidInstance;
use redroid::instance::build;
use redroid::names;

use super::{Bench, Figures, watch};

/// Measures the floor in namespace `ns` (its claims bound, the instances file written).
pub async fn measure(bench: &Bench, ns: &str) -> anyhow::Result<Figures> {
    let n = bench.args.instances;
    let client = bench.admin.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    let running = tokio::spawn(watch::count_pods_running(pods.clone(), n));
    let writer = tokio::spawn(write_all(
        client.clone(),
        ns.to_owned(),
        n,
        bench.args.floor_concurrency,
    ));
    super::create_instances(&bench.instances_file)?;
    tokio::time::timeout(bench.timeout(), writer).await???;
    let writes_done = start.elapsed().as_secs_f64();
    tokio::time::timeout(bench.timeout(), running).await???;
    let running = start.elapsed().as_secs_f64();

    let start = Instant::now();
    // Repeated when the API server's request timeout cuts it (see the operator's delete).
    let deadline = start + bench.timeout();
    while let Err(e) = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
    {
        anyhow::ensure!(Instant::now() < deadline, "collection delete: {e}");
        eprintln!(
            "  collection delete cut after {:.1}s ({e}); again",
            start.elapsed().as_secs_f64()
        );
    }
    let delete_returned = start.elapsed().as_secs_f64();
    watch::until_empty(&pods, bench.timeout()).await?;
    let deleted = start.elapsed().as_secs_f64();
    Ok(Figures {
        running,
        writes_done: Some(writes_done),
        deleted,
        delete_returned,
        ..Figures::default()
    })
}

/// Watches the instances and gives each its Pod, Service and one status write, until `n`
/// instances are done.
async fn write_all(client: Client, ns: String, n: usize, concurrency: usize) -> anyhow::Result<()> {
    let instances: Api<RedroidInstance> = Api::namespaced(client.clone(), &ns);
    let done = Arc::new(AtomicUsize::new(0));
    let mut started: HashSet<String> = HashSet::new();
    let new = watcher(instances, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .try_filter(move |i| std::future::ready(started.insert(i.name_any())));
    let work = new
        .map_err(anyhow::Error::from)
        .try_for_each_concurrent(concurrency, |inst| {
            let (client, done) = (client.clone(), done.clone());
            async move {
                write_one(&client, &inst).await?;
                done.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        });
    let finished = async {
        loop {
            if done.load(Ordering::Relaxed) >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await; // sampling the counter
        }
    };
    tokio::select! {
        r = work => r,
        () = finished => Ok(()),
    }
}

async fn write_one(client: &Client, inst: &RedroidInstance) -> anyhow::Result<()> {
    let ns = inst.namespace().unwrap_or_default();
    let model = build::Model::new(inst, names::DEFAULT_KMSG_TOOLS_IMAGE)
        .ok_or_else(|| anyhow::anyhow!("instance without name, namespace or uid"))?;
    let pod = build::pod::pod(&model);
    let service = build::service::service(&model);
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &service)
        .await?;
    let name = inst.name_any();
    let status = serde_json::json!({
        "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
        "status": {
            "observedGeneration": inst.metadata.generation,
            "phase": "Running",
            "podName": pod.name_any(),
            "serviceName": service.name_any(),
            "adbAddress": names::adb_address(&name, &ns, inst.spec.adb_port),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Running",
                 "message": format!("Pod {:?} is running.", pod.name_any()),
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Scheduled", "status": "True", "reason": "PodCreated",
                 "message": format!("Pod {:?} was created.", pod.name_any()),
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        },
    });
    Api::<RedroidInstance>::namespaced(client.clone(), &ns)
        .patch_status(
            &name,
            &PatchParams::apply("floor").force(),
            &Patch::Apply(&status),
        )
        .await?;
    Ok(())
}
