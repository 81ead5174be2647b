//! End-to-end support for the cocoon operator's tests: the real local control plane, a real
//! OCI registry, the vk-cocoon simulator and the operator itself, in this process.
//!
//! - [`Env::start`] gives each test a fresh namespace, its own registry, a simulator playing
//!   vk-cocoon for that namespace only, and an operator (both controllers) scoped to that
//!   namespace with `--watch-namespace`, so tests running in parallel (and other test
//!   binaries on the shared plane) never act on each other's objects.
//! - [`OperatorHandle`] starts, stops and restarts the operator (same flags, same registry)
//!   and reads its metrics from the in-process registry.
//! - Waits are on conditions with deadlines ([`wait_cr`], [`testenv::eventually`]), never
//!   fixed sleeps.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use cocoon::crd::{CocoonHibernation, Desire, HibernationPhase};
use cocoon::hibernation::decide::Timeouts;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kit::controller::Operator;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testenv::TestNamespace;
use testenv::registry::RegistryServer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vksim::{SimConfig, Simulator};

/// The default deadline of a wait.
pub const T: Duration = Duration::from_secs(60);
/// The operator's ServiceAccount (deploy/cocoon/rbac), created in each test's namespace.
pub const OPERATOR_SA: &str = "cocoon-operator";
/// The node pool the simulator's nodes are labelled with.
pub const POOL: &str = "default";

/// What the operator under test is started with.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Deadlines of the CocoonHibernation controller.
    pub hibernation: Timeouts,
    /// Extra `cocoon-operator` flags.
    pub flags: Vec<String>,
}

/// One test's world: client, namespace, registry, simulator and operator.
pub struct Env {
    /// Admin client of the local plane.
    pub client: Client,
    /// The test's namespace (deleted when dropped).
    pub ns: TestNamespace,
    /// The registry; `None` once [`Env::stop_registry`] took it down.
    pub registry: Option<RegistryServer>,
    /// The registry's URL (still known after it stopped).
    pub registry_url: String,
    /// vk-cocoon, simulated for this namespace.
    pub sim: Simulator,
    /// The operator, scoped to this namespace, running as its ServiceAccount.
    pub operator: OperatorHandle,
    _rbac: testenv::rbac::ClusterCleanup,
}

impl Env {
    /// Everything with the default options.
    pub async fn start(prefix: &str) -> Env {
        Self::start_with(prefix, Options::default()).await
    }

    /// Everything, the operator started with `options`.
    pub async fn start_with(prefix: &str, options: Options) -> Env {
        let client = testenv::client().await;
        for crd in cocoon::crd::crds() {
            testenv::install_crd(&client, crd)
                .await
                .expect("install CRD");
        }
        let ns = TestNamespace::new(&client, prefix).await;
        let registry = RegistryServer::start().await.expect("start registry");
        let registry_url = registry.url();
        // vk-cocoon on the plane's kwok nodes, pool `default`, for this namespace's pods.
        let cfg = SimConfig {
            registry_url: registry_url.clone(),
            registry_prefix: None,
            namespace: Some(ns.name.clone()),
            nodes: vksim::Nodes::default(),
            pool: POOL.to_owned(),
        };
        let sim = Simulator::start(client.clone(), cfg)
            .await
            .expect("start simulator");
        // The operator runs as its own ServiceAccount under deploy/cocoon/rbac, not as admin:
        // a permission missing from the hand-written role fails these tests.
        let rbac = testenv::workspace_root().join("deploy/cocoon/rbac");
        let cleanup = testenv::rbac::install_rbac(&client, &rbac, "cocoon-system", &ns.name)
            .await
            .expect("install the operator's RBAC");
        let operator_client = testenv::service_account_client(&client, &ns.name, OPERATOR_SA)
            .await
            .expect("operator ServiceAccount client");
        let operator =
            OperatorHandle::start(operator_client, &registry_url, &ns.name, options).await;
        Env {
            _rbac: cleanup,
            client,
            ns,
            registry: Some(registry),
            registry_url,
            sim,
            operator,
        }
    }

    /// Kills the registry: every later registry call fails to connect.
    pub fn stop_registry(&mut self) {
        drop(self.registry.take());
    }

    /// Namespaced API of `K`.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    /// The VM name this test gives pod `pod`: `vk-<namespace>-<pod>`.
    pub fn vm(&self, pod: &str) -> String {
        format!("vk-{}-{pod}", self.ns.name)
    }

    /// Creates a bare cocoon pod (no CocoonSet): VM name, generation stamp `1`, pool selector.
    /// `with_vm: false` leaves the VM name out.
    pub async fn create_pod(&self, name: &str, with_vm: bool) -> Pod {
        let mut annotations = json!({cocoon::names::ANN_GENERATION: "1"});
        if with_vm {
            annotations[cocoon::names::ANN_VM_NAME] = json!(self.vm(name));
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "nodeSelector": {cocoon::names::NODE_POOL: POOL},
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": cocoon::names::CONTAINER_NAME, "image": cocoon::names::PLACEHOLDER_IMAGE}],
            },
        }))
        .expect("pod");
        self.api::<Pod>()
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod")
    }

    /// Creates pod `name` and waits until the simulator reports its VM live.
    pub async fn live_pod(&self, name: &str) -> Pod {
        self.create_pod(name, true).await;
        self.wait_pod(name, "VM live", cocoon::pods::state::vm_live)
            .await
    }

    /// Waits until pod `name` satisfies `cond`.
    pub async fn wait_pod(&self, name: &str, what: &str, cond: fn(&Pod) -> bool) -> Pod {
        testenv::wait_for(&self.api::<Pod>(), name, T, cond)
            .await
            .unwrap_or_else(|e| panic!("pod {name}: {what}: {e:#}"))
    }

    /// Creates a CocoonHibernation `name` for pod `pod`.
    pub async fn create_cr(&self, name: &str, pod: &str, desire: Desire) -> CocoonHibernation {
        let cr: CocoonHibernation = serde_json::from_value(json!({
            "apiVersion": "cocoonset.cocoonstack.io/v1", "kind": "CocoonHibernation",
            "metadata": {"name": name},
            "spec": {"podRef": {"name": pod}, "desire": desire},
        }))
        .expect("cr");
        self.api::<CocoonHibernation>()
            .create(&PostParams::default(), &cr)
            .await
            .expect("create CocoonHibernation")
    }

    /// Changes the desire of CR `name`.
    pub async fn set_desire(&self, name: &str, desire: Desire) {
        let patch = Patch::Merge(json!({"spec": {"desire": desire}}));
        self.api::<CocoonHibernation>()
            .patch(name, &PatchParams::default(), &patch)
            .await
            .expect("patch desire");
    }

    /// Sets annotation `key=value` on CR `name` (an edit: it triggers a pass).
    pub async fn annotate_cr(&self, name: &str, key: &str, value: &str) {
        let patch = Patch::Merge(json!({"metadata": {"annotations": {key: value}}}));
        self.api::<CocoonHibernation>()
            .patch(name, &PatchParams::default(), &patch)
            .await
            .expect("annotate CocoonHibernation");
    }

    /// Waits until CR `name` is in `phase`.
    pub async fn wait_phase(&self, name: &str, phase: HibernationPhase) -> CocoonHibernation {
        wait_cr(&self.api(), name, phase.as_str(), move |cr| {
            phase_of(cr) == Some(phase)
        })
        .await
    }

    /// Whether `<vm>:<tag>` is in the registry (which must be running).
    pub async fn tag_exists(&self, vm: &str, tag: &str) -> bool {
        testenv::registry::tag_exists(&self.registry_url, None, vm, tag)
            .await
            .expect("probe the test registry")
    }

    /// Waits until `<vm>:<tag>` is present (`true`) or absent (`false`).
    pub async fn wait_tag(&self, vm: &str, tag: &str, present: bool) {
        let what = format!("{vm}:{tag} present={present}");
        testenv::eventually(&what, T, || async {
            (self.tag_exists(vm, tag).await == present).then_some(())
        })
        .await
        .expect("tag state");
    }

    /// Events with `reason` about the object called `regarding` in this namespace.
    pub async fn events(&self, regarding: &str, reason: &str) -> Vec<Event> {
        let all = self
            .api::<Event>()
            .list(&ListParams::default())
            .await
            .expect("list events");
        all.items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
            .collect()
    }

    /// Waits until at least one Event with `reason` about `regarding` exists; returns them.
    pub async fn wait_event(&self, regarding: &str, reason: &str) -> Vec<Event> {
        testenv::eventually(&format!("Event {reason} on {regarding}"), T, || async {
            let found = self.events(regarding, reason).await;
            (!found.is_empty()).then_some(found)
        })
        .await
        .expect("event")
    }
}

/// The phase of `cr`.
pub fn phase_of(cr: &CocoonHibernation) -> Option<HibernationPhase> {
    cr.status.as_ref().and_then(|s| s.phase)
}

/// The Ready condition of `cr`.
pub fn ready_of(
    cr: &CocoonHibernation,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let s = cr.status.as_ref().expect("status");
    kit::conditions::get(&s.conditions, "Ready")
        .expect("Ready condition")
        .clone()
}

/// Waits until CR `name` satisfies `cond`; `what` names it in the failure.
pub async fn wait_cr(
    api: &Api<CocoonHibernation>,
    name: &str,
    what: &str,
    cond: impl Fn(&CocoonHibernation) -> bool + Clone + Send + 'static,
) -> CocoonHibernation {
    testenv::wait_for(api, name, T, cond)
        .await
        .unwrap_or_else(|e| panic!("CocoonHibernation {name}: {what}: {e:#}"))
}

/// The operator under test, run in this process.
pub struct OperatorHandle {
    client: Client,
    registry_url: String,
    namespace: String,
    options: Options,
    token: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    metrics: kit::metrics::Metrics,
}

impl OperatorHandle {
    /// Starts the operator against `registry_url`, watching `namespace` only.
    pub async fn start(
        client: Client,
        registry_url: &str,
        namespace: &str,
        options: Options,
    ) -> Self {
        let mut h = OperatorHandle {
            client,
            registry_url: registry_url.to_owned(),
            namespace: namespace.to_owned(),
            options,
            token: CancellationToken::new(),
            task: None,
            metrics: kit::metrics::Metrics::new(),
        };
        h.launch();
        h
    }

    /// The operator's flags: no leader election, ephemeral ports, this registry.
    pub fn flags(&self) -> cocoon::run::Flags {
        let mut args = vec![
            "cocoon-operator".to_owned(),
            "--leader-elect=false".into(),
            "--metrics-addr=127.0.0.1:0".into(),
            "--probe-addr=127.0.0.1:0".into(),
            "--log-level=info,kube=warn".into(),
            format!("--oci-registry={}", self.registry_url),
            format!("--watch-namespace={}", self.namespace),
        ];
        args.extend(self.options.flags.iter().cloned());
        cocoon::run::Flags::try_parse_from(args).expect("operator flags")
    }

    // The wiring of `cocoon::run` (flags, registry, metrics, context, both controllers scoped
    // by `--watch-namespace`), kept here so the test reads the metrics registry and passes the
    // hibernation deadlines directly instead of through process-wide environment variables.
    fn launch(&mut self) {
        let flags = self.flags();
        flags.validate().expect("valid flags");
        let registry = flags.registry_settings().build().expect("registry");
        self.token = CancellationToken::new();
        let operator = Operator::new(cocoon::run::OPERATOR_NAME, flags.operator.clone())
            .with_client(self.client.clone())
            .with_shutdown(self.token.clone());
        self.metrics = operator.metrics().clone();
        let metrics = cocoon::metrics::CocoonMetrics::register(operator.metrics());
        let timeouts = self.options.hibernation;
        self.task = Some(tokio::spawn(operator.run(move |rc| async move {
            let ctx = Arc::new(cocoon::context::Context::new(
                rc.client.clone(),
                registry,
                metrics,
            ));
            cocoon::run::run_controllers(ctx, rc, &flags, timeouts).await
        })));
    }

    /// Stops the operator and waits until it has drained.
    pub async fn stop(&mut self) {
        self.token.cancel();
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(T, task).await.expect("operator stops");
            result.expect("operator task").expect("operator result");
        }
    }

    /// Stops (if running) and starts the operator again, with fresh in-memory state.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.launch();
    }

    /// The operator's metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.metrics.encode()
    }

    /// The sum of the samples of `name` whose labels include every `key="value"` of `labels`.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sum_samples(&self.metrics_text(), name, labels)
    }
}

impl Drop for OperatorHandle {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// The sum of the samples of `name` in `text` whose labels include all of `labels`.
pub fn sum_samples(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

/// Reconciles of the CocoonHibernation controller so far, by any result.
pub fn hibernation_passes(op: &OperatorHandle) -> f64 {
    op.metric(
        "controller_runtime_reconcile_total",
        &[("controller", cocoon::hibernation::CONTROLLER)],
    )
}

/// Reconciles of the CocoonSet controller so far, by any result.
pub fn set_passes(op: &OperatorHandle) -> f64 {
    op.metric(
        "controller_runtime_reconcile_total",
        &[("controller", cocoon::cocoonset::CONTROLLER)],
    )
}

/// Events of `list` and their total occurrence count (a series counts each occurrence).
pub fn occurrences(list: &[Event]) -> i32 {
    list.iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// Deletes CR `name` (without waiting).
pub async fn delete_cr(env: &Env, name: &str) {
    env.api::<CocoonHibernation>()
        .delete(name, &Default::default())
        .await
        .expect("delete CocoonHibernation");
}
