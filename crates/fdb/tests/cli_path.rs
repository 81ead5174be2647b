//! The operator's real CLI path end to end: the FoundationDBCluster controller with the real
//! admin and lock clients (`CliClients`, not the in-process fake clients), which run
//! `$FDB_BINARY_DIR/7.1/fdbcli` as child processes; those are symlinks to the `fdb-sim`
//! binary, whose front end parses the arguments, reads the temporary cluster file and asks
//! the `fdb-sim` server (on a unix socket in that directory) to apply the commands to the fake
//! database; the client parses what the front end prints (`status json`, `get`, exclusion
//! output, exit codes) exactly as it would parse fdbcli's.
//!
//! Shown: a cluster created to reconciled with one `configure new` carrying exactly the
//! string the client sent and its lock deny list written and read back through fdbcli, a pass
//! over the converged cluster that writes nothing, and a scale-down that waits for another
//! instance's lock to expire, excludes (no_wait, then the blocking check) before the pod goes,
//! includes only after the recovery gate, with no pod deleted while its process held data, and
//! releases the lock once reconciled.
//! The pods and their monitors are simulated as in `cluster_lifecycle.rs` (support).

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fdb::cluster::{Context, Options};
use fdb::crd::{ConnectionString, FoundationDBCluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Harness, storage_groups};

const CONFIGURE_NEW: &str = "configure new double ssd-2 usable_regions=1 logs=3 resolvers=1 log_routers=-1 remote_logs=-1 proxies=3 regions=[]";

#[tokio::test]
async fn the_cli_path_creates_configures_and_scales_down_with_exclusion_first() {
    let h = Harness::start_cli("fdb-cli-path", Options::default()).await;
    let sim = h.sim.as_ref().expect("the simulator");
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
            "processGroupIDPrefix": "dc1",
            "lockOptions": {"disableLocks": false, "denyList": [{"id": "dc9"}]},
        },
    }))
    .unwrap();
    h.clusters()
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create");

    // 1. Created to reconciled through fdbcli: one `configure new`, exactly as sent.
    let c = h.reconciled(name, Duration::from_secs(240)).await;
    let status = c.status.clone().unwrap();
    let configure_new: Vec<String> = db
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("configure new"))
        .collect();
    assert_eq!(configure_new, [CONFIGURE_NEW], "{:?}", db.calls());
    let databases = sim.registry.databases();
    assert_eq!(databases.len(), 1, "one database, reached by cluster file");
    assert_eq!(databases[0].1.connection_string(), status.connection_string);
    assert_eq!(
        ConnectionString::parse(&status.connection_string)
            .unwrap()
            .coordinators
            .len(),
        3
    );
    assert!(status.health.available, "status json read through fdbcli");
    // The deny list was written with fdbcli `set`s and read back with `getrange`.
    use fdb::admin::LockClient;
    let other = db.lock_client("dc2", 30);
    assert_eq!(other.get_deny_list().await.unwrap(), ["dc9"]);
    assert_eq!(status.locks.deny_list, ["dc9"]);
    assert_eq!(status.process_groups.len(), 16);
    for condition in ["Ready", "DatabaseAvailable", "SpecValid"] {
        assert!(
            kit::conditions::is_true(&status.conditions, condition),
            "{condition}: {:?}",
            status.conditions
        );
    }

    // 2. A pass over the converged cluster, through the CLI, makes no write.
    let (counting, counts) = testenv::counting_client().await;
    let quiet = Arc::new(Context::new(counting, h.database_clients()));
    let live = h.clusters().get(name).await.unwrap();
    fdb::cluster::reconcile(Arc::new(live), quiet)
        .await
        .expect("pass");
    assert_eq!(counts.writes(), 0, "by verb: {:?}", counts.by_verb());

    // 3. Scale storage 3 → 2 once the recovery gate allows exclusions, while another
    // instance ("dc2") holds the lock for 30 s of the database's clock: the operator's lock
    // client reads that record through fdbcli and excludes only once it has expired.
    // The real lock client judges expiry on the operator's (wall) clock, as against a real
    // database; the fake's clock runs `ahead` seconds in front of it once advanced, so the
    // lock is taken first and the times compared on the wall clock.
    let before = storage_groups(&c);
    other.take_lock().await.unwrap();
    let held_until = db.lock_record().expect("dc2's lock").end;
    let ahead = 700;
    db.advance(ahead);
    h.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"processCounts": {"storage": 2}}})),
        )
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(h.client.clone(), &h.ns.name);
    let excluded = testenv::eventually(
        "removed group excluded and its pod gone",
        Duration::from_secs(240),
        || async {
            let c = h.clusters().get(name).await.ok()?;
            let g = c
                .status?
                .process_groups
                .into_iter()
                .find(|g| g.is_marked_for_removal() && g.exclusion_timestamp.is_some())?;
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
    let first_exclude = db
        .timed_calls()
        .into_iter()
        .find(|(_, c)| c.starts_with("exclude"))
        .expect("an exclude");
    assert!(
        first_exclude.0 - ahead > held_until,
        "excluded at {} (wall clock) while dc2 held the lock until {held_until}",
        first_exclude.0 - ahead
    );
    assert!(
        !db.calls().iter().any(|c| c.starts_with("include")),
        "no include before the inclusion gate: {:?}",
        db.calls()
    );
    db.advance(700);
    let c = h.removals_done(name, Duration::from_secs(240)).await;
    let after = storage_groups(&c);
    assert_eq!(after.len(), 2);
    assert!(before.contains(&id) && !after.contains(&id));
    let calls = db.calls();
    let position = |pred: &dyn Fn(&String) -> bool| calls.iter().position(pred);
    let no_wait = position(&|c| c.starts_with("exclude no_wait") && c.contains(&id))
        .expect("exclude no_wait");
    let blocking = position(&|c| *c == format!("exclude locality_instance_id:{id}"))
        .expect("the blocking exclude");
    let include = position(&|c| c.starts_with("include")).expect("include");
    assert!(no_wait < blocking && blocking < include, "{calls:?}");
    assert!(db.exclusions().is_empty(), "included again");
    let left: BTreeSet<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(!left.contains(&excluded.pod_name(name)));
    // Reconciled, the operator released its lock (a `clear` through fdbcli).
    testenv::eventually("lock released", Duration::from_secs(60), || async {
        db.lock_record().is_none().then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", db.lock_record()));
    let violations = h.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
}
