//! The cluster controller on the local control plane with kwok pods and the fake database
//! (FoundationDB cannot run here): a cluster is created to reconciled with exactly one
//! `configure new`, a second pass over a converged cluster writes nothing, a scale-up adds
//! groups with new IDs and issues no exclude, include or kill, and a scale-down
//! excludes before it removes, deletes no pod whose process still holds data, and includes
//! only after the recovery gate.
//!
//! The operator runs as its ServiceAccount under the hand-written RBAC of `deploy/fdb/rbac`.
//!
//! The simulator side: a background task derives the fake database's processes from the
//! pods (one process per running pod, as upstream's mock does) and records any pod that
//! disappeared while its process still held data.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fdb::admin::LockClient;
use fdb::cluster::Context;
use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Harness, create, storage_groups};

#[tokio::test]
async fn create_to_reconciled_then_scale_down_with_exclusion_before_removal() {
    let h = Harness::start("fdb-lifecycle").await;
    let name = "sample";
    h.simulate(name);
    let db = h.db(name);
    db.set_drain_reads(5);
    let cluster: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": name},
        "spec": {
            "version": "7.1.57",
            "faultDomain": {"key": "foundationdb.org/none"},
            "routing": {"useDNSInClusterFile": false},
            "processes": {"general": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1G"}}}}}},
        },
    }))
    .unwrap();
    h.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create");

    // 1. Created to reconciled: 16 pods (3 storage, 4 log, 9 stateless), 7 PVCs.
    let c = h.reconciled(name, Duration::from_secs(180)).await;
    let status = c.status.clone().unwrap();
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 16);
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(pvcs.items.len(), 7);
    assert_eq!(status.process_groups.len(), 16);
    let ids: BTreeSet<_> = status
        .process_groups
        .iter()
        .map(|g| g.process_group_id.clone())
        .collect();
    assert_eq!(ids.len(), 16, "stable, unique IDs");
    let configure_new: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("configure new"))
        .collect();
    assert_eq!(
        configure_new.len(),
        1,
        "configure new exactly once: {configure_new:?}"
    );
    assert!(
        configure_new[0].starts_with("configure new double ssd-2"),
        "{configure_new:?}"
    );
    let cs =
        fdb::crd::ConnectionString::parse(&status.connection_string).expect("connection string");
    assert_eq!(cs.coordinators.len(), 3);
    assert_eq!(cs.database_name, "sample");
    let cm = Api::<ConfigMap>::namespaced(h.client.clone(), &h.ns.name)
        .get("sample-config")
        .await
        .unwrap();
    assert_eq!(
        cm.data.as_ref().unwrap()["cluster-file"],
        status.connection_string
    );
    assert!(status.health.available);
    for condition in ["Ready", "DatabaseAvailable", "SpecValid"] {
        assert!(
            kit::conditions::is_true(&status.conditions, condition),
            "{condition}: {:?}",
            status.conditions
        );
    }

    // 2. A pass over the converged cluster makes no write.
    let (counting, counts) = testenv::counting_client().await;
    let quiet = Arc::new(Context::new(counting, Arc::new(h.clients.clone())));
    let live = h.clusters().get(name).await.unwrap();
    fdb::cluster::reconcile(Arc::new(live), quiet)
        .await
        .expect("pass");
    assert_eq!(
        counts.writes(),
        0,
        "requests by verb: {:?}",
        counts.by_verb()
    );

    // 3. Scale storage 3 → 2 once the database allows exclusions (recovery gate).
    let before = storage_groups(&c);
    db.advance(700);
    h.scale_storage(name, 2).await;
    // The group is excluded, verified, its resources deleted; the include waits for the
    // inclusion gate (the exclusion was a recovery).
    let excluded = testenv::eventually(
        "removed group excluded and gone",
        Duration::from_secs(240),
        || async {
            let c = h.clusters().get(name).await.ok()?;
            let g = c
                .status?
                .process_groups
                .into_iter()
                .find(|g| g.is_marked_for_removal() && g.exclusion_timestamp.is_some())?;
            let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
            pods.get_opt(&g.pod_name(name))
                .await
                .ok()?
                .is_none()
                .then_some(g)
        },
    )
    .await
    .unwrap();
    let id = excluded.process_group_id.to_string();
    assert!(
        !db.calls().iter().any(|c| c.starts_with("include")),
        "no include before the recovery gate: {:?}",
        db.calls()
    );
    db.advance(700);
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    let after = storage_groups(&c);
    assert_eq!(after.len(), 2);
    assert!(before.contains(&id) && !after.contains(&id));
    let calls = db.calls();
    let pos = |prefix: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(prefix) && c.contains(&id))
    };
    let (no_wait, blocking, include) = (
        pos("exclude no_wait").expect("exclude no_wait"),
        calls
            .iter()
            .position(|c| c == &format!("exclude locality_instance_id:{id}"))
            .expect("verifying exclude"),
        pos("include").expect("include"),
    );
    assert!(no_wait < blocking && blocking < include, "{calls:?}");
    assert!(db.exclusions().is_empty(), "included again");
    // Events (recorded as the operator's ServiceAccount) explain what it did.
    let events =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), &h.ns.name);
    let reasons: BTreeSet<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in [
        "GeneratedClusterFile",
        "ConfiguredNewDatabase",
        "ExcludedProcesses",
        "RemovingProcessGroup",
        "IncludedProcesses",
    ] {
        assert!(reasons.contains(reason), "{reason} in {reasons:?}");
    }
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}

#[tokio::test]
async fn a_scale_up_adds_groups_with_new_ids_and_excludes_or_kills_nothing() {
    let h = Harness::start("fdb-scale-up").await;
    let name = "grow";
    h.simulate(name);
    let db = h.db(name);
    let c = create(&h, name, json!({})).await;
    let all_before: BTreeSet<String> = support::groups(&c)
        .iter()
        .map(|g| g.process_group_id.to_string())
        .collect();
    let storage_before = storage_groups(&c);
    let calls = db.calls().len();
    h.scale_storage(name, 5).await;
    let c = h.reconciled(name, Duration::from_secs(180)).await;
    let storage_after = storage_groups(&c);
    assert_eq!(storage_after.len(), 5, "{storage_after:?}");
    assert!(
        storage_after.is_superset(&storage_before),
        "the old groups stay"
    );
    let added: Vec<&String> = storage_after.difference(&storage_before).collect();
    assert_eq!(added.len(), 2);
    for id in &added {
        assert!(!all_before.contains(*id), "{id} is a new ID");
        assert!(id.starts_with("storage-"), "{id}");
    }
    // Each new group has its pod and claim, and its process joined the database.
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(h.client.clone(), &h.ns.name);
    for id in &added {
        assert!(
            pods.get_opt(&format!("{name}-{id}"))
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            pvcs.get_opt(&format!("{name}-{id}-data"))
                .await
                .unwrap()
                .is_some()
        );
    }
    let running: BTreeSet<String> = db.processes().into_iter().map(|p| p.instance_id).collect();
    assert!(added.iter().all(|id| running.contains(*id)), "{running:?}");
    assert_eq!(
        pods.list(&ListParams::default()).await.unwrap().items.len(),
        18
    );
    // Growing needs no exclusion, inclusion or restart.
    let issued: Vec<String> = db.calls()[calls..]
        .iter()
        .filter(|c| {
            ["exclude", "include", "kill", "coordinators", "configure"]
                .iter()
                .any(|w| c.starts_with(w))
        })
        .cloned()
        .collect();
    assert!(
        issued.is_empty(),
        "nothing issued for a scale-up: {issued:?}"
    );
    assert!(support::ready(&c));
}

#[tokio::test]
async fn a_coordinator_is_removed_only_after_new_coordinators_and_the_lock_obeys_the_deny_list() {
    let h = Harness::start("fdb-coordinator").await;
    let name = "locked";
    h.simulate(name);
    let db = h.db(name);
    db.set_drain_reads(3);
    let c = create(
        &h,
        name,
        json!({"processGroupIDPrefix": "dc1", "lockOptions": {"disableLocks": false}}),
    )
    .await;
    let status = c.status.clone().unwrap();
    let old = fdb::crd::ConnectionString::parse(&status.connection_string).unwrap();
    let coordinator_ip = old.coordinators[0].split(':').next().unwrap().to_owned();
    let group = status
        .process_groups
        .iter()
        .find(|g| g.addresses.contains(&coordinator_ip))
        .expect("the coordinator's group")
        .clone();
    let id = group.process_group_id.to_string();

    // Another operator instance ("dc2") holds the lock: the removal waits for it.
    let b = db.lock_client("dc2", 3600);
    b.take_lock().await.unwrap();
    db.advance(700);
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"processGroupsToRemove": [id]}})),
        )
        .await
        .unwrap();
    testenv::eventually(
        "operator dc1 refused the lock",
        Duration::from_secs(240),
        || async {
            db.calls()
                .iter()
                .any(|c| c == "lock dc1: held by dc2")
                .then_some(())
        },
    )
    .await
    .unwrap();
    assert!(
        !db.calls().iter().any(|c| c.starts_with("exclude")),
        "nothing excluded without the lock: {:?}",
        db.calls()
    );

    // The replacement group reports its process first (a group of the class missing its
    // processes for under 5 minutes cancels the exclusion round; the coordinator change would
    // then go first and the exclusion wait for two minutes of recovery).
    testenv::eventually(
        "replacement reporting",
        Duration::from_secs(120),
        || async {
            let s = h.clusters().get(name).await.ok()?.status?;
            (s.process_groups.len() == 17
                && !s
                    .process_groups
                    .iter()
                    .any(|g| g.has_condition("MissingProcesses")))
            .then_some(())
        },
    )
    .await
    .unwrap();
    // Deny "dc2": operator dc1 takes dc2's unexpired lock over and goes on.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"lockOptions": {"denyList": [{"id": "dc2"}]}}})),
        )
        .await
        .unwrap();
    h.excluded_and_gone(name, &id, Duration::from_secs(240))
        .await;
    db.advance(700);
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    let status = c.status.unwrap();
    assert!(
        !status
            .process_groups
            .iter()
            .any(|g| g.process_group_id.as_str() == id)
    );
    assert_eq!(status.locks.deny_list, vec!["dc2"]);
    let new = fdb::crd::ConnectionString::parse(&status.connection_string).unwrap();
    assert_eq!(new.coordinators.len(), 3);
    assert!(!new.coordinators.contains(&old.coordinators[0]), "{new:?}");
    assert_ne!(new.generation_id, old.generation_id);

    let calls = db.calls();
    let at = |pred: &dyn Fn(&String) -> bool, what: &str| {
        calls
            .iter()
            .position(pred)
            .unwrap_or_else(|| panic!("no {what} in {calls:?}"))
    };
    let no_wait = at(
        &|c| c == &format!("exclude no_wait locality_instance_id:{id}"),
        "exclude no_wait",
    );
    let taken = at(&|c| c == "lock dc1: taken", "lock taken by a");
    let coordinators = at(&|c| c.starts_with("coordinators "), "coordinator change");
    let verified = at(
        &|c| c == &format!("exclude locality_instance_id:{id}"),
        "verifying exclude",
    );
    let include = at(&|c| c.starts_with("include ") && c.contains(&id), "include");
    assert!(taken < no_wait, "{calls:?}");
    // The coordinators change (ExcludeProcesses on excluding a coordinator, or ChangeCoordinators
    // because a group being removed may not coordinate) before the removal is verified.
    assert!(
        coordinators < verified && no_wait < verified && verified < include,
        "{calls:?}"
    );
    assert!(
        !calls[coordinators].contains(&old.coordinators[0]),
        "{calls:?}"
    );
    // dc1 released the lock once reconciled. (A denied instance is refused only while a lock
    // record exists: upstream writes a free lock before it looks at the deny list; the fake's
    // unit tests cover the refusal.)
    // The release follows the write of the reconciled status in the same step.
    testenv::eventually("lock released", Duration::from_secs(30), || async {
        db.lock_record().is_none().then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", db.lock_record()));
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}

#[tokio::test]
async fn an_unavailable_database_gets_nothing_destructive_and_the_status_says_so() {
    let h = Harness::start("fdb-unavailable").await;
    let name = "dark";
    h.simulate(name);
    let db = h.db(name);
    create(&h, name, json!({})).await;
    db.advance(700);
    db.set_available(false);
    let before = db.calls().len();
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"processCounts": {"storage": 2}}})),
        )
        .await
        .unwrap();
    let c = testenv::wait_for(
        &h.clusters(),
        name,
        Duration::from_secs(60),
        |c: &FoundationDBCluster| {
            let s = c.status.clone().unwrap_or_default();
            let generation = c.metadata.generation.unwrap_or(-1);
            !s.health.available
                && s.generations.database_unavailable == generation
                && s.generations.reconciled < generation
                && s.process_groups.iter().any(|g| g.is_marked_for_removal())
        },
    )
    .await
    .expect("status reports the unavailable database");
    let conditions = c.status.clone().unwrap().conditions;
    let available = kit::conditions::get(&conditions, "DatabaseAvailable").unwrap();
    assert_eq!(available.status, "False", "{conditions:?}");
    let ready = kit::conditions::get(&conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "DatabaseUnavailable"),
        "{conditions:?}"
    );
    let issued: Vec<String> = db.calls()[before..]
        .iter()
        .filter(|c| !c.starts_with("lock "))
        .cloned()
        .collect();
    assert!(
        issued.is_empty(),
        "nothing issued to an unavailable database: {issued:?}"
    );
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    for g in c.status.unwrap().process_groups {
        assert!(
            pods.get_opt(&g.pod_name(name)).await.unwrap().is_some(),
            "{} kept",
            g.process_group_id
        );
    }
    // Back online: the scale-down completes.
    db.set_available(true);
    testenv::eventually("exclusion issued", Duration::from_secs(60), || async {
        db.calls()
            .iter()
            .any(|c| c.starts_with("exclude no_wait"))
            .then_some(())
    })
    .await
    .unwrap();
    testenv::eventually("removed group gone", Duration::from_secs(240), || async {
        let c = h.clusters().get(name).await.ok()?;
        let s = c.status?;
        s.process_groups
            .iter()
            .any(|g| g.is_marked_for_removal() && g.exclusion_timestamp.is_some())
            .then_some(())
    })
    .await
    .unwrap();
    db.advance(700);
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    assert_eq!(storage_groups(&c).len(), 2);
}

#[tokio::test]
async fn a_spec_only_the_operator_can_judge_is_reported_and_nothing_is_created() {
    let h = Harness::start("fdb-invalid").await;
    let name = "redwood";
    h.simulate(name);
    // The CRD accepts the engine; only the operator knows 7.1 cannot run it (7.3+).
    let cluster: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBCluster",
        "metadata": {"name": name},
        "spec": {
            "version": "7.1.57",
            "faultDomain": {"key": "foundationdb.org/none"},
            "routing": {"useDNSInClusterFile": false},
            "databaseConfiguration": {"storage_engine": "ssd-redwood-1"},
        },
    }))
    .unwrap();
    h.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .expect("admitted");
    let message = h.spec_invalid(name).await;
    assert!(
        message.contains("ssd-redwood-1") && message.contains("7.1.57"),
        "{message}"
    );
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.items.is_empty(), "nothing created for an invalid spec");
    assert!(h.db(name).calls().is_empty(), "{:?}", h.db(name).calls());
    // The Event is published just after the status write seen above: waited for, not read once.
    let warned = |list: &[(String, String)]| {
        list.iter()
            .any(|(reason, type_)| reason == "InvalidSpec" && type_ == "Warning")
    };
    let seen = testenv::eventually(
        "a Warning Event InvalidSpec",
        Duration::from_secs(60),
        || {
            let h = &h;
            async move { Some(event_types(h).await).filter(|l| warned(l)) }
        },
    )
    .await;
    if let Err(e) = seen {
        panic!(
            "{e}: no Warning Event explains; Events (reason, type): {:?}",
            event_types(&h).await
        );
    }

    // Fixed: the cluster comes up.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"databaseConfiguration": {"storage_engine": "ssd-2"}}})),
        )
        .await
        .unwrap();
    let c = h.reconciled(name, Duration::from_secs(180)).await;
    let conditions = c.status.unwrap().conditions;
    assert!(
        kit::conditions::is_true(&conditions, "SpecValid"),
        "{conditions:?}"
    );
    assert!(
        kit::conditions::is_true(&conditions, "Ready"),
        "{conditions:?}"
    );
}

#[tokio::test]
async fn removals_go_one_fault_domain_at_a_time_with_the_wait_between() {
    let h = Harness::start_with("fdb-removal-pace", support::open_recovery_gates()).await;
    let name = "paced";
    h.simulate(name);
    // Each pod its own fault domain (foundationdb.org/none), removal mode Zone (the default):
    // two removed groups go one after the other, at least the wait apart.
    let wait = 5;
    let c = create(
        &h,
        name,
        json!({"processCounts": {"storage": 5},
               "automationOptions": {"waitBetweenRemovalsSeconds": wait}}),
    )
    .await;
    let before = storage_groups(&c);
    let zone_of: std::collections::BTreeMap<String, String> = support::groups(&c)
        .into_iter()
        .map(|g| (g.process_group_id.to_string(), g.fault_domain))
        .collect();
    h.scale_storage(name, 3).await;
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    let removed: Vec<String> = before.difference(&storage_groups(&c)).cloned().collect();
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert_ne!(
        zone_of[&removed[0]], zone_of[&removed[1]],
        "two fault domains: {zone_of:?}"
    );
    // When each group's resources were deleted: its RemovingProcessGroup Event.
    let list = h.events().await;
    let mut at: Vec<jiff::Timestamp> = removed
        .iter()
        .map(|id| {
            let note = format!("exclusion of {id} verified: deleting its resources");
            let e = list
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("RemovingProcessGroup")
                        && e.note.as_deref() == Some(note.as_str())
                })
                .unwrap_or_else(|| panic!("no RemovingProcessGroup Event for {id}"));
            e.event_time.as_ref().expect("eventTime").0
        })
        .collect();
    at.sort();
    let gap = at[1].duration_since(at[0]).as_secs_f64();
    // The wait counts from the first removal's ResourcesTerminating timestamp (whole seconds,
    // taken after its deletion).
    assert!(
        gap >= (wait - 1) as f64,
        "the second fault domain went {gap:.1}s after the first (wait {wait}s)"
    );
}

#[tokio::test]
async fn a_seeded_cluster_joins_its_database_without_configure_new_or_a_cluster_file() {
    let h = Harness::start_with("fdb-seed", support::open_recovery_gates()).await;
    let name = "joined";
    // An existing, configured database whose coordinators the new cluster's pods will
    // replace: it is reached by the seed (nothing in the cluster's status or config map).
    let seed = "olddb:seedgeneration1@127.1.250.1:4501,127.1.250.2:4501,127.1.250.3:4501";
    let db = h.db(name);
    db.set_connection_string(seed);
    let template: FoundationDBCluster = serde_json::from_value(json!({
        "metadata": {"name": name}, "spec": {"version": "7.1.57"},
    }))
    .unwrap();
    fdb::admin::AdminClient::configure_database(
        &db,
        &template.desired_database_configuration(),
        true,
    )
    .await
    .expect("the existing database is configured");
    let before = db.calls().len();
    h.simulate(name);
    let c = create(&h, name, json!({"seedConnectionString": seed})).await;
    let status = c.status.unwrap();
    assert!(status.configured);
    let calls: Vec<String> = db.calls()[before..].to_vec();
    assert!(
        !calls.iter().any(|c| c.starts_with("configure new")),
        "a seeded cluster never runs configure new: {calls:?}"
    );
    let cs = fdb::crd::ConnectionString::parse(&status.connection_string).unwrap();
    assert_eq!(
        cs.database_name, "olddb",
        "the seed's database, not a cluster file of its own: {cs:?}"
    );
    // The seed's coordinators run no process: after the missing-coordinator gate (open
    // here) the operator chose its own, in the same database.
    assert!(
        calls.iter().any(|c| c.starts_with("coordinators ")),
        "{calls:?}"
    );
    assert!(
        !cs.coordinators.iter().any(|a| a.starts_with("127.1.250.")),
        "{cs:?}"
    );
    let reasons: Vec<String> = event_types(&h).await.into_iter().map(|(r, _)| r).collect();
    assert!(
        !reasons
            .iter()
            .any(|r| r == "GeneratedClusterFile" || r == "ConfiguredNewDatabase"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn a_split_image_is_reported_invalid_and_nothing_changes() {
    let h = Harness::start("fdb-split").await;
    let name = "split";
    h.simulate(name);
    let db = h.db(name);
    create(&h, name, json!({})).await;
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    let uids = |list: Vec<Pod>| -> BTreeSet<String> {
        list.into_iter()
            .map(|p| format!("{}/{}", p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
            .collect()
    };
    let before = uids(pods.list(&ListParams::default()).await.unwrap().items);
    let calls = db.calls().len();
    // The CRD admits split (as upstream's); only the operator knows it cannot build it.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"imageType": "split"}})),
        )
        .await
        .expect("admitted");
    let message = h.spec_invalid(name).await;
    assert!(
        message.contains("imageType \"split\" is not supported")
            && message.contains("set imageType: unified"),
        "{message}"
    );
    let warned = testenv::eventually(
        "a Warning Event InvalidSpec",
        Duration::from_secs(60),
        || {
            let h = &h;
            async move {
                event_types(h)
                    .await
                    .iter()
                    .any(|(r, t)| r == "InvalidSpec" && t == "Warning")
                    .then_some(())
            }
        },
    )
    .await;
    assert!(warned.is_ok(), "{:?}", event_types(&h).await);
    assert_eq!(
        uids(pods.list(&ListParams::default()).await.unwrap().items),
        before,
        "no pod recreated or changed for an unsupported image type"
    );
    assert_eq!(db.calls()[calls..], [] as [String; 0], "nothing issued");
    // Back to unified: the cluster is valid and reconciled again, its pods still the same.
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"imageType": "unified"}})),
        )
        .await
        .unwrap();
    let c = h.reconciled(name, Duration::from_secs(120)).await;
    assert!(kit::conditions::is_true(
        &c.status.unwrap().conditions,
        "SpecValid"
    ));
    assert_eq!(
        uids(pods.list(&ListParams::default()).await.unwrap().items),
        before
    );
}

/// The namespace's Events as (reason, type).
async fn event_types(h: &Harness) -> Vec<(String, String)> {
    h.events()
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.type_.unwrap_or_default()))
        .collect()
}
