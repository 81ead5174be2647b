//! End to end under the operator's own RBAC: the hand-written deploy/redroid/rbac is applied to
//! the local plane, the operator runs in-process with a bound token of its ServiceAccount (not
//! admin), and a RedroidInstance and a one-shot RedroidTask converge. A permission missing from
//! the YAML fails this test; a permission the operator should not have fails the restriction test.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kit::flags::OperatorFlags;
use kit::telemetry::LogFormat;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use redroid::crd::{InstancePhase, RedroidInstance, RedroidTask};
use redroid::{Flags, names};
use tokio_util::sync::CancellationToken;

const DEPLOY_NAMESPACE: &str = "redroid-system";
const OPERATOR_SA: &str = "redroid-operator";
const TIMEOUT: Duration = Duration::from_secs(90);

fn deploy_dir() -> PathBuf {
    testenv::workspace_root().join("deploy/redroid")
}

async fn setup(
    prefix: &str,
) -> anyhow::Result<(
    Client,
    testenv::TestNamespace,
    testenv::rbac::ClusterCleanup,
)> {
    let admin = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let ns = testenv::TestNamespace::new(&admin, prefix).await;
    let rbac = deploy_dir().join("rbac");
    let cleanup = testenv::rbac::install_rbac(&admin, &rbac, DEPLOY_NAMESPACE, &ns.name).await?;
    // The two PVCs an instance mounts by default, bound through the plane's default
    // StorageClass: the scheduler places a pod only once its claims are bound.
    for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
        testenv::bound_claim(&admin, &ns.name, claim).await?;
    }
    Ok((admin, ns, cleanup))
}

fn flags(namespace: &str) -> Flags {
    Flags {
        operator: OperatorFlags {
            metrics_addr: "127.0.0.1:0".parse().expect("addr"),
            probe_addr: "127.0.0.1:0".parse().expect("addr"),
            leader_elect: true,
            lease_name: None,
            lease_namespace: Some(namespace.to_owned()),
            log_format: LogFormat::Text,
            log_level: Some("info".into()),
        },
        watch_namespaces: namespace.to_owned(),
        kmsg_tools_image: names::DEFAULT_KMSG_TOOLS_IMAGE.to_owned(),
        max_concurrent_reconciles: 4,
    }
}

fn instance(name: &str, index: i32) -> RedroidInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
        "metadata": {"name": name},
        "spec": {"index": index, "image": "registry.invalid/redroid:16"},
    }))
    .expect("instance")
}

fn one_shot_task(name: &str, instance: &str) -> RedroidTask {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidTask",
        "metadata": {"name": name},
        "spec": {
            "instances": [{"name": instance}],
            "integrations": [{"name": "probe", "image": "registry.invalid/adb-probe:1", "args": ["getprop"]}],
        },
    }))
    .expect("task")
}

fn condition_true(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_converges_under_its_own_rbac() -> anyhow::Result<()> {
    let (admin, ns, _cleanup) = setup("redroid-rbac").await?;
    let sa_client = testenv::service_account_client(&admin, &ns.name, OPERATOR_SA).await?;
    let shutdown = CancellationToken::new();
    let operator = tokio::spawn(redroid::run_with_client(
        flags(&ns.name),
        sa_client,
        shutdown.clone(),
    ));

    let instances: Api<RedroidInstance> = Api::namespaced(admin.clone(), &ns.name);
    instances
        .create(&PostParams::default(), &instance("android-0", 0))
        .await?;
    let running = testenv::wait_for(&instances, "android-0", TIMEOUT, |i| {
        i.status.as_ref().is_some_and(|s| {
            s.phase == Some(InstancePhase::Running)
                && s.adb_address.as_deref().is_some_and(|a| !a.is_empty())
        })
    })
    .await?;
    let address = running
        .status
        .and_then(|s| s.adb_address)
        .unwrap_or_default();
    assert_eq!(address, names::adb_address("android-0", &ns.name, 5555));

    let tasks: Api<RedroidTask> = Api::namespaced(admin.clone(), &ns.name);
    tasks
        .create(&PostParams::default(), &one_shot_task("check", "android-0"))
        .await?;
    testenv::wait_for(&tasks, "check", TIMEOUT, |t| {
        t.status
            .as_ref()
            .is_some_and(|s| condition_true(&s.conditions, "Complete"))
    })
    .await?;

    // Leader election ran under the Role in the operator's namespace.
    let lease = Api::<Lease>::namespaced(admin.clone(), &ns.name)
        .get(redroid::run::LEASE_NAME)
        .await?;
    assert!(
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_some_and(|h| !h.is_empty()),
        "the operator holds the lease"
    );

    assert!(
        !operator.is_finished(),
        "the operator kept running: no permission error ended it"
    );
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, operator)
        .await??
        .map_err(|e| anyhow::anyhow!("operator failed: {e:#}"))?;
    Ok(())
}

async fn allowed(admin: &Client, user: &str, attrs: ResourceAttributes) -> anyhow::Result<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(attrs),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

fn attrs(
    namespace: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    verb: &str,
) -> ResourceAttributes {
    ResourceAttributes {
        namespace: Some(namespace.to_owned()),
        group: Some(group.to_owned()),
        resource: Some(resource.to_owned()),
        subresource: subresource.map(str::to_owned),
        verb: Some(verb.to_owned()),
        ..Default::default()
    }
}

#[tokio::test]
async fn operator_identity_is_restricted() -> anyhow::Result<()> {
    let (admin, ns, _cleanup) = setup("redroid-rbac-deny").await?;
    let sa = testenv::service_account_client(&admin, &ns.name, OPERATOR_SA).await?;

    let err = Api::<Secret>::namespaced(sa, &ns.name)
        .list(&Default::default())
        .await
        .expect_err("secrets are off limits");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "expected 403, got {err:?}"
    );

    let user = format!("system:serviceaccount:{}:{OPERATOR_SA}", ns.name);
    let denied = [
        attrs(&ns.name, "", "pods", Some("log"), "get"),
        attrs(&ns.name, "", "pods", Some("portforward"), "create"),
        attrs(&ns.name, "", "pods", Some("exec"), "create"),
        attrs(&ns.name, "", "configmaps", None, "update"),
        attrs(
            &ns.name,
            "redroid.isning.moe",
            "redroidinstances",
            None,
            "delete",
        ),
        attrs(
            &ns.name,
            "redroid.isning.moe",
            "redroidtasks",
            None,
            "create",
        ),
        attrs(
            "kube-system",
            "coordination.k8s.io",
            "leases",
            None,
            "update",
        ),
        attrs(
            &ns.name,
            "rbac.authorization.k8s.io",
            "roles",
            None,
            "create",
        ),
    ];
    for a in denied {
        let what = format!(
            "{} {}/{:?}",
            a.verb.clone().unwrap_or_default(),
            a.resource.clone().unwrap_or_default(),
            a.subresource
        );
        assert!(
            !allowed(&admin, &user, a).await?,
            "the operator must not be allowed to {what}"
        );
    }
    let granted = attrs(&ns.name, "coordination.k8s.io", "leases", None, "update");
    assert!(
        allowed(&admin, &user, granted).await?,
        "leases in its own namespace are allowed"
    );
    Ok(())
}

#[tokio::test]
async fn kustomize_install_passes_server_dry_run() {
    let admin = testenv::client().await;
    testenv::kustomize::assert_install_dry_run(
        &admin,
        &deploy_dir(),
        &deploy_dir().join("manager/namespace.yaml"),
        &[
            "customresourcedefinition.apiextensions.k8s.io/redroidinstances.redroid.isning.moe",
            "customresourcedefinition.apiextensions.k8s.io/redroidtasks.redroid.isning.moe",
            "serviceaccount/redroid-operator",
            "clusterrole.rbac.authorization.k8s.io/redroid-operator",
            "clusterrolebinding.rbac.authorization.k8s.io/redroid-operator",
            "role.rbac.authorization.k8s.io/redroid-operator-leader-election",
            "rolebinding.rbac.authorization.k8s.io/redroid-operator-leader-election",
            "deployment.apps/redroid-operator",
        ],
    )
    .await;
}

/// The operator's RBAC as namespaced Roles (it watches only `namespace`), with the rules for
/// `missing` left out of its main Role. Returns that Role as applied and the full one.
async fn install_rbac_without(
    admin: &Client,
    namespace: &str,
    missing: &str,
) -> anyhow::Result<(DynamicObject, DynamicObject)> {
    let mut full = None;
    let mut restricted = None;
    for mut obj in
        testenv::rbac::rbac_objects(&deploy_dir().join("rbac"), DEPLOY_NAMESPACE, namespace)?
    {
        let kind = testenv::rbac::kind(&obj).to_owned();
        if kind == "ClusterRole" || kind == "ClusterRoleBinding" {
            if let Some(t) = obj.types.as_mut() {
                t.kind = kind.trim_start_matches("Cluster").to_owned();
            }
            obj.metadata.namespace = Some(namespace.to_owned());
            obj.metadata.name = Some(OPERATOR_SA.to_owned());
        }
        if kind == "ClusterRoleBinding" {
            obj.data["roleRef"]["kind"] = "Role".into();
        }
        if kind == "ClusterRole" {
            full = Some(obj.clone());
            if let Some(rules) = obj.data["rules"].as_array_mut() {
                rules.retain(|r| {
                    !r["resources"]
                        .as_array()
                        .is_some_and(|rs| rs.iter().any(|x| x == missing))
                });
            }
            restricted = Some(obj.clone());
        }
        testenv::rbac::apply(admin, &obj, "flotilla-e2e-rbac").await?;
    }
    let (Some(restricted), Some(full)) = (restricted, full) else {
        anyhow::bail!("no ClusterRole in deploy/redroid/rbac");
    };
    Ok((restricted, full))
}

fn free_local_port() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

async fn readyz(addr: std::net::SocketAddr) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.ok()?;
    let code = raw.split(' ').nth(1)?.parse().ok()?;
    Some((code, raw.split_once("\r\n\r\n")?.1.to_owned()))
}

// Issue item 13: without `services` RBAC no instance was ever reconciled and the only trace
// was a WARN line. Now the refused watch makes /readyz answer 503 naming it, is logged at
// ERROR with the resource and verb, and granting the permission makes the operator ready
// and the instance run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_permission_makes_the_operator_not_ready_until_granted() -> anyhow::Result<()> {
    let logs = support::logs::capture();
    let admin = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&admin, crd).await?;
    }
    let ns = testenv::TestNamespace::new(&admin, "redroid-rbac-missing").await;
    for claim in ["redroid-data-base-pvc", "redroid-data-diff-pvc"] {
        testenv::bound_claim(&admin, &ns.name, claim).await?;
    }
    let (_restricted, full) = install_rbac_without(&admin, &ns.name, "services").await?;
    let sa_client = testenv::service_account_client(&admin, &ns.name, OPERATOR_SA).await?;
    let mut flags = flags(&ns.name);
    let probe = free_local_port();
    flags.operator.probe_addr = probe;
    flags.operator.metrics_addr = probe;
    let shutdown = CancellationToken::new();
    let operator = tokio::spawn(redroid::run_with_client(flags, sa_client, shutdown.clone()));
    let instances: Api<RedroidInstance> = Api::namespaced(admin.clone(), &ns.name);
    instances
        .create(&PostParams::default(), &instance("android-0", 0))
        .await?;

    let expected = format!(
        r#"list of services in namespace "{}" is forbidden"#,
        ns.name
    );
    let body = testenv::eventually("/readyz naming the refused watch", TIMEOUT, || async {
        let (code, body) = readyz(probe).await?;
        (code == 503 && body.contains(&expected)).then_some(body)
    })
    .await?;
    assert!(body.contains("redroidinstance"), "{body}");
    let errors = logs.lines_with(&[
        "ERROR",
        "watch forbidden",
        "resource=services",
        "verb=list",
        &ns.name,
    ]);
    assert!(!errors.is_empty(), "no ERROR line names the refused watch");

    testenv::rbac::apply(&admin, &full, "flotilla-e2e-rbac").await?;
    testenv::eventually("/readyz ready once granted", TIMEOUT, || async {
        let (code, _) = readyz(probe).await?;
        (code == 200).then_some(())
    })
    .await?;
    testenv::wait_for(&instances, "android-0", TIMEOUT, |i| {
        i.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(InstancePhase::Running))
    })
    .await?;
    assert!(!operator.is_finished(), "the operator kept running");
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, operator)
        .await??
        .map_err(|e| anyhow::anyhow!("operator failed: {e:#}"))?;
    Ok(())
}
