use super::*;
use crate::crd::{FoundationDBClusterSpec, ProcessGroupId};

fn cluster() -> FoundationDBCluster {
    let mut c = FoundationDBCluster::new(
        "sample",
        FoundationDBClusterSpec {
            version: "7.1.57".into(),
            ..FoundationDBClusterSpec::default()
        },
    );
    c.metadata.namespace = Some("ns".into());
    c
}

fn group(id: &str, class: &str) -> ProcessGroupStatus {
    ProcessGroupStatus::new(
        ProcessGroupId::new(id),
        ProcessClass::new(class),
        jiff::Timestamp::UNIX_EPOCH,
    )
}

#[test]
fn pods_and_claims_follow_upstreams_names_and_labels() {
    let c = cluster();
    let g = group("storage-7", "storage");
    let pod = pod(&c, &g, "h");
    assert_eq!(pod.name_any(), "sample-storage-7");
    let labels = pod.labels();
    assert_eq!(labels["foundationdb.org/fdb-cluster-name"], "sample");
    assert_eq!(labels["foundationdb.org/fdb-process-class"], "storage");
    assert_eq!(labels["foundationdb.org/fdb-process-group-id"], "storage-7");
    assert_eq!(pod.annotations()[LAST_CONFIG_MAP_KEY], "h");
    assert_eq!(pvc(&c, &g).unwrap().name_any(), "sample-storage-7-data");
    assert!(pvc(&c, &group("stateless-3", "stateless")).is_none());
    let main = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        main.image.as_deref(),
        Some("foundationdb/fdb-kubernetes-monitor:7.1.57")
    );
}

/// The main container's environment as `(name, literal value or field path)`.
fn env_sources(c: &FoundationDBCluster) -> Vec<(String, String)> {
    let pod = pod(c, &group("storage-7", "storage"), "h");
    let main = &pod.spec.as_ref().unwrap().containers[0];
    main.env
        .iter()
        .flatten()
        .map(|e| {
            let source = e.value.clone().unwrap_or_else(|| {
                let f = e.value_from.as_ref().and_then(|v| v.field_ref.as_ref());
                format!("<{}>", f.map(|f| f.field_path.as_str()).unwrap_or("?"))
            });
            (e.name.clone(), source)
        })
        .collect()
}

#[test]
fn the_main_container_has_upstreams_unified_image_environment() {
    // Upstream's configureContainersForUnifiedImages and
    // getEnvForMonitorConfigSubstitution (internal/pod_models.go), in its order.
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    let head = [
        ("FDB_POD_NAME", "<metadata.name>"),
        ("FDB_POD_NAMESPACE", "<metadata.namespace>"),
        ("FDB_NETWORK_OPTION_TRACE_LOG_GROUP", "sample"),
        ("FDB_NETWORK_OPTION_TRACE_ENABLE", "/var/log/fdb-trace-logs"),
        ("FDB_NODE_NAME", "<spec.nodeName>"),
        ("FDB_PUBLIC_IP", "<status.podIP>"),
        ("FDB_POD_IP", "<status.podIP>"),
    ];
    let dns = (
        "FDB_DNS_NAME",
        "sample-storage-7.sample.ns.svc.cluster.local",
    );
    let mut c = cluster();
    let mut want = pairs(&head);
    want.extend(pairs(&[
        ("FDB_MACHINE_ID", "<spec.nodeName>"),
        ("FDB_ZONE_ID", "<spec.nodeName>"),
        ("FDB_INSTANCE_ID", "storage-7"),
        dns,
    ]));
    assert_eq!(env_sources(&c), want, "defaults (DNS in the cluster file)");

    c.spec.routing.use_dns_in_cluster_file = Some(false);
    c.spec.use_explicit_listen_address = Some(false);
    c.spec.fault_domain.key = NONE_FAULT_DOMAIN_KEY.into();
    let mut want = pairs(&head[..6]);
    want.extend(pairs(&[
        ("FDB_MACHINE_ID", "<metadata.name>"),
        ("FDB_ZONE_ID", "<metadata.name>"),
        ("FDB_INSTANCE_ID", "storage-7"),
    ]));
    assert_eq!(env_sources(&c), want, "no fault domain, no listen address");

    c.spec.fault_domain.key = KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY.into();
    c.spec.fault_domain.value = "kc-2".into();
    let sources = env_sources(&c);
    assert!(
        sources.contains(&("FDB_ZONE_ID".into(), "kc-2".into())),
        "{sources:?}"
    );
    assert!(sources.contains(&("FDB_MACHINE_ID".into(), "<spec.nodeName>".into())));

    c.spec.fault_domain.key = "topology.kubernetes.io/zone".into();
    c.spec.fault_domain.value_from = "$RACK".into();
    let sources = env_sources(&c);
    assert!(
        !sources.iter().any(|(n, _)| n == "FDB_ZONE_ID"),
        "the zone comes from the pod's own $RACK: {sources:?}"
    );
    let conf = monitor_conf(&c, &ProcessClass::new("storage")).to_string();
    assert!(conf.contains(r#""source":"RACK""#), "{conf}");
    assert_eq!(
        pod(&c, &group("storage-7", "storage"), "h").annotations()[IMAGE_TYPE_KEY],
        "unified"
    );
}

#[test]
fn the_spec_hash_is_stable_and_follows_the_spec() {
    let c = cluster();
    let g = group("log-1", "log");
    let a = pod(&c, &g, "h").annotations()[LAST_SPEC_KEY].clone();
    let b = pod(&c, &g, "h").annotations()[LAST_SPEC_KEY].clone();
    assert_eq!(a, b);
    let mut changed = cluster();
    changed.spec.version = "7.1.63".into();
    assert_ne!(a, pod(&changed, &g, "h").annotations()[LAST_SPEC_KEY]);
}

#[test]
fn config_map_has_one_monitor_conf_per_class_and_the_cluster_file_once_known() {
    let mut c = cluster();
    let cm = config_map(&c);
    let data = cm.data.clone().unwrap();
    assert!(!data.contains_key("cluster-file"));
    assert_eq!(data["running-version"], "7.1.57");
    for class in ["storage", "log", "stateless"] {
        let conf: Value =
            serde_json::from_str(&data[&format!("fdbmonitor-conf-{class}-json")]).unwrap();
        assert_eq!(conf["runServers"], false);
    }
    let before = config_map_hash(&cm, &ProcessClass::new("storage"));
    c.status = Some(crate::crd::FoundationDBClusterStatus {
        connection_string: "sample:abc@127.1.0.1:4501".into(),
        ..Default::default()
    });
    let cm = config_map(&c);
    assert_eq!(
        cm.data.as_ref().unwrap()["cluster-file"],
        "sample:abc@127.1.0.1:4501"
    );
    assert_ne!(before, config_map_hash(&cm, &ProcessClass::new("storage")));
}

fn main_container(pod: &Pod) -> Container {
    pod.spec.as_ref().unwrap().containers[0].clone()
}

#[test]
fn servers_per_pod_set_the_monitors_process_count_and_the_pods_variable() {
    let mut c = cluster();
    c.spec.storage_servers_per_pod = 2;
    c.spec.log_servers_per_pod = 3;
    // (class, servers per pod the pod runs, --process-count argument, variable)
    let cases = [
        (
            "storage",
            2,
            Some("2"),
            Some(("STORAGE_SERVERS_PER_POD", "2")),
        ),
        ("log", 3, Some("3"), Some(("LOG_SERVERS_PER_POD", "3"))),
        (
            "transaction",
            3,
            Some("3"),
            Some(("TRANSACTION_SERVERS_PER_POD", "3")),
        ),
        ("stateless", 1, None, None),
    ];
    for (class, servers, arg, var) in cases {
        let g = group(&format!("{class}-1"), class);
        let pod = pod(&c, &g, "h");
        let main = main_container(&pod);
        let args = main.args.clone().unwrap();
        let count = args
            .iter()
            .position(|a| a == "--process-count")
            .map(|i| args[i + 1].as_str());
        assert_eq!(count, arg, "{class}");
        let env = main.env.clone().unwrap();
        let found = env
            .iter()
            .find(|e| e.name.ends_with("_SERVERS_PER_POD"))
            .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()));
        assert_eq!(found, var, "{class}");
        assert_eq!(servers_per_pod(&pod, &g.process_class), servers, "{class}");
    }
    c.spec.storage_servers_per_pod = 0;
    let pod = pod(&c, &group("storage-1", "storage"), "h");
    assert_eq!(servers_per_pod(&pod, &ProcessClass::new("storage")), 1);
    assert!(
        !main_container(&pod)
            .args
            .unwrap()
            .contains(&"--process-count".into())
    );
}

#[test]
fn each_process_of_a_pod_has_its_port_data_directory_and_process_id() {
    let mut c = cluster();
    c.spec.storage_servers_per_pod = 2;
    let conf = monitor_conf(&c, &ProcessClass::new("storage"));
    let env = BTreeMap::from([
        ("FDB_PUBLIC_IP".to_owned(), "127.1.0.7".to_owned()),
        ("FDB_INSTANCE_ID".to_owned(), "storage-3".to_owned()),
        ("FDB_MACHINE_ID".to_owned(), "node-a".to_owned()),
        ("FDB_ZONE_ID".to_owned(), "node-a".to_owned()),
        ("BINARY_DIR".to_owned(), "/usr/bin".to_owned()),
    ]);
    let line = |n| super::super::monitor::command_line(&conf, &env, n).unwrap();
    // (process, its words); one process per pod renders process 1 alike (upstream's
    // unified image does the same)
    let cases = [
        (
            1,
            [
                "--public_address=[127.1.0.7]:4501",
                "--datadir=/var/fdb/data/1",
                "--locality_process_id=storage-3-1",
            ],
        ),
        (
            2,
            [
                "--public_address=[127.1.0.7]:4503",
                "--datadir=/var/fdb/data/2",
                "--locality_process_id=storage-3-2",
            ],
        ),
    ];
    for (n, words) in cases {
        let line = line(n);
        for w in words {
            assert!(
                line.split(' ').any(|x| x == w),
                "process {n}: {w} in {line}"
            );
        }
        assert!(line.contains("--locality_instance_id=storage-3"), "{line}");
    }
    let keys: Vec<String> = config_map(&c).data.unwrap().into_keys().collect();
    assert!(
        keys.contains(&"fdbmonitor-conf-storage-json".to_owned()),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|k| k.contains("density")), "{keys:?}");
    let mut one = cluster();
    one.spec.storage_servers_per_pod = 1;
    assert_eq!(
        monitor_conf(&one, &ProcessClass::new("storage")),
        conf,
        "the configuration does not depend on the count"
    );
}

#[test]
fn pods_of_a_class_prefer_other_fault_domains_as_upstreams() {
    let terms = |c: &FoundationDBCluster| {
        let spec = pod(c, &group("storage-7", "storage"), "h").spec.unwrap();
        spec.affinity
            .and_then(|a| a.pod_anti_affinity)
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution)
            .unwrap_or_default()
    };
    let c = cluster();
    let got = terms(&c);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].weight, 1);
    assert_eq!(
        got[0].pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
    let labels = got[0]
        .pod_affinity_term
        .label_selector
        .clone()
        .unwrap()
        .match_labels
        .unwrap();
    assert_eq!(
        labels,
        BTreeMap::from([
            (
                "foundationdb.org/fdb-cluster-name".to_owned(),
                "sample".to_owned()
            ),
            (
                "foundationdb.org/fdb-process-class".to_owned(),
                "storage".to_owned()
            ),
        ])
    );
    let mut zoned = cluster();
    zoned.spec.fault_domain.key = "topology.kubernetes.io/zone".into();
    assert_eq!(
        terms(&zoned)[0].pod_affinity_term.topology_key,
        "topology.kubernetes.io/zone"
    );
    for key in [NONE_FAULT_DOMAIN_KEY, KUBERNETES_CLUSTER_FAULT_DOMAIN_KEY] {
        let mut c = cluster();
        c.spec.fault_domain.key = key.into();
        assert!(terms(&c).is_empty(), "{key}");
    }
}
