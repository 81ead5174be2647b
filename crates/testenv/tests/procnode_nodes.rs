//! Process-backed nodes: registration, taints, the image mapping and pod networking.

mod procnode_support;

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use procnode_support::*;
use serde_json::json;
use testenv::procnode::{self, ImageEntry, NODES};
use testenv::{TestNamespace, client};

#[tokio::test]
async fn three_tainted_nodes_in_three_zones_with_heartbeats_from_the_agent() {
    let c = client().await;
    let nodes: Api<Node> = Api::all(c.clone());
    let mut zones = BTreeSet::new();
    for name in NODES {
        let n = nodes.get(name).await.expect("node");
        assert!(testenv::plane::node_ready(&n), "{name} Ready");
        let labels = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(procnode::LABEL).map(String::as_str),
            Some("true")
        );
        zones.insert(labels["topology.kubernetes.io/zone"].clone());
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == procnode::TAINT && t.effect == "NoSchedule"),
            "{name} tainted: {taints:?}"
        );
        // kwok leaves these nodes alone: not annotated as its own, and reported by our agent.
        let annotations = n.metadata.annotations.clone().unwrap_or_default();
        assert!(
            !annotations.contains_key("kwok.x-k8s.io/node"),
            "{name} is not a kwok node"
        );
        let info = n
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .expect("nodeInfo");
        assert!(
            info.kubelet_version.contains("flotilla-proc-node"),
            "{}",
            info.kubelet_version
        );
        let cidr = n
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.clone())
            .unwrap_or_default();
        assert!(cidr.starts_with("127."), "{cidr}");
    }
    assert_eq!(zones.len(), 3, "{zones:?}");
    // Lease heartbeats: renewTime moves.
    let leases: Api<Lease> = Api::namespaced(c, "kube-node-lease");
    let renew = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
    let first = renew(leases.get(NODES[0]).await.expect("lease")).expect("renewTime");
    testenv::eventually("the lease to be renewed", T, || async {
        let now = renew(leases.get(NODES[0]).await.ok()?)?;
        (now > first).then_some(())
    })
    .await
    .expect("lease renewed");
}

#[tokio::test]
async fn pods_without_the_toleration_never_land_on_process_nodes() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-taint").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    for i in 0..6 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("plain-{i}")},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }))
        .expect("pod");
        api.create(&PostParams::default(), &pod)
            .await
            .expect("create");
    }
    for i in 0..6 {
        let p = testenv::wait_for(&api, &format!("plain-{i}"), T, |p: &Pod| {
            p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        })
        .await
        .expect("scheduled");
        let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
        assert!(node.starts_with("kwok-node-"), "plain-{i} landed on {node}");
    }
}

#[tokio::test]
async fn an_unmapped_image_fails_the_pod_with_a_reason_and_a_mapping_fixes_it() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-image").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let tag = ns.name.clone();
    let image = format!("example.com/flotilla-test/tool:{tag}");
    create(
        &c,
        &ns.name,
        "unmapped",
        json!({"containers": [{"name": "main", "image": image}]}),
    )
    .await;
    let p = testenv::wait_for(&api, "unmapped", T, |p: &Pod| {
        container(p, "main")
            .and_then(|s| s.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .is_some_and(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
    })
    .await
    .expect("ErrImagePull");
    let waiting = container(&p, "main")
        .and_then(|s| s.state.clone()?.waiting)
        .expect("waiting");
    assert!(
        waiting
            .message
            .unwrap_or_default()
            .contains("has no process-node mapping"),
        "the reason names the missing mapping"
    );
    assert_eq!(phase(&p), "Pending", "never a silent success");

    // A test adds the mapping: the retry picks it up and the container runs.
    let entry = ImageEntry {
        image: image.clone(),
        cmd: vec![
            "sh".into(),
            "-c".into(),
            "echo mapped-and-running; sleep infinity".into(),
        ],
        ..ImageEntry::default()
    };
    let _mapping = procnode::register_image(&c, &format!("tool.{tag}"), &entry)
        .await
        .expect("register");
    ready(&api, "unmapped").await;
    log_contains(&api, "unmapped", "main", "mapped-and-running").await;
}

#[tokio::test]
async fn redis_maps_to_the_hosts_redis_server() {
    testenv::procnode::ensure_host_packages().expect("host packages");
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-redis").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    // As written for a real cluster: image redis, default command, port 6379.
    create(
        &c,
        &ns.name,
        "redis",
        json!({"containers": [{"name": "redis", "image": "redis:7.0",
        "args": ["--save", "", "--appendonly", "no"],
        "readinessProbe": {"exec": {"command": ["redis-cli", "ping"]}, "periodSeconds": 1}}]}),
    )
    .await;
    let p = ready(&api, "redis").await;
    let ip = p.status.and_then(|s| s.pod_ip).expect("pod IP");
    let (code, out) = procnode::exec(
        &c,
        &ns.name,
        "redis",
        "redis",
        &["redis-cli", "set", "k", "v"],
    )
    .await
    .expect("exec");
    assert_eq!((code, out.trim()), (0, "OK"));
    // From the host, at the pod's address: a RESP PING over TCP.
    let reply = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect((ip.as_str(), 6379)).expect("connect to redis");
        s.write_all(b"GET k\r\n").expect("write");
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).expect("read");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    })
    .await
    .expect("join");
    assert_eq!(reply, "$1\r\nv\r\n");
}

/// Two pods listen on 0.0.0.0:8080; the host reaches each at its own address, pods reach
/// each other and the apiserver; nothing else is routed.
#[tokio::test]
async fn pods_have_their_own_addresses_and_ports() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-net").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let server = |word: &str| {
        json!({"containers": [{"name": "web", "image": DEBIAN, "workingDir": "/srv",
            "command": ["sh", "-c", format!("echo {word} > index.html && exec python3 -m http.server 8080 --bind 0.0.0.0")],
            "readinessProbe": {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1}}]})
    };
    create(&c, &ns.name, "a", server("alpha")).await;
    create(&c, &ns.name, "b", server("beta")).await;
    let a = ready(&api, "a").await;
    let b = ready(&api, "b").await;
    let ip = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .expect("pod IP")
    };
    let (ip_a, ip_b) = (ip(&a), ip(&b));
    assert_ne!(ip_a, ip_b);
    for (addr, want) in [(&ip_a, "alpha"), (&ip_b, "beta")] {
        assert!(addr.starts_with("127."), "loopback pod address {addr}");
        let body = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client")
            .get(format!("http://{addr}:8080/index.html"))
            .send()
            .await
            .expect("host reaches the pod")
            .text()
            .await
            .expect("body");
        assert_eq!(body.trim(), want);
    }
    // Pod to pod.
    let (code, out) = procnode::exec(
        &c,
        &ns.name,
        "a",
        "web",
        &[
            "curl",
            "-sS",
            "-m",
            "5",
            &format!("http://{ip_b}:8080/index.html"),
        ],
    )
    .await
    .expect("exec curl");
    assert_eq!((code, out.trim()), (0, "beta"));
    // Each pod's 127.0.0.1 is its own.
    let (code, out) = procnode::exec(
        &c,
        &ns.name,
        "b",
        "web",
        &["curl", "-sS", "-m", "5", "http://127.0.0.1:8080/index.html"],
    )
    .await
    .expect("exec curl");
    assert_eq!((code, out.trim()), (0, "beta"));
    // The pod reaches the apiserver where its environment says (TLS with the pod's CA).
    let (code, out) = procnode::exec(&c, &ns.name, "a", "web", &["sh", "-c",
        "curl -sS -m 5 --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/livez"])
        .await
        .expect("exec curl");
    assert_eq!((code, out.trim()), (0, "ok"));
    // A pod's MAC follows from its address, so a recreated pod that gets a reused address is
    // reachable at once (no neighbour cache keeps pointing at the deleted pod's interface).
    let want = procnode::network::mac_of(ip_a.parse().expect("IPv4"));
    let (_, mac) = procnode::exec(
        &c,
        &ns.name,
        "a",
        "web",
        &["cat", "/sys/class/net/eth0/address"],
    )
    .await
    .expect("exec");
    assert_eq!(mac.trim(), want);
    // No route leads out of loopback.
    let (_, routes) = procnode::exec(&c, &ns.name, "a", "web", &["cat", "/proc/net/route"])
        .await
        .expect("routes");
    for line in routes.lines().skip(1) {
        let dest = line.split_whitespace().nth(1).unwrap_or_default();
        let octets = u32::from_str_radix(dest, 16).unwrap_or(0).to_le_bytes();
        assert_eq!(
            octets[0], 127,
            "only loopback destinations are routed: {line}"
        );
    }
}
