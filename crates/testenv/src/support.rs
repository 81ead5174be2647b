//! Test support on the shared local plane: a client, a fresh namespace per test, CRD
//! installation from Rust types, request counting, and waits with deadlines (never fixed sleeps).

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::process::CommandExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::plane;

static UP: OnceLock<Result<(), String>> = OnceLock::new();

/// Sends this test binary's `tracing` output to the test harness's captured output (shown for
/// a failing test only), filtered by `RUST_LOG` or else by `default` (an `EnvFilter`
/// directive). Logs of tasks spawned on a test's own runtime land in that test's output.
pub fn capture_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Makes sure the shared plane runs (once per process; safe when several test binaries start
/// at once) and points `KUBECONFIG`-less callers at it.
pub fn ensure_plane() {
    let r = UP.get_or_init(|| match plane::up() {
        Ok(up) => {
            if !up.reused {
                eprintln!(
                    "testenv: started the local control plane in {:.1?}",
                    up.took
                );
            }
            Ok(())
        }
        Err(e) => Err(format!("{e:#}")),
    });
    if let Err(e) = r {
        panic!("the local control plane is not available: {e}");
    }
}

/// An admin client for the shared local control plane, starting the plane if needed.
pub async fn client() -> Client {
    ensure_plane();
    plane::admin_client()
        .await
        .expect("admin client for the local plane")
}

/// Requests seen by a [`counting_client`] (or a counting proxy), by verb and by verb and
/// resource.
#[derive(Clone, Default, Debug)]
pub struct RequestCounts(Arc<Mutex<Counted>>);

#[derive(Default, Debug)]
struct Counted {
    verbs: BTreeMap<String, u64>,
    resources: BTreeMap<String, u64>,
}

impl RequestCounts {
    #[cfg(test)]
    fn record(&self, verb: &str) {
        *self.lock().verbs.entry(verb.to_string()).or_default() += 1;
    }
    /// Counts one request by its method and URI: its verb ([`verb_of`]) and its verb and
    /// resource ([`resource_of`]).
    pub fn record_request(&self, method: &http::Method, uri: &http::Uri) {
        let verb = verb_of(method, uri);
        let mut c = self.lock();
        *c.verbs.entry(verb.to_string()).or_default() += 1;
        let key = format!("{verb} {}", resource_of(uri.path()));
        *c.resources.entry(key).or_default() += 1;
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    /// Counts by verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub fn by_verb(&self) -> BTreeMap<String, u64> {
        self.lock().verbs.clone()
    }
    /// Counts by `"<verb> <resource>"`, e.g. `"list pods"`, `"patch redroidinstances/status"`.
    pub fn by_resource(&self) -> BTreeMap<String, u64> {
        self.lock().resources.clone()
    }
    /// Requests that change something: create, update, patch, delete, deletecollection.
    pub fn writes(&self) -> u64 {
        self.by_verb()
            .iter()
            .filter(|(v, _)| !matches!(v.as_str(), "get" | "list" | "watch"))
            .map(|(_, n)| n)
            .sum()
    }
    /// All requests.
    pub fn total(&self) -> u64 {
        self.by_verb().values().sum()
    }
    /// An independent copy of the counts so far.
    pub fn snapshot(&self) -> RequestCounts {
        let c = self.lock();
        RequestCounts(Arc::new(Mutex::new(Counted {
            verbs: c.verbs.clone(),
            resources: c.resources.clone(),
        })))
    }
    /// Forgets everything counted so far.
    pub fn reset(&self) {
        let mut c = self.lock();
        c.verbs.clear();
        c.resources.clear();
    }
}

/// The resource (and subresource) a request path names: `pods`, `pods/status`,
/// `redroidinstances`, `namespaces`; `-` for a path that names none (`/version`, `/apis`).
pub fn resource_of(path: &str) -> String {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.first() {
        Some(&"api") => &segs[2.min(segs.len())..],
        Some(&"apis") => &segs[3.min(segs.len())..],
        _ => return "-".into(),
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    match rest {
        [] => "-".into(),
        [resource] | [resource, _] => (*resource).to_owned(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
    }
}

/// The Kubernetes verb of a request, as the apiserver's audit log would name it.
pub fn verb_of(method: &http::Method, uri: &http::Uri) -> &'static str {
    let query = uri.query().unwrap_or_default();
    let is_watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    match *method {
        http::Method::GET if is_watch => "watch",
        http::Method::GET if is_collection(uri.path()) => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if is_collection(uri.path()) => "deletecollection",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

// /api/v1/namespaces/x/pods is a collection; /api/v1/namespaces/x/pods/p is not; so is /api/v1/pods.
fn is_collection(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.first() {
        Some(&"api") => &segs[2.min(segs.len())..],
        Some(&"apis") => &segs[3.min(segs.len())..],
        _ => return false,
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    rest.len() == 1
}

/// An admin client whose requests are counted by verb.
pub async fn counting_client() -> (Client, RequestCounts) {
    ensure_plane();
    let kc = kube::config::Kubeconfig::read_from(plane::kubeconfig_path()).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    counting(cfg).expect("client builder")
}

/// A client for `cfg` (an admin's, a ServiceAccount's) whose requests are counted by verb.
pub fn counting(cfg: kube::Config) -> anyhow::Result<(Client, RequestCounts)> {
    let counts = RequestCounts::default();
    let c = counts.clone();
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        c.record_request(req.method(), req.uri());
        req
    });
    let client = kube::client::ClientBuilder::try_from(cfg)?
        .with_layer(&layer)
        .build();
    Ok((client, counts))
}

/// A fresh namespace for one test, deleted (in the background) when dropped.
/// Set `FLOTILLA_KEEP_NAMESPACES=1` to keep them for debugging.
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` labelled `flotilla.dev/test=true`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = format!("{}-{}", prefix.trim_end_matches('-'), short_random());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"flotilla.dev/test": "true"}}
        }))
        .expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        Self { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("FLOTILLA_KEEP_NAMESPACES").is_some() {
            return;
        }
        // Fire and forget, so the deletion outlives the test process. The operator under test
        // has usually stopped by now, so custom resources it put finalizers on would keep the
        // namespace Terminating forever (and the namespace controller busy), as would pods a
        // stopped kubelet stand-in (vksim) still holds: if the namespace is not gone within
        // 30 s, drop the finalizers of what is left in it.
        let Some(state) = plane::read_state() else {
            return;
        };
        let script = r#"k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
k delete namespace "$NS" --wait=false --ignore-not-found
k wait --for=delete "namespace/$NS" --timeout=30s && exit 0
for r in pods $(k api-resources --namespaced --verbs=list -o name | grep '\.'); do
  k -n "$NS" get "$r" -o name 2>/dev/null | while read -r o; do
    k -n "$NS" patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}'
  done
done"#;
        let _ = std::process::Command::new("sh")
            .args(["-c", script])
            .env("KUBECTL", state.bin_dir.join("kubectl"))
            .env("KUBECONFIG", plane::kubeconfig_path())
            .env("NS", &self.name)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn();
    }
}

fn short_random() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    format!("{:08x}", h.finish() as u32)
}

/// Installs (server-side applies) a CRD and waits until it is Established.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd
        .metadata
        .name
        .clone()
        .ok_or_else(|| anyhow::anyhow!("CRD without a name"))?;
    api.patch(
        &name,
        &PatchParams::apply("flotilla-testenv").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api, &name, conditions::is_crd_established()),
    )
    .await
    .map_err(|_| anyhow::anyhow!("CRD {name} not Established within 30s"))??;
    Ok(())
}

/// Waits (by watching) until `cond` holds for the named object, or fails after `timeout`.
/// A watch that breaks (for example "too old resource version" under load) is restarted.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    cond: impl Fn(&K) -> bool + Clone + Send + 'static,
) -> anyhow::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let c = cond.clone();
        let watch = await_condition(api.clone(), name, move |o: Option<&K>| o.is_some_and(&c));
        match tokio::time::timeout_at(deadline, watch).await {
            Ok(Ok(Some(obj))) => return Ok(obj),
            Ok(Ok(None)) => anyhow::bail!("{name} vanished"),
            Ok(Err(e)) => tracing::debug!(error = %e, "watch on {name} broke; restarting it"),
            Err(_) => {
                let last = api.get_opt(name).await.ok().flatten();
                anyhow::bail!("timed out after {timeout:?} waiting on {name}; last seen: {last:#?}")
            }
        }
    }
}

/// Waits (by watching) until the named object is gone; a broken watch is restarted.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let watch = await_condition(api.clone(), name, |o: Option<&K>| o.is_none());
        match tokio::time::timeout_at(deadline, watch).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => tracing::debug!(error = %e, "watch on {name} broke; restarting it"),
            Err(_) => anyhow::bail!("timed out after {timeout:?} waiting for {name} to be deleted"),
        }
    }
}

/// Polls `probe` (backing off up to 500 ms) until it yields `Some`, failing after `timeout`
/// with `what` in the message. For conditions no single watch can express.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(25);
    loop {
        if let Some(v) = probe().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(delay).await; // the wait between polls of a condition with a deadline
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// Lists objects matching a label selector.
pub async fn list_labelled<K>(api: &Api<K>, selector: &str) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&kube::api::ListParams::default().labels(selector))
        .await?
        .items)
}

/// Creates a 1 GiB ReadWriteMany claim of the default StorageClass (provisioned by kwok) and
/// waits until it is Bound, so Pods that mount it can be scheduled.
pub async fn bound_claim(client: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), &pvc).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    wait_for(
        &api,
        name,
        Duration::from_secs(60),
        |c: &PersistentVolumeClaim| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        },
    )
    .await?;
    Ok(())
}

/// Runs `binary` with `args` as a user would start it wrongly (`RUST_BACKTRACE=1`, no
/// `RUST_LOG`) and asserts what every Flotilla binary promises for a start-up error: exit code
/// 1 and exactly one line on stderr, never a backtrace. Returns that line.
pub fn start_up_error(binary: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(binary)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the binary");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line only: {stderr}");
    lines[0].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_classified_like_the_apiserver_does() {
        let v = |m: &str, u: &str| verb_of(&m.parse().unwrap(), &u.parse().unwrap());
        assert_eq!(v("GET", "/api/v1/namespaces/a/pods"), "list");
        assert_eq!(v("GET", "/api/v1/pods"), "list");
        assert_eq!(
            v(
                "GET",
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1"
            ),
            "watch"
        );
        assert_eq!(v("GET", "/api/v1/namespaces/a/pods/p"), "get");
        assert_eq!(v("GET", "/api/v1/namespaces"), "list");
        assert_eq!(v("GET", "/api/v1/namespaces/a"), "get");
        assert_eq!(v("GET", "/apis/apps/v1/namespaces/a/deployments/d"), "get");
        assert_eq!(
            v("PATCH", "/apis/x.io/v1/namespaces/a/things/t/status"),
            "patch"
        );
        assert_eq!(v("DELETE", "/api/v1/namespaces/a/pods"), "deletecollection");
        assert_eq!(v("POST", "/api/v1/namespaces/a/pods"), "create");
    }

    #[test]
    fn resources_name_the_kind_and_subresource() {
        assert_eq!(resource_of("/api/v1/namespaces/a/pods"), "pods");
        assert_eq!(resource_of("/api/v1/namespaces/a/pods/p"), "pods");
        assert_eq!(
            resource_of("/api/v1/namespaces/a/pods/p/status"),
            "pods/status"
        );
        assert_eq!(resource_of("/api/v1/pods"), "pods");
        assert_eq!(resource_of("/api/v1/namespaces"), "namespaces");
        assert_eq!(resource_of("/api/v1/namespaces/a"), "namespaces");
        assert_eq!(
            resource_of("/apis/redroid.isning.moe/v1alpha1/namespaces/a/redroidinstances/i/status"),
            "redroidinstances/status"
        );
        assert_eq!(resource_of("/version"), "-");
        assert_eq!(resource_of("/apis"), "-");
    }

    #[test]
    fn counts_separate_reads_from_writes() {
        let c = RequestCounts::default();
        for v in ["get", "list", "watch", "patch", "create", "get"] {
            c.record(v);
        }
        assert_eq!(c.writes(), 2);
        assert_eq!(c.total(), 6);
        assert_eq!(c.by_verb()["get"], 2);
        c.record_request(
            &http::Method::GET,
            &"/api/v1/namespaces/a/pods".parse().unwrap(),
        );
        assert_eq!(c.by_resource()["list pods"], 1);
        assert_eq!(c.total(), 7);
        c.reset();
        assert_eq!(c.total(), 0);
    }
}
