//! Removals the user asks for, on the local control plane with kwok pods and the fake
//! database (processes follow the pods); the operator runs as its ServiceAccount under
//! `deploy/fdb/rbac`.
//!
//! - A group removed without exclusion (`kubectl fdb remove process-groups -e=false`, which
//!   adds it to `processGroupsToRemoveWithoutExclusion`) is marked `exclusionSkipped`, its pod
//!   deleted and a replacement added, with no `exclude` and no `include` issued at all.
//! - A removed group whose pod is held by a finalizer stays `ResourcesTerminating` and is not
//!   included while the pod exists, over whole passes with every gate open; once the finalizer
//!   is released the pod goes, the include follows and the group leaves the status.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::{Harness, create, groups, ids};

/// A finalizer no controller knows: it holds the pod until the test removes it.
const HOLD: &str = "flotilla.test/hold";

#[tokio::test]
async fn a_group_removed_without_exclusion_is_deleted_with_no_exclude_or_include() {
    let h = Harness::start("fdb-no-exclusion").await;
    let name = "skip";
    h.simulate(name);
    let db = h.db(name);
    let c = create(&h, name, json!({})).await;
    let before = ids(&c, "stateless");
    let id = before.iter().next().unwrap().clone();
    let calls = db.calls().len();

    // What `kubectl fdb remove process-groups --exclusion=false` does.
    let kubeconfig = testenv::kubeconfig_path().display().to_string();
    let argv: Vec<String> = [
        "--kubeconfig",
        &kubeconfig,
        "-n",
        &h.ns.name,
        "--wait=false",
        "remove",
        "process-groups",
        "-c",
        name,
        "--use-process-group-id",
        "--exclusion=false",
        &id,
    ]
    .map(String::from)
    .into();
    let (mut out, mut err, mut input) = (Vec::new(), Vec::new(), &b""[..]);
    let mut io = fdb::plugin::Io {
        out: &mut out,
        err: &mut err,
        input: &mut input,
    };
    fdb::plugin::main_with(argv, &mut io)
        .await
        .expect("kubectl fdb remove -e=false");
    let c = h.clusters().get(name).await.unwrap();
    assert_eq!(
        c.spec
            .process_groups_to_remove_without_exclusion
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>(),
        vec![id.clone()]
    );

    let c = h.removals_done(name, Duration::from_secs(180)).await;
    let after = ids(&c, "stateless");
    assert_eq!(after.len(), 9, "replaced: {after:?}");
    assert!(!after.contains(&id), "{after:?}");
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    assert!(
        pods.get_opt(&format!("{name}-{id}"))
            .await
            .unwrap()
            .is_none(),
        "its pod is gone"
    );
    let issued: Vec<String> = db.calls()[calls..]
        .iter()
        .filter(|c| c.starts_with("exclude") || c.starts_with("include"))
        .cloned()
        .collect();
    assert!(issued.is_empty(), "no exclusion, no inclusion: {issued:?}");
    let note = format!("{id} is removed without exclusion: deleting its resources");
    let events = h.events().await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("RemovingProcessGroup")
                && e.note.as_deref() == Some(note.as_str())),
        "{:?}",
        events.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_pod_stuck_terminating_keeps_its_group_and_blocks_the_include_until_released() {
    let h = Harness::start_with("fdb-stuck", support::open_recovery_gates()).await;
    let name = "stuck";
    h.simulate(name);
    let db = h.db(name);
    db.set_drain_reads(2);
    let c = create(&h, name, json!({})).await;
    let id = ids(&c, "storage").into_iter().next().unwrap();
    let pod_name = format!("{name}-{id}");
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    pods.patch(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await
    .expect("hold the pod");
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"processGroupsToRemove": [id]}})),
        )
        .await
        .unwrap();

    // Excluded, verified, its pod deleted: the pod stays, terminating, and so does the group.
    testenv::eventually(
        "the pod terminating and its group ResourcesTerminating",
        Duration::from_secs(240),
        || async {
            let pod = pods.get_opt(&pod_name).await.ok()??;
            pod.metadata.deletion_timestamp.as_ref()?;
            let c = h.clusters().get(name).await.ok()?;
            groups(&c)
                .iter()
                .any(|g| {
                    g.process_group_id.as_str() == id
                        && g.exclusion_timestamp.is_some()
                        && g.has_condition("ResourcesTerminating")
                })
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: calls {:?}", db.calls()));
    // Two whole passes later (every gate open, the inclusion gate too), still no include.
    h.bump(name, json!({"minimumUptimeSecondsForBounce": 601}))
        .await;
    h.bump(name, json!({"minimumUptimeSecondsForBounce": 602}))
        .await;
    let c = h.clusters().get(name).await.unwrap();
    assert!(
        groups(&c)
            .iter()
            .any(|g| g.process_group_id.as_str() == id && g.has_condition("ResourcesTerminating")),
        "the group stays while its pod exists"
    );
    let includes = |calls: Vec<String>| -> Vec<String> {
        calls
            .into_iter()
            .filter(|c| c.starts_with("include") && c.contains(&id))
            .collect()
    };
    assert_eq!(includes(db.calls()), Vec::<String>::new(), "no include yet");
    assert!(!db.exclusions().is_empty(), "still excluded");

    // Released: the pod goes, then the include, then the group leaves the status.
    pods.patch(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the pod");
    let c = h.removals_done(name, Duration::from_secs(180)).await;
    assert!(!ids(&c, "storage").contains(&id));
    assert_eq!(includes(db.calls()).len(), 1, "{:?}", db.calls());
    assert!(db.exclusions().is_empty(), "included again");
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}
