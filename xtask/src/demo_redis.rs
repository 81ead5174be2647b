//! The redis part of `cargo xtask demo`: install the operator with `kubectl apply -k
//! deploy/redis`, run the real `redis-operator controller` as its own ServiceAccount, bring up
//! the sample RedisCluster `cache` (a primary and two replicas, real `redis-server` processes
//! in pods on the plane's process-backed nodes, each under this build's instance manager) and
//! show it Healthy, then show a failover: the primary's redis-server is SIGKILLed whenever it
//! runs until the operator promotes a replica; the phases the cluster goes through, the new
//! primary and the cluster Healthy again (the old primary back as a replica) are printed. Every
//! wait is on a condition with a deadline, so a loaded machine only makes it slower.
//!
//! - The operator runs here as a child process under the `redis-operator-system/redis-operator`
//!   token, watching only the demo namespace. Its admission webhooks are served on a loopback
//!   port: the install is rendered with `kubectl kustomize deploy/redis` and, before it is
//!   applied, its two webhook configurations are pointed at that port by URL and scoped to the
//!   demo namespace (the API server cannot dial Service addresses here, and tests share the
//!   plane), and the kwok-faked Deployment gets 0 replicas so nothing pretends to serve them.
//! - The data pods run on the process-backed nodes (`--pods-on-process-nodes` adds their
//!   toleration); the instance manager's image `ghcr.io/flotilla/redis-operator` resolves there
//!   to the binary built here.
//! - Only the RedisCluster sample is applied: the backup samples name an Azure account, which
//!   the demo must not dial (the cluster runs without the `backup-credentials` Secret it names:
//!   only backups need it). A previous run's cluster is deleted first.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use kube::api::{Api, DeleteParams};
use redis::crd::{ClusterPhase, RedisCluster};
use serde_json::json;

use crate::demo_support::{
    Process, build_binary, deploy_dir, ensure_namespace, poll, service_account_kubeconfig,
};
use crate::kubectl;

const OPERATOR_NAMESPACE: &str = "redis-operator-system";
const OPERATOR_SA: &str = "redis-operator";
const DEMO_NAMESPACE: &str = "redis-demo";
const CLUSTER: &str = "cache";
/// The demo's own webhook configurations: the install's, renamed (so the install's names stay
/// free for a user's or a test's `kubectl apply -k deploy/redis`).
const VALIDATING: &str = "redis-operator-validating-webhook-redis-demo";
const MUTATING: &str = "redis-operator-mutating-webhook-redis-demo";

/// Runs the redis demo on the (running) plane.
pub fn run(rt: &tokio::runtime::Runtime, admin: &kube::Client) -> anyhow::Result<()> {
    let deploy = deploy_dir("redis");
    let webhook_port = testenv::process::free_port()?;
    println!(
        "\n==> redis: installing the operator: kubectl apply -k deploy/redis (its webhooks pointed at 127.0.0.1:{webhook_port}, for {DEMO_NAMESPACE} only)"
    );
    let mut objs = testenv::kustomize::render(&deploy)?;
    for o in &mut objs {
        adapt(o, webhook_port);
    }
    rt.block_on(testenv::kustomize::apply_all(admin, &objs, "flotilla-demo"))?;
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/redisclusters.redis.io",
        "crd/redisbackups.redis.io",
        "crd/redisscheduledbackups.redis.io",
    ])?;
    ensure_namespace(DEMO_NAMESPACE)?;

    let kubeconfig = service_account_kubeconfig(rt, admin, OPERATOR_NAMESPACE, OPERATOR_SA)?;
    println!("\n==> redis: building the operator: cargo build -p redis --bin redis-operator");
    let binary = build_binary("redis", "redis-operator")?;
    let (mut operator, probes) = start_operator(&binary, &kubeconfig, webhook_port)?;

    let clusters: Api<RedisCluster> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    if rt
        .block_on(clusters.get_opt(CLUSTER))?
        .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
    {
        println!("deleting the previous run's RedisCluster {CLUSTER}");
        rt.block_on(clusters.delete(CLUSTER, &DeleteParams::default()))?;
    }
    rt.block_on(poll(
        "the previous run's cluster to be gone",
        &mut [&mut operator],
        || async { Ok(clusters.get_opt(CLUSTER).await?.is_none()) },
    ))?;
    // The webhook must be serving before the first create: the configurations fail closed.
    // The operator is ready once its webhook serves; the caBundles may be a previous run's.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(2))
        .build()?;
    let readyz = format!("http://{probes}/readyz");
    rt.block_on(poll(
        "the operator's webhook to serve",
        &mut [&mut operator],
        || async {
            let ready = http
                .get(&readyz)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            Ok(ready && webhooks_have_ca(admin).await)
        },
    ))?;

    println!(
        "\n==> redis: applying the sample: kubectl -n {DEMO_NAMESPACE} apply -f deploy/redis/samples/rediscluster-cache.yaml"
    );
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "apply",
        "-f",
        &deploy
            .join("samples/rediscluster-cache.yaml")
            .display()
            .to_string(),
    ])?;
    let started = Instant::now();
    let first = rt.block_on(healthy(&clusters, &mut operator))?;
    println!(
        "RedisCluster {CLUSTER} Healthy in {:.1?}: primary {first}, 3 instances ready",
        started.elapsed()
    );
    show()?;
    rt.block_on(failover(admin, &clusters, &mut operator, &first))?;
    show()?;

    drop(operator);
    println!(
        "\nthe operator was stopped; the redis pods keep running. Run it again with:\n  KUBECONFIG={} {} controller --watch-namespaces={DEMO_NAMESPACE} --pods-on-process-nodes --webhook-bind-address=127.0.0.1:{webhook_port} --webhook-hosts=127.0.0.1 --validating-webhook-configuration={VALIDATING} --mutating-webhook-configuration={MUTATING}",
        kubeconfig.display(),
        binary.display()
    );
    Ok(())
}

fn show() -> anyhow::Result<()> {
    println!();
    kubectl(&[
        "-n",
        DEMO_NAMESPACE,
        "get",
        "redisclusters,pods,pvc,services",
        "-o",
        "wide",
    ])
}

/// What only this demo changes in the install, before it is applied: the kwok-faked
/// Deployment has no replicas (the operator runs here), the webhook configurations get the
/// demo's own names, and each webhook is served at
/// `https://127.0.0.1:<port>` and asked only about the demo namespace, so the plane's other
/// users (tests) are never sent to it (the operator keeps the caBundle current).
fn adapt(o: &mut kube::api::DynamicObject, port: u16) {
    let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
    match kind.as_str() {
        "Deployment" => o.data["spec"]["replicas"] = 0.into(),
        // Its rules name the webhook configurations: the demo's names instead.
        "ClusterRole" => {
            let Some(rules) = o.data["rules"].as_array_mut() else {
                return;
            };
            for names in rules
                .iter_mut()
                .filter_map(|r| r["resourceNames"].as_array_mut())
            {
                for n in names.iter_mut() {
                    match n.as_str() {
                        Some("redis-operator-validating-webhook") => *n = VALIDATING.into(),
                        Some("redis-operator-mutating-webhook") => *n = MUTATING.into(),
                        _ => {}
                    }
                }
            }
        }
        "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
            o.metadata.name = Some(if kind.starts_with("Validating") {
                VALIDATING.to_owned()
            } else {
                MUTATING.to_owned()
            });
            let Some(hooks) = o.data["webhooks"].as_array_mut() else {
                return;
            };
            for w in hooks {
                let path = w["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                w["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}{path}")});
                w["namespaceSelector"] =
                    json!({"matchLabels": {"kubernetes.io/metadata.name": DEMO_NAMESPACE}});
            }
        }
        _ => {}
    }
}

async fn webhooks_have_ca(admin: &kube::Client) -> bool {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
    };
    let all_have_ca = |configs: Vec<&WebhookClientConfig>| {
        !configs.is_empty() && configs.iter().all(|c| c.ca_bundle.is_some())
    };
    let v: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let m: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let v = v.get_opt(VALIDATING).await.ok().flatten();
    let m = m.get_opt(MUTATING).await.ok().flatten();
    let v_hooks = v.and_then(|c| c.webhooks).unwrap_or_default();
    let m_hooks = m.and_then(|c| c.webhooks).unwrap_or_default();
    all_have_ca(v_hooks.iter().map(|w| &w.client_config).collect())
        && all_have_ca(m_hooks.iter().map(|w| &w.client_config).collect())
}

/// Starts the operator; returns it and its probe address.
fn start_operator(
    binary: &Path,
    kubeconfig: &Path,
    webhook_port: u16,
) -> anyhow::Result<(Process, String)> {
    let free = || -> anyhow::Result<String> {
        Ok(format!("127.0.0.1:{}", testenv::process::free_port()?))
    };
    let (metrics, probes) = (free()?, free()?);
    let mut cmd = Command::new(binary);
    cmd.arg("controller")
        .arg(format!("--operator-namespace={OPERATOR_NAMESPACE}"))
        .arg(format!("--watch-namespaces={DEMO_NAMESPACE}"))
        .arg("--pods-on-process-nodes")
        .arg(format!("--webhook-bind-address=127.0.0.1:{webhook_port}"))
        .arg("--webhook-hosts=127.0.0.1")
        .arg(format!("--validating-webhook-configuration={VALIDATING}"))
        .arg(format!("--mutating-webhook-configuration={MUTATING}"))
        .arg(format!("--metrics-addr={metrics}"))
        .arg(format!("--probe-addr={probes}"))
        .env("KUBECONFIG", kubeconfig);
    let process = Process::spawn("redis-operator", cmd)?;
    println!(
        "operator running as serviceaccount {OPERATOR_NAMESPACE}/{OPERATOR_SA} (pid {}), logs: {}",
        process.pid(),
        process.log.display()
    );
    println!(
        "  metrics http://{metrics}/metrics, probes http://{probes}/readyz, webhooks https://127.0.0.1:{webhook_port}"
    );
    Ok((process, probes))
}

/// Kills the primary's redis-server whenever it runs until the operator has promoted a
/// replica, printing each phase the cluster goes through; then waits until it is Healthy again.
async fn failover(
    admin: &kube::Client,
    clusters: &Api<RedisCluster>,
    operator: &mut Process,
    old: &str,
) -> anyhow::Result<()> {
    println!(
        "\n==> redis: failover: SIGKILL of {old}'s redis-server whenever it runs, until the operator promotes a replica"
    );
    let started = Instant::now();
    let kills = std::cell::Cell::new(0u32);
    let last = std::cell::RefCell::new(String::new());
    let promoted = std::cell::RefCell::new(String::new());
    poll(
        "a replica to be promoted",
        &mut [&mut *operator],
        || async {
            let killed = testenv::procnode::signal_command(
                admin,
                DEMO_NAMESPACE,
                old,
                "redis",
                "redis-server",
                nix::sys::signal::Signal::SIGKILL,
            )
            .await
            .is_ok_and(|pids| !pids.is_empty());
            if killed {
                kills.set(kills.get() + 1);
            }
            let Some(s) = clusters.get_opt(CLUSTER).await?.and_then(|c| c.status) else {
                return Ok(false);
            };
            let phase = format!(
                "{:?}: {}",
                s.phase.unwrap_or(ClusterPhase::Creating),
                s.phase_reason
            );
            if *last.borrow() != phase {
                println!("  {:>5.1}s  {phase}", started.elapsed().as_secs_f64());
                *last.borrow_mut() = phase;
            }
            let moved = !s.current_primary.is_empty() && s.current_primary != old;
            let running = s
                .instances_status
                .get(&s.current_primary)
                .is_some_and(|i| i.role == "master" && i.connected);
            if moved && running {
                *promoted.borrow_mut() = s.current_primary;
            }
            Ok(moved && running)
        },
    )
    .await?;
    println!(
        "{} is the primary {:.1?} after the first kill ({} kills of {old}'s redis-server)",
        promoted.borrow(),
        started.elapsed(),
        kills.get()
    );
    let new = healthy(clusters, operator).await?;
    println!(
        "RedisCluster {CLUSTER} Healthy again {:.1?} after the first kill: primary {new}, {old} back as its replica",
        started.elapsed()
    );
    Ok(())
}

/// Waits until the cluster is Healthy with every instance ready; returns the primary.
async fn healthy(clusters: &Api<RedisCluster>, operator: &mut Process) -> anyhow::Result<String> {
    let primary = std::cell::RefCell::new(String::new());
    poll(
        "the RedisCluster to be Healthy",
        &mut [operator],
        || async {
            let Some(c) = clusters.get_opt(CLUSTER).await? else {
                return Ok(false);
            };
            let want = c.spec.instances;
            let Some(s) = c.status else {
                return Ok(false);
            };
            let ok = s.phase == Some(ClusterPhase::Healthy)
                && s.ready_instances == want
                && !s.current_primary.is_empty();
            if ok {
                *primary.borrow_mut() = s.current_primary;
            }
            Ok(ok)
        },
    )
    .await?;
    Ok(primary.into_inner())
}
