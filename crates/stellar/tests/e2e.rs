//! End to end over real separate planes (WDS, ITS, two WECs with kube-controller-manager,
//! scheduler and kwok): a Deployment selected by a BindingPolicy runs on both WECs, its real
//! status comes back into the WDS (multi-WEC, then singleton when one WEC is left), the
//! ITS carries ManifestWorks, WorkStatuses and the agents' reports, and deleting the policy
//! cleans every WEC and mailbox and clears the returned status.

mod support;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use stellar::api::WorkStatus;
use stellar::ocm::{AppliedManifestWork, ManifestWork};
use support::{ITS, WDS, WECS, create, unique, until};

async fn wec_deployment(wec: &str, ns: &str) -> Option<Value> {
    let c = support::client(wec).await;
    support::dynamic(&c, "apps", "v1", "Deployment", Some(ns))
        .get_opt("web")
        .await
        .expect("get")
        .map(|d| serde_json::to_value(d).expect("json"))
}

#[tokio::test]
async fn a_deployment_runs_on_both_wecs_and_its_status_comes_back() {
    support::start_controllers();
    support::start_agents();
    let wds = support::client(WDS).await;
    let its = support::client(ITS).await;
    let id = unique("e2e");

    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": id}}),
    )
    .await
    .expect("ns");
    create(
        &wds,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": id, "labels": {"app.kubernetes.io/name": id}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
    )
    .await
    .expect("deployment");
    create(&wds, json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "StatusCollector",
        "metadata": {"name": format!("{id}-sum")},
        "spec": {"filter": "returned.status != null",
                 "combinedFields": [{"name": "wecs", "type": "COUNT"},
                                    {"name": "available", "type": "SUM", "subject": "returned.status.availableReplicas"}],
                 "limit": 10}}))
        .await.expect("status collector");
    create(
        &wds,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": id},
        "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}, "matchExpressions": [{"key": "name", "operator": "In", "values": WECS}]}],
                 "downsync": [{"apiGroup": "", "resources": ["namespaces"], "objectNames": [id]},
                              {"objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": id}}],
                               "wantMultiWECReportedState": true,
                               "statusCollectors": [format!("{id}-sum"), format!("{id}-missing")]}]}}),
    )
    .await
    .expect("policy");

    // Delivered to both WECs, where kube-controller-manager and kwok run it for real.
    for wec in WECS {
        until(
            &format!("the Deployment available on {wec}"),
            120,
            || async {
                let d = wec_deployment(wec, &id).await?;
                (d["status"]["availableReplicas"] == json!(2)).then_some(())
            },
        )
        .await;
    }
    // The ITS: one ManifestWork per object per WEC, Applied by the agent; WorkStatuses with
    // upstream's shape; the WECs: AppliedManifestWorks owning what they applied.
    let mws = Api::<ManifestWork>::all(its.clone())
        .list(&ListParams::default().labels(&format!(
            "transport.kubestellar.io/originOwnerReferenceBindingKey={id}"
        )))
        .await
        .expect("mws")
        .items;
    assert_eq!(mws.len(), 4, "namespace and Deployment for each WEC");
    let wss = until(
        "WorkStatuses of the Deployment in both mailboxes",
        60,
        || async {
            let wss: Vec<WorkStatus> = Api::<WorkStatus>::all(its.clone())
                .list(&ListParams::default())
                .await
                .expect("ws")
                .items
                .into_iter()
                .filter(|w| {
                    w.spec.spec.source_ref.namespace == id && w.spec.spec.source_ref.name == "web"
                })
                .collect();
            let ready = wss.len() == 2
                && wss.iter().all(|w| {
                    w.status
                        .as_ref()
                        .is_some_and(|s| s.0["availableReplicas"] == json!(2))
                });
            ready.then_some(wss)
        },
    )
    .await;
    for ws in &wss {
        assert_eq!(
            ws.labels()
                .get("transport.kubestellar.io/originWdsName")
                .map(String::as_str),
            Some(WDS)
        );
        let owner = &ws.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ManifestWork", Some(true))
        );
        assert!(
            ws.name_any()
                .ends_with(&format!("-appsv1-deployment-{id}-web")),
            "{}",
            ws.name_any()
        );
        assert_eq!(ws.spec.spec.source_ref.kind, "Deployment");
    }
    until("the ManifestWorks Applied", 60, || async {
        let mws = Api::<ManifestWork>::all(its.clone())
            .list(&ListParams::default().labels(&format!(
                "transport.kubestellar.io/originOwnerReferenceBindingKey={id}"
            )))
            .await
            .expect("mws")
            .items;
        mws.iter()
            .all(|m| {
                m.finalizers().contains(
                    &"cluster.open-cluster-management.io/manifest-work-cleanup".to_string(),
                ) && m.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Applied" && c.status == "True")
                })
            })
            .then_some(())
    })
    .await;
    let wec1 = support::client(WECS[0]).await;
    let amws = Api::<AppliedManifestWork>::all(wec1.clone())
        .list(&ListParams::default())
        .await
        .expect("amws")
        .items;
    let dep_mw = mws
        .iter()
        .find(|m| {
            m.namespace().as_deref() == Some(WECS[0])
                && m.spec.workload.manifests[0]["kind"] == "Deployment"
        })
        .expect("mw");
    let amw = amws
        .iter()
        .find(|a| a.spec.manifest_work_name == dep_mw.name_any())
        .expect("AppliedManifestWork");
    let dep = wec_deployment(WECS[0], &id).await.expect("deployment");
    assert_eq!(
        dep["metadata"]["ownerReferences"][0]["uid"],
        json!(amw.uid().expect("uid"))
    );

    // Multi-WEC status back in the WDS.
    let deps = support::dynamic(&wds, "apps", "v1", "Deployment", Some(&id));
    until("the combined status in the WDS", 60, || async {
        let d = deps.get("web").await.expect("get");
        (d.data["status"]["availableReplicas"] == json!(2)
            && d.labels()
                .get("managed-by.kubestellar.io/multiwecstatus")
                .map(String::as_str)
                == Some("true"))
        .then_some(())
    })
    .await;

    // CombinedStatus from the StatusCollector; the missing one is reported on the Binding.
    let dep_uid = deps.get("web").await.expect("get").uid().expect("uid");
    let policy_uid = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .get(&id)
    .await
    .expect("policy")
    .uid()
    .expect("uid");
    let css = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "CombinedStatus",
        Some(&id),
    );
    let cs_name = format!("{dep_uid}.{policy_uid}");
    let combined = |wecs: &'static str, available: &'static str| {
        let css = css.clone();
        let cs_name = cs_name.clone();
        async move {
            let cs = css.get_opt(&cs_name).await.expect("get")?;
            let cols = &cs.data["results"][0]["rows"][0]["columns"];
            (cols[0]["float"] == json!(wecs) && cols[1]["float"] == json!(available)).then_some(cs)
        }
    };
    let cs = until("the CombinedStatus over both WECs", 60, || {
        combined("2", "4")
    })
    .await;
    assert_eq!(
        cs.data["results"][0]["columnNames"],
        json!(["wecs", "available"])
    );
    assert_eq!(
        cs.labels().get("status.kubestellar.io/binding-policy"),
        Some(&id)
    );
    assert_eq!(cs.owner_references()[0].uid, dep_uid);
    until("the missing StatusCollector reported", 30, || async {
        let b = Api::<stellar::api::Binding>::all(wds.clone())
            .get(&id)
            .await
            .expect("binding");
        b.status?
            .conditions
            .iter()
            .find(|c| {
                c.type_ == "StatusCollectorsAvailable"
                    && c.status == "False"
                    && c.message == format!("Missing StatusCollector(s) [{id}-missing]")
            })
            .map(|_| ())
    })
    .await;

    // A WDS change reaches both WECs.
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale");
    for wec in WECS {
        until(&format!("3 replicas available on {wec}"), 120, || async {
            let d = wec_deployment(wec, &id).await?;
            (d["status"]["availableReplicas"] == json!(3)).then_some(())
        })
        .await;
    }

    // One WEC left: it leaves wec2, and its status returns as a singleton.
    let policies = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    );
    policies
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"clusterSelectors": [{"matchLabels": {"name": WECS[0]}}]}}),
            ),
        )
        .await
        .expect("retarget");
    until("the Deployment to leave wec2", 60, || async {
        wec_deployment(WECS[1], &id).await.is_none().then_some(())
    })
    .await;
    until("the singleton status in the WDS", 60, || async {
        let d = deps.get("web").await.expect("get");
        (d.data["status"]["availableReplicas"] == json!(3)
            && d.labels()
                .get("managed-by.kubestellar.io/singletonstatus")
                .map(String::as_str)
                == Some("true")
            && !d
                .labels()
                .contains_key("managed-by.kubestellar.io/multiwecstatus"))
        .then_some(())
    })
    .await;

    until("the CombinedStatus over one WEC", 60, || combined("1", "3")).await;

    // The policy goes: the WEC copy, the mailboxes, the CombinedStatus and the returned
    // status go too.
    policies
        .delete(&id, &DeleteParams::default())
        .await
        .expect("delete policy");
    until("the Deployment to leave wec1", 60, || async {
        wec_deployment(WECS[0], &id).await.is_none().then_some(())
    })
    .await;
    until("the mailboxes to empty", 60, || async {
        let left = Api::<ManifestWork>::all(its.clone())
            .list(&ListParams::default().labels(&format!(
                "transport.kubestellar.io/originOwnerReferenceBindingKey={id}"
            )))
            .await
            .expect("mws")
            .items;
        left.is_empty().then_some(())
    })
    .await;
    until("the returned status cleared", 60, || async {
        let d = deps.get("web").await.expect("get");
        (d.data["status"] == json!({})
            && !d
                .labels()
                .contains_key("managed-by.kubestellar.io/singletonstatus"))
        .then_some(())
    })
    .await;
    until("the CombinedStatus to go", 60, || async {
        css.get_opt(&cs_name)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "StatusCollector",
        None,
    )
    .delete(&format!("{id}-sum"), &DeleteParams::default())
    .await
    .expect("collector");
    support::dynamic(&wds, "", "v1", "Namespace", None)
        .delete(&id, &DeleteParams::default())
        .await
        .expect("ns");
}

#[tokio::test]
async fn singleton_status_counts_only_qualified_wecs_and_clears() {
    support::start_controllers();
    support::start_agents();
    let wds = support::client(WDS).await;
    let id = unique("single");
    create(
        &wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": id}}),
    )
    .await
    .expect("ns");
    create(
        &wds,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": id, "labels": {"app.kubernetes.io/name": id}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
    )
    .await
    .expect("deployment");
    let clauses = |singleton: bool| {
        json!([{"apiGroup": "", "resources": ["namespaces"], "objectNames": [id]},
               {"objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": id}}],
                "wantSingletonReportedState": singleton}])
    };
    // Everywhere without a status wish, and to wec1 only with singleton return: one
    // qualified WEC, so its status comes back (upstream issue #3478).
    let wide = format!("{id}-wide");
    let one = format!("{id}-one");
    create(&wds, json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": wide},
        "spec": {"clusterSelectors": [{"matchExpressions": [{"key": "name", "operator": "In", "values": WECS}]}],
                 "downsync": clauses(false)}}))
    .await
    .expect("wide policy");
    create(&wds, json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": one},
        "spec": {"clusterSelectors": [{"matchLabels": {"name": WECS[0]}}], "downsync": clauses(true)}}))
    .await
    .expect("singleton policy");
    for wec in WECS {
        until(
            &format!("the Deployment available on {wec}"),
            120,
            || async {
                let d = wec_deployment(wec, &id).await?;
                (d["status"]["availableReplicas"] == json!(1)).then_some(())
            },
        )
        .await;
    }
    let deps = support::dynamic(&wds, "apps", "v1", "Deployment", Some(&id));
    until("the singleton status from wec1", 60, || async {
        let d = deps.get("web").await.expect("get");
        (d.data["status"]["availableReplicas"] == json!(1)
            && d.labels()
                .get("managed-by.kubestellar.io/singletonstatus")
                .map(String::as_str)
                == Some("true"))
        .then_some(())
    })
    .await;
    let policies = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    );
    let p = policies.get(&one).await.expect("policy");
    assert!(
        p.data["status"]["errors"]
            .as_array()
            .is_none_or(|e| e.is_empty()),
        "{}",
        p.data["status"]
    );

    // The singleton policy selects no WEC any more: status cleared, label gone, and the
    // policy says why.
    policies
        .patch(
            &one,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"clusterSelectors": [{"matchLabels": {"name": "none"}}]}}),
            ),
        )
        .await
        .expect("retarget");
    until("the singleton status cleared", 60, || async {
        let d = deps.get("web").await.expect("get");
        (d.data["status"] == json!({})
            && !d
                .labels()
                .contains_key("managed-by.kubestellar.io/singletonstatus"))
        .then_some(())
    })
    .await;
    until("the policy's error", 30, || async {
        let p = policies.get(&one).await.expect("policy");
        p.data["status"]["errors"]
            .as_array()?
            .iter()
            .any(|e| {
                e.as_str().is_some_and(|e| {
                    e.contains("wrong number of associated WECs") && e.contains(": 0 WECs")
                })
            })
            .then_some(())
    })
    .await;
    for p in [&wide, &one] {
        policies
            .delete(p, &DeleteParams::default())
            .await
            .expect("delete policy");
    }
    for wec in WECS {
        until(&format!("the Deployment to leave {wec}"), 60, || async {
            wec_deployment(wec, &id).await.is_none().then_some(())
        })
        .await;
    }
    support::dynamic(&wds, "", "v1", "Namespace", None)
        .delete(&id, &DeleteParams::default())
        .await
        .expect("ns");
}
