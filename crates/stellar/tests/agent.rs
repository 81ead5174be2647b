//! The work agent on a real WEC: two overlapping policies share ownership of one object
//! (removing one policy leaves it), createOnly objects are never updated, an agent stopped
//! while work is withdrawn converges on restart with nothing duplicated, and a deleted WDS
//! object leaves the WEC and the mailbox; an object the agent fails to update stays on the
//! WEC (the chaos scenario's seed 1 saw every transient apply error delete the object).

mod support;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use stellar::ocm::{AppliedManifestWork, ManifestWork};
use support::{ITS, WDS, create, unique, until};

const WEC: &str = "wec2";

/// The tests of this binary each run their own agent for [`WEC`]: one at a time.
static AGENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn wec_cm(wec: &kube::Client, ns: &str, name: &str) -> Option<Value> {
    support::dynamic(wec, "", "v1", "ConfigMap", Some(ns))
        .get_opt(name)
        .await
        .expect("get")
        .map(|o| serde_json::to_value(o).expect("json"))
}

fn amw_owners(o: &Value) -> usize {
    o["metadata"]["ownerReferences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|r| r["kind"] == "AppliedManifestWork")
                .count()
        })
        .unwrap_or(0)
}

async fn policy(wds: &kube::Client, name: &str, ns: &str, object: &str, create_only: bool) {
    create(
        wds,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": name},
        "spec": {"clusterSelectors": [{"matchLabels": {"name": WEC}}],
                 "downsync": [{"apiGroup": "", "resources": ["namespaces"], "objectNames": [ns]},
                              {"apiGroup": "", "resources": ["configmaps"], "namespaces": [ns],
                               "objectNames": [object], "createOnly": create_only}]}}),
    )
    .await
    .expect("policy");
}

#[tokio::test]
async fn shared_ownership_create_only_and_restart() {
    let _agent = AGENT.lock().await;
    support::start_controllers();
    let wds = support::client(WDS).await;
    let its = support::client(ITS).await;
    let wec = support::client(WEC).await;
    support::register(&its, WEC).await;
    let start = || {
        let (its, wec) = (its.clone(), wec.clone());
        tokio::spawn(
            async move { stellar::agent::run(its, wec, support::agent_options(WEC)).await },
        )
    };
    let mut agent = start();
    let id = unique("ag");
    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": id}}),
    )
    .await
    .expect("ns");
    for n in ["shared", "once"] {
        create(
            &wds,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "namespace": id}, "data": {"v": "1"}}),
        )
        .await
        .expect("cm");
    }
    let (p1, p2, p3) = (format!("{id}-1"), format!("{id}-2"), format!("{id}-3"));
    policy(&wds, &p1, &id, "shared", false).await;
    policy(&wds, &p2, &id, "shared", false).await;
    policy(&wds, &p3, &id, "once", true).await;

    // Shared by two AppliedManifestWorks; the createOnly one delivered.
    until("shared owned twice and once delivered", 60, || async {
        let shared = wec_cm(&wec, &id, "shared").await?;
        wec_cm(&wec, &id, "once").await?;
        (amw_owners(&shared) == 2).then_some(())
    })
    .await;

    // One policy goes: the object stays, with one owner.
    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .delete(&p1, &DeleteParams::default())
    .await
    .expect("delete p1");
    until("shared owned once", 60, || async {
        let shared = wec_cm(&wec, &id, "shared").await?;
        (amw_owners(&shared) == 1).then_some(())
    })
    .await;

    // createOnly: the WDS change reaches the ManifestWork, which the agent has applied, but
    // the WEC copy keeps its first content.
    let cms = support::dynamic(&wds, "", "v1", "ConfigMap", Some(&id));
    cms.patch(
        "once",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .expect("edit once");
    let mws: Api<ManifestWork> = Api::namespaced(its.clone(), WEC);
    let by_policy = |p: &str| {
        ListParams::default().labels(&format!(
            "transport.kubestellar.io/originOwnerReferenceBindingKey={p}"
        ))
    };
    until(
        "the createOnly ManifestWork updated and applied",
        60,
        || async {
            let list = mws.list(&by_policy(&p3)).await.expect("mws").items;
            let mw = list
                .iter()
                .find(|m| m.spec.workload.manifests[0]["kind"] == "ConfigMap")?;
            let applied = mw
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == "Applied")?;
            (mw.spec.workload.manifests[0]["data"]["v"] == "2"
                && applied.status == "True"
                && applied.observed_generation == mw.metadata.generation)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        wec_cm(&wec, &id, "once").await.expect("once")["data"]["v"],
        json!("1"),
        "createOnly keeps the first copy"
    );

    // The agent stops; the last sharing policy goes meanwhile (its ManifestWorks wait on the
    // agent's finalizer); the agent restarts and converges.
    agent.abort();
    let _ = (&mut agent).await;
    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .delete(&p2, &DeleteParams::default())
    .await
    .expect("delete p2");
    until("p2's ManifestWorks marked for deletion", 60, || async {
        let list = mws.list(&by_policy(&p2)).await.expect("mws").items;
        (!list.is_empty() && list.iter().all(|m| m.metadata.deletion_timestamp.is_some()))
            .then_some(())
    })
    .await;
    assert!(
        wec_cm(&wec, &id, "shared").await.is_some(),
        "nothing is removed while the agent is down"
    );
    agent = start();
    until("shared removed and p2's ManifestWorks gone", 60, || async {
        let gone = wec_cm(&wec, &id, "shared").await.is_none();
        let left = mws.list(&by_policy(&p2)).await.expect("mws").items;
        (gone && left.is_empty()).then_some(())
    })
    .await;
    // Nothing duplicated: one AppliedManifestWork per remaining ManifestWork of p3.
    let mine = mws.list(&by_policy(&p3)).await.expect("mws").items;
    let amws = Api::<AppliedManifestWork>::all(wec.clone())
        .list(&ListParams::default())
        .await
        .expect("amws")
        .items;
    for mw in &mine {
        let n = amws
            .iter()
            .filter(|a| a.spec.manifest_work_name == mw.name_any())
            .count();
        assert_eq!(n, 1, "one AppliedManifestWork for {}", mw.name_any());
    }
    assert_eq!(
        wec_cm(&wec, &id, "once").await.expect("once")["data"]["v"],
        json!("1")
    );

    // The WDS object goes: it leaves the WEC and the mailbox.
    cms.delete("once", &DeleteParams::default())
        .await
        .expect("delete once");
    until(
        "once removed from the WEC and its ManifestWork gone",
        60,
        || async {
            let gone = wec_cm(&wec, &id, "once").await.is_none();
            let left = mws.list(&by_policy(&p3)).await.expect("mws").items;
            let cm_works = left
                .iter()
                .filter(|m| m.spec.workload.manifests[0]["kind"] == "ConfigMap")
                .count();
            (gone && cm_works == 0).then_some(())
        },
    )
    .await;
    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .delete(&p3, &DeleteParams::default())
    .await
    .expect("delete p3");
    agent.abort();
    support::dynamic(&wds, "", "v1", "Namespace", None)
        .delete(&id, &DeleteParams::default())
        .await
        .expect("ns");
}

#[tokio::test]
async fn an_object_that_fails_to_update_stays_on_the_wec() {
    let _agent = AGENT.lock().await;
    support::start_controllers();
    let wds = support::client(WDS).await;
    let its = support::client(ITS).await;
    let wec = support::client(WEC).await;
    support::register(&its, WEC).await;
    let (a, w) = (its.clone(), wec.clone());
    let agent =
        tokio::spawn(async move { stellar::agent::run(a, w, support::agent_options(WEC)).await });
    let id = unique("af");
    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": id}}),
    )
    .await
    .expect("ns");
    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": id}, "data": {"v": "1"}}),
    )
    .await
    .expect("cm");
    policy(&wds, &id, &id, "c", false).await;
    let uid = until("c on the WEC", 60, || async {
        wec_cm(&wec, &id, "c").await?["metadata"]["uid"]
            .as_str()
            .map(str::to_owned)
    })
    .await;

    // Made immutable on the WEC: the agent's update of the new data is refused there.
    support::dynamic(&wec, "", "v1", "ConfigMap", Some(&id))
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"immutable": true})),
        )
        .await
        .expect("immutable on the WEC");
    support::dynamic(&wds, "", "v1", "ConfigMap", Some(&id))
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .expect("new data in the WDS");
    let works: Api<ManifestWork> = Api::namespaced(its.clone(), WEC);
    let sel = format!("transport.kubestellar.io/originOwnerReferenceBindingKey={id}");
    until(
        "the failed update reported on the ManifestWork",
        60,
        || async {
            let mws = works.list(&ListParams::default().labels(&sel)).await.ok()?;
            mws.items
                .iter()
                .flat_map(|mw| {
                    mw.status
                        .iter()
                        .flat_map(|s| s.resource_status.manifests.iter())
                })
                .any(|m| {
                    m.resource_meta.name == "c"
                        && m.conditions
                            .iter()
                            .any(|c| c.type_ == "Applied" && c.status == "False")
                })
                .then_some(())
        },
    )
    .await;
    // Still there: the same object, with its old data.
    let cm = wec_cm(&wec, &id, "c").await.expect("c still on the WEC");
    assert_eq!(cm["metadata"]["uid"].as_str(), Some(uid.as_str()));
    assert_eq!(cm["data"]["v"], "1");

    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .delete(&id, &DeleteParams::default())
    .await
    .expect("delete the policy");
    until("c gone from the WEC", 60, || async {
        wec_cm(&wec, &id, "c").await.is_none().then_some(())
    })
    .await;
    agent.abort();
}
