//! Support shared by the RedisCluster controller's tests: the operator runs in this process
//! under its own ServiceAccount and hand-written RBAC (deploy/redis/rbac), scoped to the
//! test's namespace, with its API requests counted; on the process-backed nodes its data pods
//! run for real (this build's binary as the operator image, Debian's redis-server as `redis`),
//! and [`data`] talks to them.
#![allow(dead_code)]

pub mod data;
pub mod sentinel;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use redis::crd::RedisCluster;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use testenv::{RequestCounts, TestNamespace};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The operator's ServiceAccount in deploy/redis/rbac.
pub const SA: &str = "redis-operator";
/// The namespace deploy/redis/rbac names.
pub const DEPLOY_NAMESPACE: &str = "redis-operator-system";
/// The usual deadline.
pub const T: Duration = Duration::from_secs(120);

/// A test namespace with the operator running in it.
pub struct Env {
    /// Admin client (the test's own actions).
    pub admin: Client,
    /// The namespace.
    pub ns: TestNamespace,
    /// The operator's requests.
    pub counts: RequestCounts,
    /// This build's binary registered as the operator image (process-node tests).
    pub image: Option<testenv::procnode::ImageRegistration>,
    operator: Option<(CancellationToken, JoinHandle<anyhow::Result<()>>)>,
    sa: Client,
    extra: Vec<String>,
    _rbac: testenv::rbac::ClusterCleanup,
}

/// The operator's flags for a test in `ns`; a flag in `extra` replaces the default of the same
/// name (`--status-poll-seconds=5` runs the operator's own default).
pub fn flags(ns: &str, extra: &[String]) -> redis::run::ControllerFlags {
    use clap::Parser;
    let name = |f: &str| f.split('=').next().unwrap_or_default().to_owned();
    let overridden = |f: &&str| extra.iter().any(|e| name(e) == name(f));
    let defaults = [
        "--metrics-addr=127.0.0.1:0",
        "--probe-addr=127.0.0.1:0",
        "--webhook-enabled=false",
        "--status-poll-seconds=2",
        "--log-level=info,redis=debug",
    ];
    let args = ["redis-operator", "controller"]
        .into_iter()
        .chain(defaults.into_iter().filter(|f| !overridden(f)))
        .map(str::to_owned)
        .chain([
            format!("--watch-namespaces={ns}"),
            format!("--lease-namespace={ns}"),
        ])
        .chain(extra.iter().cloned());
    match redis::cli::Cli::try_parse_from(args)
        .expect("flags")
        .command
    {
        redis::cli::Command::Controller(f) => *f,
        other => panic!("unexpected {other:?}"),
    }
}

/// A client acting as `namespace/sa` whose requests are counted by verb.
pub async fn counting_sa_client(
    admin: &Client,
    namespace: &str,
    sa: &str,
) -> anyhow::Result<(Client, RequestCounts)> {
    let cfg = testenv::identity::service_account_config(admin, namespace, sa).await?;
    testenv::counting(cfg)
}

/// Waits until a 5 s window passes without a write by the operator.
pub async fn settled(counts: &RequestCounts, timeout: Duration) {
    testenv::eventually("the operator to settle", timeout, || async {
        counts.reset();
        tokio::time::sleep(Duration::from_secs(5)).await; // the quiet window being checked
        let writes = counts.by_verb();
        tracing::info!(?writes, "operator requests in the quiet window");
        (counts.writes() == 0).then_some(())
    })
    .await
    .expect("the operator settles");
}

impl Env {
    /// A namespace with the operator's RBAC and the CRDs; no operator yet.
    pub async fn new(prefix: &str) -> Env {
        let admin = testenv::client().await;
        for crd in redis::crd::crds() {
            testenv::install_crd(&admin, crd).await.expect("CRD");
        }
        let ns = TestNamespace::new(&admin, prefix).await;
        let dir = testenv::workspace_root().join("deploy/redis/rbac");
        let rbac = testenv::rbac::install_rbac(&admin, &dir, DEPLOY_NAMESPACE, &ns.name)
            .await
            .expect("the operator's RBAC");
        let (sa, counts) = counting_sa_client(&admin, &ns.name, SA)
            .await
            .expect("operator client");
        Env {
            admin,
            ns,
            counts,
            image: None,
            operator: None,
            sa,
            extra: Vec::new(),
            _rbac: rbac,
        }
    }

    /// A namespace with the operator started with `extra` flags (pods on kwok nodes).
    pub async fn start(prefix: &str, extra: &[&str]) -> Env {
        let mut env = Env::new(prefix).await;
        env.extra = extra.iter().map(|s| (*s).to_owned()).collect();
        env.restart_operator();
        env
    }

    /// A namespace whose data pods run for real on the process-backed nodes: this build's
    /// binary is the operator image `ghcr.io/flotilla/redis-operator:<namespace>`.
    pub async fn on_process_nodes(prefix: &str, extra: &[&str]) -> Env {
        let mut env = Env::new(prefix).await;
        let n = env.ns.name.clone();
        let image = format!("ghcr.io/flotilla/redis-operator:{n}");
        let entry = testenv::procnode::ImageEntry {
            image: image.clone(),
            files: [(
                "/redis-operator".to_string(),
                env!("CARGO_BIN_EXE_redis-operator").to_string(),
            )]
            .into(),
            entrypoint: vec!["/redis-operator".into()],
            ..testenv::procnode::ImageEntry::default()
        };
        env.image = Some(
            testenv::procnode::register_image(&env.admin, &format!("redis-operator.{n}"), &entry)
                .await
                .expect("image"),
        );
        env.extra = vec![
            "--leader-elect=false".to_owned(),
            "--pods-on-process-nodes".to_owned(),
            format!("--operator-image={image}"),
        ];
        env.extra.extend(extra.iter().map(|s| (*s).to_owned()));
        env.restart_operator();
        env
    }

    /// Starts the operator with the flags it was set up with.
    pub fn restart_operator(&mut self) {
        self.restart_operator_with(None);
    }

    /// Starts the operator again with a handoff hook (crash points).
    pub fn restart_operator_with(&mut self, hook: Option<redis::context::HandoffHook>) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(redis::run::run_with_hook(
            flags(&self.ns.name, &self.extra),
            self.sa.clone(),
            stop.clone(),
            |_| {},
            hook,
        ));
        self.operator = Some((stop, task));
    }

    /// Stops the operator as a crash would: its task is dropped wherever it is.
    pub async fn kill_operator(&mut self) {
        if let Some((stop, task)) = self.operator.take() {
            task.abort();
            stop.cancel();
            let _ = task.await;
        }
    }

    /// RedisClusters of the namespace.
    pub fn clusters(&self) -> Api<RedisCluster> {
        Api::namespaced(self.admin.clone(), &self.ns.name)
    }

    /// Any namespaced kind of the namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.admin.clone(), &self.ns.name)
    }

    /// Creates RedisCluster `name` with `spec`.
    pub async fn create(&self, name: &str, spec: Value) -> RedisCluster {
        let rc: RedisCluster = serde_json::from_value(json!({
            "apiVersion": "redis.io/v1", "kind": "RedisCluster",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("cluster");
        self.clusters()
            .create(&PostParams::default(), &rc)
            .await
            .expect("create cluster")
    }

    /// Merge-patches RedisCluster `name` with `patch`.
    pub async fn patch(&self, name: &str, patch: Value) -> RedisCluster {
        self.clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch cluster")
    }

    /// Waits until `cond` holds for RedisCluster `name`.
    pub async fn wait(
        &self,
        name: &str,
        timeout: Duration,
        cond: impl Fn(&RedisCluster) -> bool + Clone + Send + 'static,
    ) -> RedisCluster {
        match testenv::wait_for(&self.clusters(), name, timeout, cond).await {
            Ok(rc) => rc,
            Err(e) => {
                let now = self.clusters().get(name).await.ok();
                let st = now.and_then(|c| c.status);
                let first = e.to_string();
                let first = first.lines().next().unwrap_or_default();
                let summary = self.summary(name).await;
                self.print_pod_logs().await;
                panic!(
                    "waiting for RedisCluster {name}: {first} now: {summary}\n{e}; status: {st:#?}"
                )
            }
        }
    }

    /// One line on cluster `name` and its pods, to head a failure's message (a CI summary
    /// keeps a panic's first line): the phase and its reason, each pod's phase, readiness and
    /// restarts, and the namespace's Events other than the operator's routine ones.
    pub async fn summary(&self, name: &str) -> String {
        use k8s_openapi::api::events::v1::Event;
        let mut out = String::new();
        if let Ok(rc) = self.clusters().get(name).await {
            let st = rc.status.unwrap_or_default();
            out.push_str(&format!(
                "phase {:?} ({}), primary {:?}, ready {}, sentinels ready {};",
                st.phase,
                st.phase_reason,
                st.current_primary,
                st.ready_instances,
                st.sentinel_ready_instances
            ));
        }
        let pods = self.api::<Pod>().list(&Default::default()).await;
        for p in pods.map(|l| l.items).unwrap_or_default() {
            let s = p.status.clone().unwrap_or_default();
            let ready = s
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let restarts: i32 = s
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            out.push_str(&format!(
                " {} {} ready={ready} restarts={restarts} ip={};",
                p.metadata.name.unwrap_or_default(),
                s.phase.unwrap_or_default(),
                s.pod_ip.unwrap_or_default()
            ));
        }
        let events = Api::<Event>::namespaced(self.admin.clone(), &self.ns.name)
            .list(&Default::default())
            .await;
        let mut seen = std::collections::BTreeMap::<String, u32>::new();
        for e in events.map(|l| l.items).unwrap_or_default() {
            let reason = e.reason.unwrap_or_default();
            let about = e.regarding.and_then(|r| r.name).unwrap_or_default();
            if e.type_.as_deref() == Some("Warning")
                || ["Killing", "BackOff"].contains(&reason.as_str())
            {
                *seen
                    .entry(format!("{reason}/{about}: {}", e.note.unwrap_or_default()))
                    .or_default() += 1;
            }
        }
        for (e, n) in seen {
            out.push_str(&format!(" event {e} (x{n});"));
        }
        out
    }

    /// Prints the last lines of every container run of the namespace's process-node pods
    /// (the current and the previous one), for a failure's diagnosis.
    pub async fn print_pod_logs(&self) {
        const LINES: usize = 40;
        let pods = self.api::<Pod>().list(&Default::default()).await;
        for p in pods.map(|l| l.items).unwrap_or_default() {
            let name = p.metadata.name.clone().unwrap_or_default();
            let statuses = p.status.as_ref().and_then(|s| s.container_statuses.clone());
            for c in statuses.unwrap_or_default() {
                for previous in [true, false] {
                    let Ok(text) = testenv::procnode::logs(&p, &c.name, previous) else {
                        continue;
                    };
                    let lines: Vec<&str> = text.lines().collect();
                    let tail = &lines[lines.len().saturating_sub(LINES)..];
                    let run = if previous { "previous" } else { "current" };
                    eprintln!(
                        "--- {name}/{} ({run} run, last {} lines)",
                        c.name,
                        tail.len()
                    );
                    for l in tail {
                        eprintln!("    {l}");
                    }
                }
            }
        }
    }

    /// Waits until RedisCluster `name` is Healthy with `instances` Ready instances: up to
    /// twice [`T`], since a new replica's first full synchronisation of real redis-server
    /// processes is what slows most when CI's cores are saturated (88 % busy over a whole
    /// test phase, where `redis::deployment` once waited out 120 s for a third replica).
    pub async fn healthy(&self, name: &str, instances: i32) -> RedisCluster {
        self.wait(name, 2 * T, move |c| {
            c.status.as_ref().is_some_and(|s| {
                s.phase == Some(redis::crd::ClusterPhase::Healthy)
                    && s.ready_instances == instances
                    && s.observed_generation == c.metadata.generation.unwrap_or_default()
            })
        })
        .await
    }

    /// The password in the cluster's auth Secret.
    pub async fn password(&self, name: &str) -> String {
        let s = self
            .api::<Secret>()
            .get(&redis::names::auth_secret(name))
            .await
            .expect("auth secret");
        let b = s.data.expect("data")["password"].0.clone();
        String::from_utf8(b).expect("utf-8")
    }

    /// What instance `pod` of cluster `name` reports on its API (with the cluster's CA and
    /// token from the Secrets the operator made), `None` when it does not answer.
    pub async fn report(
        &self,
        name: &str,
        pod: &str,
    ) -> Option<redis::instance_api::InstanceReport> {
        use redis::instance_api;
        use redis::instance_client::Instances;
        let secrets = self.api::<Secret>();
        let key = |s: &Secret, k: &str| {
            let b = s.data.as_ref()?.get(k)?.0.clone();
            String::from_utf8(b).ok()
        };
        let server = secrets.get(&instance_api::server_secret(name)).await.ok()?;
        let token = secrets.get(&instance_api::token_secret(name)).await.ok()?;
        let creds = redis::instance_client::Credentials {
            ca_pem: key(&server, "ca.crt")?,
            server_name: instance_api::server_name(name, &self.ns.name),
            token: key(&token, instance_api::TOKEN_KEY)?,
        };
        let client = redis::instance_client::https::HttpsInstances::new(&creds).ok()?;
        let ip = self.pod_ip(pod).await?;
        client.status(&ip).await.ok()
    }

    /// Waits until an Event with `reason` is recorded about `regarding`; their notes.
    pub async fn wait_event(&self, regarding: &str, reason: &str) -> Vec<String> {
        use k8s_openapi::api::events::v1::Event;
        let api = Api::<Event>::namespaced(self.admin.clone(), &self.ns.name);
        let what = format!("a {reason} Event about {regarding}");
        testenv::eventually(&what, T, || async {
            let list = api.list(&Default::default()).await.ok()?;
            let notes: Vec<String> = list
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
                .filter(|e| e.reason.as_deref() == Some(reason))
                .map(|e| e.note.unwrap_or_default())
                .collect();
            (!notes.is_empty()).then_some(notes)
        })
        .await
        .expect("the Event")
    }

    /// The IP of pod `name`, when it has one.
    pub async fn pod_ip(&self, name: &str) -> Option<String> {
        let p = self.api::<Pod>().get_opt(name).await.ok()??;
        p.status?.pod_ip.filter(|ip| !ip.is_empty())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some((stop, task)) = self.operator.take() {
            stop.cancel();
            task.abort();
        }
    }
}

/// The instances `rc`'s status reports as `master`.
pub fn masters(rc: &RedisCluster) -> Vec<String> {
    rc.status
        .iter()
        .flat_map(|s| s.instances_status.iter())
        .filter(|(_, i)| i.role == "master")
        .map(|(n, _)| n.clone())
        .collect()
}

/// Records, in order, the data pods of `cluster` that are deleted (by name) until dropped.
pub fn record_deletions(
    env: &Env,
    cluster: &str,
) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::ResourceExt;
    use kube::runtime::watcher;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let cfg = watcher::Config::default().labels(&format!(
        "redis.io/cluster={cluster},redis.io/workload=data"
    ));
    let stream = watcher(env.api::<Pod>(), cfg);
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut deleting = std::collections::BTreeSet::new();
        while let Some(Ok(ev)) = stream.next().await {
            if let watcher::Event::Apply(p) | watcher::Event::Delete(p) = ev {
                let uid = p.uid().unwrap_or_default();
                if p.metadata.deletion_timestamp.is_some() && deleting.insert(uid) {
                    out.lock().expect("deleted").push(p.name_any());
                }
            }
        }
    });
    (seen, task)
}

/// Records `f` of every version of RedisCluster `name` (as a watch sees them), until the
/// returned task is aborted.
pub fn record_versions<T: Send + 'static>(
    env: &Env,
    name: &str,
    f: impl Fn(RedisCluster) -> T + Send + 'static,
) -> (Arc<Mutex<Vec<T>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen: Arc<Mutex<Vec<T>>> = Arc::new(Mutex::new(Vec::new()));
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(env.clusters(), cfg).applied_objects();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(rc)) = stream.next().await {
            let v = f(rc);
            out.lock().expect("seen").push(v);
        }
    });
    (seen, task)
}
