//! `kubectl-fdb` against the local control plane, run in-process through `main_with` with
//! `--kubeconfig` (one namespace per test).
//!
//! Shown, without an operator (the cluster's status and pods written directly): `analyze`
//! reports a condition and fails, reports a healthy cluster and succeeds, and refuses an
//! unknown condition; `get configuration` prints the `configure` arguments (with
//! `--fail-over --update` it swaps the main data centers' priorities in the spec after a
//! confirmed diff); `remove process-groups` asks first (no leaves the spec alone), adds by pod
//! name, and with
//! `--remove-all-failed -e=false` to the list without exclusion; `cordon` adds the groups on a
//! node; `version` reads the operator Deployment's tag; a missing cluster is named; `buggify
//! no-schedule`/`crash-loop` add, clear and clean their lists and `empty-monitor-conf` sets
//! and unsets its flag; `update connection-string` checks and sets the status' connection
//! string, and `fix-coordinator-ips` maps each coordinator to its group's pod IP (dry run, then
//! for real: the pods' cluster files cannot be written on kwok pods, reported, and the status
//! takes the new string); `exec` goes to a running pod's main container.
//! With the operator on the `fdb-sim` CLI path: `restart` kills the chosen group's process
//! through fdbcli, `analyze --analyze-status` reads the status through fdbcli, and `get
//! exclusion-status` follows a removal's exclusion until it is done.
//! Across clusters (no `-c`): `remove process-groups`, `cordon`, `buggify no-schedule` and
//! `restart` take each named pod's cluster from its cluster label, and refuse class or
//! condition selection and unknown pods; `deprecation` diffs specs. With a stand-in kubectl
//! answering for the pods: `analyze --analyze-status` reports process messages and restarts
//! those processes with `--auto-fix`; `recover-multi-region-cluster` asks twice, refuses an
//! available database, and otherwise copies the coordination state, publishes the new
//! connection string, restarts every pod and forces the recovery, leaving the cluster
//! reconciled again.

mod support;

use std::time::Duration;

use fdb::crd::FoundationDBCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::TestNamespace;

/// What one run printed: (result, stdout, stderr).
type Ran = (Result<(), String>, String, String);

/// Runs `kubectl fdb -n <ns> ARGS…` with `input` as the answers to confirmations.
async fn plugin<S: AsRef<str>>(ns: &str, input: &str, args: &[S]) -> Ran {
    let kubeconfig = testenv::kubeconfig_path().display().to_string();
    let mut argv: Vec<String> = vec!["--kubeconfig".into(), kubeconfig, "-n".into(), ns.into()];
    argv.extend(args.iter().map(|s| s.as_ref().to_owned()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut input = input.as_bytes();
    let mut io = fdb::plugin::Io {
        out: &mut out,
        err: &mut err,
        input: &mut input,
    };
    let result = fdb::plugin::main_with(argv, &mut io)
        .await
        .map_err(|e| e.to_string());
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8 output");
    (result, text(out), text(err))
}

fn pod(cluster: &str, name: &str, id: &str, class: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "foundationdb.org/fdb-cluster-name": cluster,
            "foundationdb.org/fdb-process-group-id": id,
            "foundationdb.org/fdb-process-class": class}},
        "spec": {"nodeName": node, "containers": [
            {"name": "foundationdb", "image": "foundationdb/foundationdb:7.1.57"}]},
    }))
    .expect("pod")
}

/// The CRDs and a namespace of the test's own.
async fn namespace(prefix: &str) -> (kube::Client, TestNamespace) {
    let client = testenv::client().await;
    for crd in fdb::crd::crds() {
        testenv::install_crd(&client, crd).await.expect("CRD");
    }
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}

/// Creates cluster `c1` (no status, no operator) and the pods of its groups `storage-1`,
/// `storage-2` and `log-1`.
async fn cluster_c1_with_pods(client: &kube::Client, n: &str) -> FoundationDBCluster {
    let c: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
        "metadata": {"name": "c1"}, "spec": {"version": "7.1.57"},
    }))
    .expect("cluster");
    let created = Api::<FoundationDBCluster>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &c)
        .await
        .expect("create");
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    for p in [
        pod("c1", "c1-storage-1", "storage-1", "storage", "kwok-node-0"),
        pod("c1", "c1-storage-2", "storage-2", "storage", "kwok-node-1"),
        pod("c1", "c1-log-1", "log-1", "log", "kwok-node-1"),
    ] {
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    created
}

fn removals(c: &FoundationDBCluster) -> (Vec<String>, Vec<String>) {
    let ids = |v: &[fdb::crd::ProcessGroupId]| v.iter().map(|i| i.0.clone()).collect();
    (
        ids(&c.spec.process_groups_to_remove),
        ids(&c.spec.process_groups_to_remove_without_exclusion),
    )
}

#[tokio::test]
async fn analyze_configuration_removals_cordon_and_version() {
    let (client, ns) = namespace("fdb-plugin").await;
    let n = ns.name.as_str();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(client.clone(), n);
    let created = cluster_c1_with_pods(&client, n).await;
    let status = |failing: bool, generation: Option<i64>| {
        let conditions = if failing {
            json!([{"type": "MissingProcesses", "timestamp": 1_700_000_000}])
        } else {
            json!([])
        };
        json!({"status": {
            "health": {"available": true, "fullReplication": true},
            "generations": {"reconciled": generation},
            "processGroups": [
                {"processGroupID": "storage-1", "processClass": "storage"},
                {"processGroupID": "storage-2", "processClass": "storage",
                 "processGroupConditions": conditions},
                {"processGroupID": "log-1", "processClass": "log"},
                // Groups without pods, for the fault-domain summary.
                {"processGroupID": "storage-3", "processClass": "storage", "faultDomain": "zone-a"},
                {"processGroupID": "storage-4", "processClass": "storage", "faultDomain": "zone-b"},
                {"processGroupID": "storage-5", "processClass": "storage", "faultDomain": "zone-c"},
            ],
        }})
    };
    clusters
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(status(true, created.metadata.generation)),
        )
        .await
        .expect("status");
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    testenv::eventually("kwok runs the pods", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .then_some(())
        }
    })
    .await
    .expect("pods running");

    // analyze: the condition is an issue.
    let (r, out, err) = plugin(n, "", &["analyze", "c1"]).await;
    assert_eq!(
        r,
        Err("found issues for cluster c1. Please check them".into()),
        "{out}{err}"
    );
    assert!(out.starts_with(&format!(
        "Checking cluster: {n}/c1\n✔ Cluster is available\n"
    )));
    assert!(
        err.contains(
            "✖ ProcessGroup: storage-2 has the following condition: MissingProcesses since 2023-11-14T22:13:20Z"
        ),
        "{err}"
    );
    let (r, ..) = plugin(n, "", &["analyze", "c1", "--ignore-condition", "Bogus"]).await;
    assert_eq!(r, Err("unknown condition: Bogus".into()));

    // get configuration.
    let (r, out, _) = plugin(n, "", &["get", "configuration", "c1"]).await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        "double ssd-2 usable_regions=1 logs=3 resolvers=1 log_routers=-1 remote_logs=-1 proxies=3 regions=[]\n"
    );

    // get configuration --update: nothing to change without --fail-over; with it, the
    // priorities of the two main data centers are swapped in the spec once confirmed.
    let (r, _, err) = plugin(n, "", &["get", "configuration", "--update", "c1"]).await;
    assert_eq!(r, Ok(()));
    assert!(err.contains("already as asked"), "{err}");
    let regions = json!({"spec": {"databaseConfiguration": {"usable_regions": 2, "regions": [
        {"datacenters": [{"id": "dc1", "priority": 1}]},
        {"datacenters": [{"id": "dc2", "priority": 0}]},
    ]}}});
    clusters
        .patch("c1", &PatchParams::default(), &Patch::Merge(&regions))
        .await
        .unwrap();
    let priorities = |c: &FoundationDBCluster| -> Vec<(String, i64)> {
        c.spec
            .database_configuration
            .regions
            .iter()
            .flat_map(|r| r.data_centers.iter().map(|d| (d.id.clone(), d.priority)))
            .collect()
    };
    let update = ["get", "configuration", "--fail-over", "--update", "c1"];
    let (r, out, _) = plugin(n, "n\n", &update).await;
    assert_eq!(r, Err("user aborted the change".into()));
    assert!(
        out.starts_with("The following changes will be made:"),
        "{out}"
    );
    assert!(out.contains("- ") && out.contains("+ "), "a diff: {out}");
    let c = clusters.get("c1").await.unwrap();
    assert_eq!(priorities(&c), [("dc1".into(), 1), ("dc2".into(), 0)]);
    let (r, ..) = plugin(n, "y\n", &update).await;
    assert_eq!(r, Ok(()));
    let c = clusters.get("c1").await.unwrap();
    assert_eq!(priorities(&c), [("dc1".into(), 0), ("dc2".into(), 1)]);
    assert_eq!(
        c.spec.database_configuration.usable_regions, 2,
        "the rest kept"
    );
    let back =
        json!({"spec": {"databaseConfiguration": {"usable_regions": null, "regions": null}}});
    clusters
        .patch("c1", &PatchParams::default(), &Patch::Merge(&back))
        .await
        .unwrap();

    // remove process-groups: asked first; "n" changes nothing, "y" adds the pod's group.
    let remove = ["remove", "process-groups", "-c", "c1", "c1-storage-1"];
    let (r, out, _) = plugin(n, "n\n", &remove).await;
    assert_eq!(r, Err("user aborted the removal".into()));
    assert!(out.contains("Remove [storage-1] from cluster"), "{out}");
    assert_eq!(
        removals(&clusters.get("c1").await.unwrap()),
        (vec![], vec![])
    );
    let (r, ..) = plugin(n, "maybe\ny\n", &remove).await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        removals(&clusters.get("c1").await.unwrap()),
        (vec!["storage-1".into()], vec![])
    );
    let (r, ..) = plugin(
        n,
        "",
        &[
            "--wait=false",
            "remove",
            "process-groups",
            "-c",
            "c1",
            "--remove-all-failed",
            "-e=false",
        ],
    )
    .await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        removals(&clusters.get("c1").await.unwrap()),
        (vec!["storage-1".into()], vec!["storage-2".into()])
    );

    // cordon: the groups with a pod on kwok-node-1 (storage-2 is new on this list).
    let (r, out, _) = plugin(n, "", &["-w=false", "cordon", "-c", "c1", "kwok-node-1"]).await;
    assert_eq!(r, Ok(()), "{out}");
    assert!(
        out.contains("Removed: 2 pods from node: kwok-node-1"),
        "{out}"
    );
    let (with, _) = removals(&clusters.get("c1").await.unwrap());
    assert_eq!(with, ["storage-1", "log-1", "storage-2"]);

    // A healthy cluster passes analyze (the groups marked for removal are counted).
    let now = clusters.get("c1").await.unwrap().metadata.generation;
    clusters
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(status(false, now)),
        )
        .await
        .expect("status");
    let (r, out, err) = plugin(n, "", &["analyze", "c1"]).await;
    assert_eq!(r, Ok(()), "{out}{err}");
    assert!(
        out.contains("✔ Pods are all running and available\nFault Domain Summary for cluster:\n✔ storage: Total: 3 fault domains, 3 process groups\n"),
        "{out}"
    );

    // version: the operator Deployment's tag.
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "fdb-kubernetes-operator-controller-manager"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "op"}},
            "template": {"metadata": {"labels": {"app": "op"}}, "spec": {"containers": [
                {"name": "manager", "image": "foundationdb/fdb-kubernetes-operator:v2.3.0"}]}}},
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    let (r, out, _) = plugin(n, "", &["version"]).await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        format!(
            "foundationdb-operator: v2.3.0\nkubectl-fdb: {}\n",
            env!("CARGO_PKG_VERSION")
        )
    );

    let (r, ..) = plugin(n, "", &["get", "configuration", "nope"]).await;
    assert_eq!(
        r,
        Err(format!(
            "foundationdbcluster \"nope\" not found in namespace \"{n}\""
        ))
    );
}

#[tokio::test]
async fn buggify_edits_the_lists_and_the_monitor_conf_flag() {
    let (client, ns) = namespace("fdb-buggify").await;
    let n = ns.name.as_str();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(client.clone(), n);
    cluster_c1_with_pods(&client, n).await;
    let groups = json!({"status": {"processGroups": [
        {"processGroupID": "storage-1", "processClass": "storage"},
        {"processGroupID": "storage-2", "processClass": "storage"},
        {"processGroupID": "log-1", "processClass": "log"},
    ]}});
    clusters
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(groups))
        .await
        .expect("status");
    let buggify = || async { clusters.get("c1").await.expect("cluster").spec.buggify };
    let ids = |v: &[fdb::crd::ProcessGroupId]| v.iter().map(|i| i.0.clone()).collect::<Vec<_>>();

    // no-schedule: "no" leaves the spec alone; add by pod name, by ID, clear one, clean.
    let (r, out, _) = plugin(
        n,
        "n\n",
        &["buggify", "no-schedule", "-c", "c1", "c1-storage-1"],
    )
    .await;
    assert_eq!(r, Err("user aborted the removal".into()));
    assert!(
        out.contains(&format!(
            "Adding [storage-1] from no-schedule from cluster {n}/c1 [y/n]: "
        )),
        "{out}"
    );
    assert!(buggify().await.no_schedule.is_empty());
    let (r, out, err) = plugin(
        n,
        "y\n",
        &["buggify", "no-schedule", "-c", "c1", "c1-storage-1"],
    )
    .await;
    assert_eq!(r, Ok(()), "{out}{err}");
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "buggify",
            "no-schedule",
            "-c",
            "c1",
            "--use-process-group-id",
            "log-1",
            "storage-1",
        ],
    )
    .await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        ids(&buggify().await.no_schedule),
        ["storage-1", "log-1"],
        "in order, no duplicate"
    );
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "buggify",
            "no-schedule",
            "--clear",
            "-c",
            "c1",
            "c1-storage-1",
        ],
    )
    .await;
    assert_eq!(r, Ok(()));
    assert_eq!(ids(&buggify().await.no_schedule), ["log-1"]);
    let (r, out, _) = plugin(
        n,
        "",
        &["-w=false", "buggify", "no-schedule", "--clean", "-c", "c1"],
    )
    .await;
    assert_eq!(r, Ok(()));
    assert_eq!(out, "foundationdbcluster/c1: no-schedule list: []\n");
    assert!(buggify().await.no_schedule.is_empty());
    let (r, ..) = plugin(n, "", &["-w=false", "buggify", "no-schedule", "-c", "c1"]).await;
    assert_eq!(r, Err("please provide at least one Pod".into()));

    // crash-loop: per container, the entry kept (empty) after --clean.
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "buggify",
            "crash-loop",
            "-c",
            "c1",
            "c1-storage-2",
        ],
    )
    .await;
    assert_eq!(r, Ok(()));
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "buggify",
            "crash-loop",
            "-c",
            "c1",
            "--container-name",
            "foundationdb-kubernetes-sidecar",
            "--process-class",
            "storage",
        ],
    )
    .await;
    assert_eq!(r, Ok(()));
    let b = buggify().await;
    let entries: Vec<(String, Vec<String>)> = b
        .crash_loop_containers
        .iter()
        .map(|e| (e.container_name.clone(), ids(&e.targets)))
        .collect();
    assert_eq!(
        entries,
        [
            ("foundationdb".to_owned(), vec!["storage-2".to_owned()]),
            (
                "foundationdb-kubernetes-sidecar".to_owned(),
                vec!["storage-1".to_owned(), "storage-2".to_owned()]
            ),
        ]
    );
    let (r, ..) = plugin(
        n,
        "",
        &["-w=false", "buggify", "crash-loop", "--clean", "-c", "c1"],
    )
    .await;
    assert_eq!(r, Ok(()));
    let b = buggify().await;
    assert_eq!(b.crash_loop_containers[0].container_name, "foundationdb");
    assert!(b.crash_loop_containers[0].targets.is_empty());
    assert_eq!(
        b.crash_loop_containers[1].targets.len(),
        2,
        "other containers untouched"
    );

    // empty-monitor-conf: set, refused when already set, unset.
    let (r, out, _) = plugin(n, "y\n", &["buggify", "empty-monitor-conf", "-c", "c1"]).await;
    assert_eq!(r, Ok(()), "{out}");
    assert!(
        out.starts_with(&format!(
            "Setting empty-monitor-conf to true for cluster {n}/c1 [y/n]: "
        )),
        "{out}"
    );
    assert!(buggify().await.empty_monitor_conf);
    let (r, ..) = plugin(
        n,
        "",
        &["-w=false", "buggify", "empty-monitor-conf", "-c", "c1"],
    )
    .await;
    assert_eq!(r, Err("empty-monitor-conf is already set to true".into()));
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "buggify",
            "empty-monitor-conf",
            "-c",
            "c1",
            "--set-value=false",
        ],
    )
    .await;
    assert_eq!(r, Ok(()));
    assert!(!buggify().await.empty_monitor_conf);
    let (r, ..) = plugin(
        n,
        "",
        &["-w=false", "buggify", "empty-monitor-conf", "-c", "missing"],
    )
    .await;
    assert!(r.as_ref().is_err_and(|e| e.contains("missing")), "{r:?}");
}

#[tokio::test]
async fn update_connection_string_fix_coordinator_ips_and_exec() {
    let (client, ns) = namespace("fdb-coordinators").await;
    let n = ns.name.as_str();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(client.clone(), n);
    cluster_c1_with_pods(&client, n).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let ip = |name: &'static str| {
        let pods = pods.clone();
        async move {
            testenv::eventually("the pod's IP", Duration::from_secs(60), || async {
                let p = pods.get(name).await.ok()?;
                p.status?.pod_ip.filter(|ip| !ip.is_empty())
            })
            .await
            .expect("pod IP")
        }
    };
    let (ip1, ip2) = (ip("c1-storage-1").await, ip("c1-storage-2").await);
    // The coordinators' old IPs, as if their pods had been recreated elsewhere.
    let old = "c1:gen1@127.9.0.1:4501,127.9.0.2:4501,127.9.0.3:4501";
    let status = json!({"status": {
        "connectionString": old,
        "processGroups": [
            {"processGroupID": "storage-1", "processClass": "storage", "addresses": ["127.9.0.1"]},
            {"processGroupID": "storage-2", "processClass": "storage", "addresses": ["127.9.0.2"]},
            {"processGroupID": "log-1", "processClass": "log"},
        ],
    }});
    clusters
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("status");
    let cs = || async {
        clusters
            .get("c1")
            .await
            .expect("cluster")
            .status
            .unwrap_or_default()
            .connection_string
    };

    let (r, ..) = plugin(
        n,
        "",
        &[
            "update",
            "connection-string",
            "-c",
            "c1",
            "not-a-connection-string",
        ],
    )
    .await;
    assert!(
        r.as_ref()
            .is_err_and(|e| e.contains("invalid connection string")),
        "{r:?}"
    );
    let (r, out, _) = plugin(n, "", &["update", "connection-string", "-c", "c1", old]).await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        format!("cluster {n}/c1 already has connections string \"{old}\" set\n")
    );

    let new = format!("c1:gen1@{ip1}:4501,{ip2}:4501,127.9.0.3:4501");
    let (r, out, err) = plugin(n, "", &["fix-coordinator-ips", "-c", "c1", "--dry-run"]).await;
    assert_eq!(r, Ok(()), "{out}{err}");
    assert!(out.starts_with(&format!("Current connection string: {old}\n127.9.0.1:4501 is associated with process group: storage-1\n")), "{out}");
    assert!(
        out.contains(
            "ProcessGroup for 127.9.0.3:4501 is missing in the FoundationDBCluster status"
        ),
        "{out}"
    );
    assert!(
        out.ends_with(&format!("New connection string: {new}\n")),
        "{out}"
    );
    assert!(err.contains(&format!("update command: echo {new} > /var/fdb/data/fdb.cluster && pkill fdbserver on Pod: c1-storage-1")), "{err}");
    assert_eq!(cs().await, old, "a dry run changes nothing");

    // The pods' cluster files cannot be written here (kwok pods run nothing): each failure is
    // reported and the status still takes the new connection string.
    // The plane's kubectl (a fresh machine may have none on PATH).
    let kubectl = testenv::plane::read_state()
        .expect("plane state")
        .bin_dir
        .join("kubectl")
        .display()
        .to_string();
    let (r, out, err) = plugin(
        n,
        "",
        &[
            "--kubectl",
            kubectl.as_str(),
            "fix-coordinator-ips",
            "-c",
            "c1",
        ],
    )
    .await;
    assert_eq!(r, Ok(()), "{out}{err}");
    assert!(err.contains("c1-storage-1"), "{err}");
    assert_eq!(cs().await, new);

    let (r, out, _) = plugin(
        n,
        "",
        &[
            "update",
            "connection-string",
            "-c",
            "c1",
            "c1:gen2@127.9.0.5:4501",
        ],
    )
    .await;
    assert_eq!(r, Ok(()), "{out}");
    assert_eq!(cs().await, "c1:gen2@127.9.0.5:4501");

    // exec: into a running pod of the cluster; kwok pods run nothing, so kubectl's exec fails
    // and says so, naming the command; a cluster without running pods is refused.
    let (r, ..) = plugin(
        n,
        "",
        &[
            "--kubectl",
            kubectl.as_str(),
            "exec",
            "-c",
            "c1",
            "--",
            "fdbcli",
            "--exec",
            "status",
        ],
    )
    .await;
    let e = r.expect_err("kwok pods cannot exec");
    assert!(
        e.contains("exec -i -n") && e.contains("-c foundationdb -- fdbcli --exec status"),
        "{e}"
    );
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
                "metadata": {"name": "empty"}, "spec": {"version": "7.1.57"},
            }))
            .unwrap(),
        )
        .await
        .expect("create");
    let (r, ..) = plugin(n, "", &["exec", "-c", "empty"]).await;
    assert_eq!(
        r,
        Err("cluster \"empty\" has no running pod to exec into".into())
    );
}

#[tokio::test]
async fn restart_and_exclusion_status_through_the_cli_path() {
    let h = support::Harness::start_cli("fdb-plugin-cli", support::open_recovery_gates()).await;
    let dir = h
        .sim
        .as_ref()
        .expect("the simulator")
        .binary_dir
        .display()
        .to_string();
    let name = "sample";
    h.simulate(name);
    let db = h.db(name);
    let c = support::create(&h, name, json!({})).await;
    let id = support::storage_groups(&c)
        .into_iter()
        .next()
        .expect("a storage group");
    let n = h.ns.name.as_str();
    let local = ["--wait=false", "--fdb-binary-dir", dir.as_str()];
    let args = |more: &[&str]| {
        let mut v = local.to_vec();
        v.extend_from_slice(more);
        v.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };

    // restart: one `kill` of exactly that group's process, through fdbcli.
    let address = db
        .processes()
        .into_iter()
        .find(|p| p.instance_id == id)
        .expect("its process")
        .address;
    let before = db.calls().len();
    let a = args(&["restart", "-c", name, "--use-process-group-id", &id]);
    let (r, out, err) = plugin(n, "", &a).await;
    assert_eq!(r, Ok(()), "{out}{err}");
    assert_eq!(out, format!("Restart processes: {address}\n"));
    let kills: Vec<String> = db.calls()[before..]
        .iter()
        .filter(|c| c.starts_with("kill"))
        .cloned()
        .collect();
    assert_eq!(kills.len(), 1, "{kills:?}");
    assert!(
        kills[0].contains(address.split(':').next().unwrap()),
        "{kills:?}"
    );

    // analyze --analyze-status reads the status through fdbcli: the simulated processes
    // report no message, so the status adds no finding.
    let a = args(&["analyze", name, "--analyze-status"]);
    let (r, out, err) = plugin(n, "", &a).await;
    assert!(
        out.contains(&format!(
            "Checking cluster: {n}/{name} with auto-fix: false\n"
        )),
        "{out}{err}"
    );
    assert!(!err.contains("Process: "), "{err}");
    assert!(
        r.as_ref().is_ok() || r.as_ref().is_err_and(|e| !e.contains("status json")),
        "{r:?}"
    );

    // A removal through the plugin, its exclusion followed until its data has moved.
    db.set_drain_reads(15);
    let a = args(&[
        "remove",
        "process-groups",
        "-c",
        name,
        "--use-process-group-id",
        &id,
    ]);
    let (r, ..) = plugin(n, "", &a).await;
    assert_eq!(r, Ok(()));
    testenv::eventually("the operator excludes it", Duration::from_secs(120), || {
        let excluded = !db.exclusions().is_empty();
        async move { excluded.then_some(()) }
    })
    .await
    .expect("excluded");
    let a = args(&["get", "exclusion-status", name, "--interval", "1s"]);
    let (r, out, err) = tokio::time::timeout(Duration::from_secs(180), plugin(n, "", &a))
        .await
        .expect("exclusion-status ends once the exclusion is done");
    assert_eq!(r, Ok(()), "{out}{err}");
    assert!(
        // The process ID is its `process_id` locality: `<group>-<n>` (the unified image's).
        out.contains(&format!("{id}-1:\t ")) && out.contains("Mi are left - estimate: "),
        "{out}"
    );
    assert!(
        out.contains("There are 1 processes that are not fully excluded."),
        "{out}"
    );
    h.removals_done(name, Duration::from_secs(180)).await;
    assert!(h.violations.lock().unwrap().is_empty());
}

/// A stand-in for kubectl whose `exec` answers as the pods would: every call is logged to
/// `<dir>/calls`; `status json` prints `<dir>/status.json` (`<dir>/status-after.json`, when
/// present, once a pod was restarted from its seed cluster file); the coordination file is
/// found at `/var/fdb/data/1/coordination-0.fdq` and reads `state of <path>`; uploads land in
/// `<dir>/uploads/<pod><path with / as _>`; the mounted cluster file is read from the config
/// map through the plane's kubectl, as kubelet syncs it; everything else succeeds silently.
struct FakeKubectl {
    dir: std::path::PathBuf,
    path: String,
}

impl FakeKubectl {
    fn new(ns: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("fake-kubectl-{ns}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let real = testenv::plane::read_state()
            .expect("plane state")
            .bin_dir
            .join("kubectl");
        let script = r#"#!/bin/bash
D='@DIR@'
echo "$*" >> "$D/calls"
kc="$2"
while [ "$#" -gt 0 ] && [ "$1" != "-n" ]; do shift; done
ns="$2"; pod="$3"
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
case "$*" in
  "fdbcli --exec status json")
    if [ -e "$D/restarted" ] && [ -e "$D/status-after.json" ]; then cat "$D/status-after.json"; else cat "$D/status.json"; fi ;;
  "/bin/bash -c find "*) echo /var/fdb/data/1/coordination-0.fdq ;;
  "/bin/cp "*) printf 'state of %s' "$2" ;;
  "tee "*) mkdir -p "$D/uploads"; cat > "$D/uploads/$pod$(echo "$2" | tr / _)" ;;
  "cat /var/dynamic-conf/fdb.cluster")
    exec '@REAL@' --kubeconfig "$kc" -n "$ns" get configmap c1-config -o 'jsonpath={.data.cluster-file}' ;;
  "/bin/bash -c pkill fdbserver && rm -f"*) touch "$D/restarted" ;;
  "fdbcli --exec force_recovery_with_data_loss "*) echo "force recovery done" ;;
esac
"#
        .replace("@DIR@", &dir.display().to_string())
        .replace("@REAL@", &real.display().to_string());
        let path = dir.join("kubectl");
        std::fs::write(&path, script).expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        FakeKubectl {
            path: path.display().to_string(),
            dir,
        }
    }

    fn set_status(&self, file: &str, doc: serde_json::Value) {
        std::fs::write(self.dir.join(file), doc.to_string()).expect("status");
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn uploaded(&self, pod: &str, path: &str) -> Option<String> {
        std::fs::read_to_string(
            self.dir
                .join("uploads")
                .join(format!("{pod}{}", path.replace('/', "_"))),
        )
        .ok()
    }
}

impl Drop for FakeKubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until every pod in the namespace runs and has an IP (kwok).
async fn pods_running(client: &kube::Client, n: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    testenv::eventually("kwok runs the pods", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|p| {
                    let s = p.status.as_ref();
                    s.and_then(|s| s.phase.as_deref()) == Some("Running")
                        && s.and_then(|s| s.pod_ip.as_deref())
                            .is_some_and(|ip| !ip.is_empty())
                })
                .then_some(())
        }
    })
    .await
    .expect("pods running");
}

#[tokio::test]
async fn pods_of_several_clusters_are_selected_by_their_cluster_label() {
    let (client, ns) = namespace("fdb-cross").await;
    let n = ns.name.as_str();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(client.clone(), n);
    cluster_c1_with_pods(&client, n).await;
    let c2: FoundationDBCluster = serde_json::from_value(json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
        "metadata": {"name": "c2"}, "spec": {"version": "7.1.57"},
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &c2)
        .await
        .expect("c2");
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    for p in [
        pod("c2", "c2-storage-1", "storage-1", "storage", "kwok-node-1"),
        pod("c2", "c2-log-1", "log-1", "log", "kwok-node-0"),
    ] {
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    let groups = |ids: &[(&str, &str)]| {
        let groups: Vec<_> = ids
            .iter()
            .map(|(id, class)| json!({"processGroupID": id, "processClass": class}))
            .collect();
        json!({"status": {"processGroups": groups}})
    };
    for (c, g) in [
        (
            "c1",
            groups(&[
                ("storage-1", "storage"),
                ("storage-2", "storage"),
                ("log-1", "log"),
            ]),
        ),
        ("c2", groups(&[("storage-1", "storage"), ("log-1", "log")])),
    ] {
        clusters
            .patch_status(c, &PatchParams::default(), &Patch::Merge(g))
            .await
            .expect("status");
    }
    pods_running(&client, n).await;
    let removed = || async {
        let c1 = removals(&clusters.get("c1").await.unwrap()).0;
        let c2 = removals(&clusters.get("c2").await.unwrap()).0;
        (c1, c2)
    };

    // remove process-groups without -c: each pod's group to its own cluster's list.
    let (r, out, err) = plugin(
        n,
        "",
        &[
            "-w=false",
            "remove",
            "process-groups",
            "c1-storage-1",
            "c2-log-1",
        ],
    )
    .await;
    assert_eq!(r, Ok(()), "{out}{err}");
    assert_eq!(
        removed().await,
        (vec!["storage-1".to_owned()], vec!["log-1".to_owned()])
    );
    // Refusals: a label the pods lack, a pod that does not exist, class selection.
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "remove",
            "process-groups",
            "-l",
            "team",
            "c1-log-1",
        ],
    )
    .await;
    assert_eq!(
        r,
        Err("no cluster-label 'team' found for pod 'c1-log-1'".into())
    );
    let (r, ..) = plugin(n, "", &["-w=false", "remove", "process-groups", "nope"]).await;
    assert_eq!(r, Err(format!("could not get pod: {n}/nope")));
    let (r, ..) = plugin(
        n,
        "",
        &[
            "-w=false",
            "remove",
            "process-groups",
            "--process-class",
            "log",
        ],
    )
    .await;
    assert!(
        r.as_ref()
            .is_err_and(|e| e.contains("incompatible with process-class")),
        "{r:?}"
    );
    assert_eq!(
        removed().await,
        (vec!["storage-1".to_owned()], vec!["log-1".to_owned()])
    );

    // cordon without -c: every labelled pod on the node, in its own cluster.
    let (r, out, err) = plugin(n, "", &["-w=false", "cordon", "kwok-node-1"]).await;
    assert_eq!(r, Ok(()), "{out}{err}");
    assert!(
        out.contains("Removed: 3 pods from node: kwok-node-1"),
        "{out}"
    );
    assert_eq!(
        removed().await,
        (
            vec!["storage-1".to_owned(), "log-1".into(), "storage-2".into()],
            vec!["log-1".to_owned(), "storage-1".into()]
        )
    );

    // buggify no-schedule without -c; --clean needs the cluster.
    let (r, out, err) = plugin(
        n,
        "",
        &[
            "-w=false",
            "buggify",
            "no-schedule",
            "c1-log-1",
            "c2-storage-1",
        ],
    )
    .await;
    assert_eq!(r, Ok(()), "{out}{err}");
    for (c, id) in [("c1", "log-1"), ("c2", "storage-1")] {
        let ids: Vec<String> = clusters
            .get(c)
            .await
            .unwrap()
            .spec
            .buggify
            .no_schedule
            .iter()
            .map(|i| i.0.clone())
            .collect();
        assert_eq!(ids, [id], "{c}");
    }
    let (r, ..) = plugin(n, "", &["-w=false", "buggify", "no-schedule", "--clean"]).await;
    assert_eq!(r, Err("clean option requires cluster-name argument".into()));

    // restart without -c: each pod restarted through kubectl exec.
    let kubectl = FakeKubectl::new(n);
    let (r, out, err) = plugin(
        n,
        "",
        &[
            "-w=false",
            "--kubectl",
            &kubectl.path,
            "restart",
            "c2-log-1",
            "c1-storage-2",
        ],
    )
    .await;
    assert_eq!(r, Ok(()), "{out}{err}");
    let restarts: Vec<String> = kubectl
        .calls()
        .into_iter()
        .filter(|c| c.contains("pkill fdbserver || true"))
        .collect();
    assert_eq!(restarts.len(), 2, "{restarts:?}");
    assert!(
        restarts[0].contains(&format!(
            "exec -n {n} c1-storage-2 -c foundationdb -- /bin/bash -c"
        )),
        "clusters in name order: {restarts:?}"
    );
    assert!(
        restarts[1].contains(&format!("-n {n} c2-log-1 ")),
        "{restarts:?}"
    );
    let (r, ..) = plugin(n, "", &["-w=false", "restart", "--all-processes"]).await;
    assert_eq!(r, Err("--all-processes needs the cluster (-c)".into()));

    // deprecation: c1's deprecated crashLoop is shown as a diff and fails the command.
    clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"buggify": {"crashLoop": ["storage-2"]}}})),
        )
        .await
        .expect("crashLoop");
    let (r, out, _) = plugin(n, "", &["deprecation"]).await;
    assert_eq!(r, Err("1/2 cluster(s) with deprecations".into()), "{out}");
    assert!(out.starts_with("Cluster c1 has deprecations\n"), "{out}");
    assert!(out.contains("+   crashLoopContainers:\n+   - containerName: foundationdb\n+     targets:\n+     - storage-2\n"), "{out}");
    assert!(out.ends_with("Cluster c2 has no deprecation\n"), "{out}");
    let (r, out, _) = plugin(n, "", &["deprecation", "c2"]).await;
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        "Cluster c2 has no deprecation\n1 cluster(s) without deprecations\n"
    );
    let (r, out, _) = plugin(n, "", &["deprecation", "c1", "--show-cluster-spec"]).await;
    assert_eq!(r, Err("1/1 cluster(s) with deprecations".into()));
    assert!(
        out.starts_with("---\n") && out.contains("\nbuggify:\n"),
        "{out}"
    );
    let (r, out, _) = plugin(
        n,
        "",
        &[
            "deprecation",
            "c2",
            "--only-show-changes=false",
            "--use-future-defaults",
        ],
    )
    .await;
    assert_eq!(r, Err("1/1 cluster(s) with deprecations".into()));
    assert!(
        out.contains("+ routing:\n+   useDNSInClusterFile: true\n")
            && out.contains("+   - baseImage: foundationdb/fdb-kubernetes-monitor\n")
            && out.contains("+         - name: foundationdb\n"),
        "{out}"
    );
}

/// A status document as fdbcli prints it, with the given client view and processes.
fn status_doc(available: bool, quorum: bool, processes: serde_json::Value) -> serde_json::Value {
    json!({
        "client": {"database_status": {"available": available, "healthy": available},
                   "coordinators": {"quorum_reachable": quorum}},
        "cluster": {"processes": processes},
    })
}

#[tokio::test]
async fn analyze_status_reports_process_messages_and_restarts_them() {
    let (client, ns) = namespace("fdb-analyze-status").await;
    let n = ns.name.as_str();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(client.clone(), n);
    let created = cluster_c1_with_pods(&client, n).await;
    let status = json!({"status": {
        "health": {"available": true, "fullReplication": true},
        "generations": {"reconciled": created.metadata.generation},
        "processGroups": [
            {"processGroupID": "storage-1", "processClass": "storage"},
            {"processGroupID": "storage-2", "processClass": "storage"},
            {"processGroupID": "log-1", "processClass": "log"},
            // Groups without pods, so the fault-domain summary finds no issue.
            {"processGroupID": "storage-3", "processClass": "storage", "faultDomain": "zone-a"},
            {"processGroupID": "storage-4", "processClass": "storage", "faultDomain": "zone-b"},
            {"processGroupID": "storage-5", "processClass": "storage", "faultDomain": "zone-c"},
        ],
    }});
    clusters
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("status");
    pods_running(&client, n).await;
    let kubectl = FakeKubectl::new(n);
    kubectl.set_status(
        "status.json",
        status_doc(true, true, json!({
            "p1": {"address": "10.1.0.1:4501", "locality": {"instance_id": "storage-1"},
                   "messages": [{"name": "io_timeout", "type": "error", "time": 1_700_000_000.0}]},
            "p2": {"address": "10.1.0.2:4501", "locality": {"instance_id": "storage-2"}},
        })),
    );
    let analyze = |more: &[&str]| {
        let mut v = vec![
            "-w=false",
            "--kubectl",
            kubectl.path.as_str(),
            "analyze",
            "c1",
            "--analyze-status",
        ];
        v.extend_from_slice(more);
        v.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let (r, out, err) = plugin(n, "", &analyze(&[])).await;
    assert_eq!(
        r,
        Err("found issues in status json for cluster c1. Please check them".into()),
        "{out}{err}"
    );
    assert!(
        out.contains(&format!("Checking cluster: {n}/c1 with auto-fix: false\n")),
        "{out}"
    );
    assert_eq!(
        err,
        "✖ Process: storage-1 with address: 10.1.0.1:4501 error: io_timeout type: error, time: 2023-11-14T22:13:20Z\n"
    );
    assert!(!kubectl.calls().iter().any(|c| c.contains("kill")));

    // --auto-fix restarts the process through fdbcli in the pod that gave the status.
    let (r, out, err) = plugin(n, "", &analyze(&["--auto-fix"])).await;
    assert!(r.is_err(), "the findings still fail the command");
    assert!(out.contains("Start killing 10.1.0.1:4501\n"), "{out}{err}");
    let kills: Vec<String> = kubectl
        .calls()
        .into_iter()
        .filter(|c| c.contains("kill"))
        .collect();
    assert_eq!(kills.len(), 1, "{kills:?}");
    assert!(
        kills[0].ends_with(
            "-c foundationdb -- fdbcli --exec kill; kill 10.1.0.1:4501; sleep 5; status"
        ),
        "{kills:?}"
    );

    // Without messages: no finding, the command succeeds.
    kubectl.set_status(
        "status.json",
        status_doc(true, true, json!({"p2": {"address": "10.1.0.2:4501"}})),
    );
    let (r, out, err) = plugin(n, "", &analyze(&[])).await;
    assert_eq!(r, Ok(()), "{out}{err}");
}

#[tokio::test]
async fn recover_multi_region_cluster_runs_upstreams_steps() {
    let (client, ns) = namespace("fdb-recover").await;
    let n = ns.name.as_str();
    let clusters: Api<FoundationDBCluster> = Api::namespaced(client.clone(), n);
    cluster_c1_with_pods(&client, n).await;
    clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
            "dataCenter": "primary",
            "routing": {"useDNSInClusterFile": false},
            "seedConnectionString": "c1:gen0@127.9.0.9:4501",
            "databaseConfiguration": {"usable_regions": 2, "regions": [
                {"datacenters": [{"id": "primary", "priority": 1}]},
                {"datacenters": [{"id": "remote", "priority": 0}]}]}}})),
        )
        .await
        .expect("multi-region spec");
    pods_running(&client, n).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let ip = |p: Pod| p.status.unwrap().pod_ip.unwrap();
    let log_ip = ip(pods.get("c1-log-1").await.unwrap());
    let s1 = ip(pods.get("c1-storage-1").await.unwrap());
    let s2 = ip(pods.get("c1-storage-2").await.unwrap());
    // Two of three coordinators are gone for good; c1-log-1 still runs one.
    let old = format!("c1:gen1@127.9.0.1:4501,{log_ip}:4501,127.9.0.2:4501");
    clusters
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"connectionString": old}})),
        )
        .await
        .expect("status");
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "c1-config"}, "data": {"cluster-file": old}}))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &cm)
        .await
        .expect("config map");
    let kubectl = FakeKubectl::new(n);
    let recover = [
        "--kubectl",
        kubectl.path.as_str(),
        "recover-multi-region-cluster",
        "c1",
    ];
    let skip = || async { clusters.get("c1").await.unwrap().spec.skip };

    // Both warnings are asked; a "no" changes nothing and runs nothing.
    let (r, out, _) = plugin(n, "y\nn\n", &recover).await;
    assert_eq!(r, Err("aborted recover multi-region aciton".into()));
    assert!(
        out.contains(&format!("The cluster: {n}/c1 will be force recovered.")),
        "{out}"
    );
    assert!(
        out.contains("Ensure that all Pods of this FDB cluster: c1 in the other"),
        "{out}"
    );
    assert!(kubectl.calls().is_empty());

    // An available database is not recovered.
    kubectl.set_status("status.json", status_doc(true, true, json!({})));
    let (r, ..) = plugin(n, "y\ny\n", &recover).await;
    assert_eq!(
        r,
        Err("cluster is available, will abort any further actions".into())
    );
    assert!(!skip().await);

    // Unavailable, no quorum: the whole recovery; the coordinators answer after the restart.
    kubectl.set_status("status.json", status_doc(false, false, json!({})));
    kubectl.set_status("status-after.json", status_doc(false, true, json!({})));
    let (r, out, err) = plugin(n, "y\ny\n", &recover).await;
    assert_eq!(r, Ok(()), "{out}{err}");
    let new = format!("c1:gen1@{log_ip}:4501,{s1}:4501,{s2}:4501");
    let c = clusters.get("c1").await.unwrap();
    assert!(!c.spec.skip, "reconciliation is back on");
    assert_eq!(c.status.unwrap().connection_string, new);
    assert_eq!(c.spec.seed_connection_string, "");
    assert_eq!(c.spec.database_configuration.usable_regions, 1);
    let dcs: Vec<Vec<String>> = c
        .spec
        .database_configuration
        .regions
        .iter()
        .map(|r| r.data_centers.iter().map(|d| d.id.clone()).collect())
        .collect();
    assert_eq!(dcs, [vec!["primary".to_owned()]]);
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), n)
        .get("c1-config")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["cluster-file"], new);
    for pod in ["c1-storage-1", "c1-storage-2"] {
        for file in ["coordination-0.fdq", "coordination-1.fdq"] {
            assert_eq!(
                kubectl
                    .uploaded(pod, &format!("/var/fdb/data/1/{file}"))
                    .as_deref(),
                Some(format!("state of /var/fdb/data/1/{file}").as_str()),
                "{pod} {file}"
            );
        }
    }
    // Upstream's order: copy the state, restart every pod from the seed file, then force the
    // recovery in the surviving coordinator's pod.
    let calls = kubectl.calls();
    let at = |needle: &str| {
        calls
            .iter()
            .position(|c| c.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {calls:?}"))
    };
    let restarts = calls
        .iter()
        .filter(|c| c.contains("rm -f /var/fdb/data/fdb.cluster"))
        .count();
    assert_eq!(restarts, 3, "{calls:?}");
    assert!(at("/bin/cp") < at(" tee "));
    assert!(at(" tee ") < at("cat /var/dynamic-conf/fdb.cluster"));
    assert!(at("cat /var/dynamic-conf/fdb.cluster") < at("rm -f /var/fdb/data/fdb.cluster"));
    let last = calls.last().unwrap();
    assert!(
        last.ends_with(&format!(
            "-n {n} c1-log-1 -c foundationdb -- fdbcli --exec force_recovery_with_data_loss primary"
        )),
        "{last}"
    );
    assert!(out.contains("force recovery done"), "{out}");
}
