//! Volumes, environment and in-cluster configuration of pods on process-backed nodes.

mod procnode_support;

use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use procnode_support::*;
use serde_json::json;
use testenv::procnode;
use testenv::{TestNamespace, client};

async fn apply<K>(api: &Api<K>, obj: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().expect("name").to_string();
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .expect("apply");
}

#[tokio::test]
async fn env_command_args_and_working_dir_resolve_like_the_kubelet() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-env").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    apply(
        &Api::<Secret>::namespaced(c.clone(), &ns.name),
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds"}, "stringData": {"password": "s3cr3t"}}),
    )
    .await;
    apply(
        &Api::<ConfigMap>::namespaced(c.clone(), &ns.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg"}, "data": {"mode": "fast", "LEVEL": "3"}}),
    )
    .await;
    create(&c, &ns.name, "env", json!({"containers": [{"name": "main", "image": DEBIAN,
        "workingDir": "/var/lib/app",
        "command": ["sh", "-c"],
        "args": ["echo name=$(NAME) ns=$NS ip=$IP mode=$(MODE) pw=$PASSWORD level=$LEVEL cwd=$(pwd) escaped='$$(NAME)' api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT host=$HOSTNAME; sleep infinity"],
        "envFrom": [{"configMapRef": {"name": "cfg"}}],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        ]}]}))
    .await;
    let p = ready(&api, "env").await;
    let ip = p
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("ip");
    let gw = procnode::gateway().expect("gateway");
    let log = log_contains(&api, "env", "main", "name=").await;
    let want = format!(
        "name=env ns={} ip={ip} mode=fast pw=s3cr3t level=3 cwd=/var/lib/app escaped=$(NAME) api={gw}:443 host=env",
        ns.name
    );
    assert_eq!(log.trim(), want);

    // A missing Secret keeps the container waiting with the kubelet's reason.
    create(
        &c,
        &ns.name,
        "missing",
        json!({"containers": [{"name": "main", "image": DEBIAN, "command": ["true"],
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]}]}),
    )
    .await;
    let p = testenv::wait_for(&api, "missing", T, |p: &Pod| {
        container(p, "main")
            .and_then(|s| s.state.clone()?.waiting?.reason)
            .as_deref()
            == Some("CreateContainerConfigError")
    })
    .await
    .expect("CreateContainerConfigError");
    let msg = container(&p, "main")
        .and_then(|s| s.state.clone()?.waiting?.message)
        .unwrap_or_default();
    assert_eq!(msg, "secret \"nope\" not found");
}

#[tokio::test]
async fn secret_configmap_downward_and_projected_volumes_refresh_in_place() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-vol").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let secrets: Api<Secret> = Api::namespaced(c.clone(), &ns.name);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns.name);
    apply(&secrets, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "stringData": {"token": "v1"}})).await;
    apply(&cms, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"app.yaml": "level: 1"}})).await;
    create(&c, &ns.name, "reader", json!({
        "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true},
        "volumes": [
            {"name": "secret", "secret": {"secretName": "tls"}},
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "labels", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "bundle", "projected": {"sources": [
                {"secret": {"name": "tls", "items": [{"key": "token", "path": "creds/token"}]}},
                {"configMap": {"name": "cfg"}},
                {"serviceAccountToken": {"path": "sa-token", "expirationSeconds": 3600}}]}},
        ],
        "containers": [{"name": "main", "image": DEBIAN, "command": ["sleep", "infinity"],
            "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false},
            "volumeMounts": [
                {"name": "secret", "mountPath": "/etc/secret", "readOnly": true},
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "labels", "mountPath": "/etc/podinfo"},
                {"name": "bundle", "mountPath": "/var/run/bundle"}]}]}))
    .await;
    let p = ready(&api, "reader").await;
    let first_pid = pid(&p, "main");
    let read = |path: &'static str| {
        let c = c.clone();
        let ns = ns.name.clone();
        async move {
            let (code, out) = procnode::exec(&c, &ns, "reader", "main", &["cat", path])
                .await
                .expect("exec");
            (code == 0).then_some(out)
        }
    };
    assert_eq!(read("/etc/secret/token").await.as_deref(), Some("v1"));
    assert_eq!(read("/etc/cfg/app.yaml").await.as_deref(), Some("level: 1"));
    assert_eq!(
        read("/var/run/bundle/creds/token").await.as_deref(),
        Some("v1")
    );
    assert!(
        read("/var/run/bundle/sa-token")
            .await
            .is_some_and(|t| t.split('.').count() == 3),
        "a JWT"
    );
    // Runs as the pod's user, with a read-only root but a writable /tmp.
    let (_, id) = procnode::exec(&c, &ns.name, "reader", "main", &["id", "-u"])
        .await
        .expect("exec");
    assert_eq!(id.trim(), "65532");
    let (code, _) = procnode::exec(&c, &ns.name, "reader", "main", &["touch", "/etc/written"])
        .await
        .expect("exec");
    assert_ne!(code, 0, "read-only root");
    let (code, _) = procnode::exec(&c, &ns.name, "reader", "main", &["touch", "/tmp/written"])
        .await
        .expect("exec");
    assert_eq!(code, 0, "/tmp is writable");

    // Rotate the Secret, change the ConfigMap and a label: the running pod sees the new files.
    apply(&secrets, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "stringData": {"token": "v2"}})).await;
    apply(&cms, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"app.yaml": "level: 2"}})).await;
    api.patch(
        "reader",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
    )
    .await
    .expect("label");
    for (path, want) in [
        ("/etc/secret/token", "v2"),
        ("/var/run/bundle/creds/token", "v2"),
        ("/etc/cfg/app.yaml", "level: 2"),
        ("/etc/podinfo/labels", "tier=\"gold\""),
    ] {
        testenv::eventually(
            &format!("{path} to show {want}"),
            std::time::Duration::from_secs(20),
            || async { read(path).await.filter(|v| v.contains(want)).map(|_| ()) },
        )
        .await
        .expect("refreshed in place");
    }
    let p = api.get("reader").await.expect("pod");
    assert_eq!(
        container(&p, "main").map(|s| s.restart_count),
        Some(0),
        "no restart"
    );
    assert_eq!(pid(&p, "main"), first_pid, "the same process");
}

#[tokio::test]
async fn pvc_data_survives_pod_recreation_and_goes_with_the_volume() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-pvc").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    testenv::bound_claim(&c, &ns.name, "data")
        .await
        .expect("claim");
    let spec = |script: &str| {
        json!({"restartPolicy": "Never",
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "containers": [{"name": "main", "image": DEBIAN, "command": ["sh", "-c", script],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]})
    };
    create(&c, &ns.name, "writer", spec("echo kept > /data/file")).await;
    reach(&api, "writer", "Succeeded").await;
    api.delete("writer", &DeleteParams::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&api, "writer", T)
        .await
        .expect("deleted");
    create(&c, &ns.name, "reader", spec("cat /data/file")).await;
    let p = reach(&api, "reader", "Succeeded").await;
    assert_eq!(
        procnode::logs(&p, "main", false).expect("log").trim(),
        "kept"
    );

    // The data lives in a directory per PersistentVolume, removed with the volume.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), &ns.name);
    let pv = claims
        .get("data")
        .await
        .expect("pvc")
        .spec
        .and_then(|s| s.volume_name)
        .expect("bound");
    let dir = procnode::Layout::new(&testenv::plane::plane_dir()).pv_dir(&pv);
    assert!(dir.join("file").exists(), "{}", dir.display());
    api.delete("reader", &DeleteParams::default())
        .await
        .expect("delete");
    testenv::wait_deleted(&api, "reader", T)
        .await
        .expect("deleted");
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("delete claim");
    testenv::wait_deleted(&Api::<PersistentVolume>::all(c.clone()), &pv, T)
        .await
        .expect("pv deleted");
    testenv::eventually("the volume's data removed", T, || async {
        (!dir.exists()).then_some(())
    })
    .await
    .expect("data removed");
}

#[tokio::test]
async fn in_cluster_kube_rs_authenticates_as_the_pods_service_account() {
    let c = client().await;
    let ns = TestNamespace::new(&c, "pn-incluster").await;
    let api: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "robot"}})).expect("sa");
    Api::<ServiceAccount>::namespaced(c.clone(), &ns.name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("service account");
    let (image, _mapping) = register_whoami(&c, &ns.name).await;
    create(
        &c,
        &ns.name,
        "whoami",
        json!({"serviceAccountName": "robot", "restartPolicy": "Never",
        "securityContext": {"runAsUser": 65532, "runAsNonRoot": true},
        "containers": [{"name": "main", "image": image}]}),
    )
    .await;
    let p = reach(&api, "whoami", "Succeeded").await;
    let log = procnode::logs(&p, "main", false).expect("log");
    assert!(
        log.contains(&format!("user=system:serviceaccount:{}:robot", ns.name)),
        "{log}"
    );
    assert!(log.contains(&format!("namespace={}", ns.name)), "{log}");
}
