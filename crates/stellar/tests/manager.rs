//! The `stellar` controller-manager as a process of its own, against the second WDS
//! (`wds2`), the ITS and the WECs: wrapping several objects per ManifestWork, status clearing
//! across a restart, leader election between two replicas, and `stellar where`. The tests of
//! this binary run one at a time, and never beside the chaos test's runs (they all start
//! controller-managers for the same WDS): each holds `spaces::hold(WDS2)`.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use stellar::api::Binding;
use stellar::names;
use stellar::ocm::ManifestWork;
use support::{ITS, WDS2, create, unique, until};
use testenv::spaces;

/// A `stellar` child process, its stderr in a file; killed when dropped.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn start(tag: &str, env: &[(&str, &str)], args: &[&str]) -> Self {
        let log = std::env::temp_dir().join(format!("{}.log", unique(tag)));
        let err = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stellar"));
        cmd.args(args)
            .env("RUST_LOG", "stellar=info,kit=info")
            .stdout(Stdio::null())
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start stellar");
        Self { child, log }
    }

    fn manager(tag: &str, env: &[(&str, &str)], extra: &[&str]) -> Self {
        let wds = spaces::kubeconfig(WDS2);
        let its = spaces::kubeconfig(ITS);
        let mut args = vec![
            "controller-manager",
            "--wds-kubeconfig",
            wds.to_str().expect("path"),
            "--its-kubeconfig",
            its.to_str().expect("path"),
            "--wds-name",
            WDS2,
        ];
        args.extend_from_slice(extra);
        Self::start(tag, env, &args)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {sig}");
    }

    async fn exit_code(&mut self, secs: u64) -> Option<i32> {
        until("the process to exit", secs, || {
            let r = self.child.try_wait().expect("try_wait");
            async move { r }
        })
        .await
        .code()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn setup() -> (Client, Client, Client) {
    support::start_agents();
    let wds = support::client(WDS2).await;
    let its = support::client(ITS).await;
    let wec1 = support::client("wec1").await;
    (wds, its, wec1)
}

async fn namespace(wds: &Client, name: &str) {
    create(
        wds,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await
    .expect("namespace");
}

async fn config_map(wds: &Client, ns: &str, name: &str, bytes: usize) {
    create(
        wds,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns, "labels": {"bench": ns}},
               "data": {"v": "x".repeat(bytes)}}),
    )
    .await
    .expect("config map");
}

async fn policy(wds: &Client, name: &str, ns: &str, wec: &str, clauses: Value) {
    let mut downsync = vec![json!({"resources": ["namespaces"], "objectNames": [ns]})];
    downsync.extend(clauses.as_array().cloned().unwrap_or_default());
    create(
        wds,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": name},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": wec}}], "downsync": downsync}}),
    )
    .await
    .expect("policy");
}

// This WDS's ManifestWorks of `binding` in `wec`'s mailbox: name → manifest names.
async fn works(its: &Client, wec: &str, binding: &str) -> Vec<(String, Vec<String>)> {
    let sel = format!(
        "{}={binding},{}={WDS2}",
        names::BINDING_LABEL,
        names::WDS_LABEL
    );
    let mut out: Vec<(String, Vec<String>)> = Api::<ManifestWork>::namespaced(its.clone(), wec)
        .list(&ListParams::default().labels(&sel))
        .await
        .expect("list works")
        .items
        .into_iter()
        .map(|mw| {
            let names = mw
                .spec
                .workload
                .manifests
                .iter()
                .map(|m| {
                    m["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            (mw.name_any(), names)
        })
        .collect();
    out.sort();
    out
}

// ConfigMap name → UID in `ns` of a WEC (only the test's, labelled).
async fn wec_maps(wec: &Client, ns: &str) -> Vec<(String, String)> {
    let api: Api<ConfigMap> = Api::namespaced(wec.clone(), ns);
    match api
        .list(&ListParams::default().labels(&format!("bench={ns}")))
        .await
    {
        Ok(l) => {
            let mut v: Vec<_> = l
                .items
                .into_iter()
                .map(|c| (c.name_any(), c.uid().unwrap_or_default()))
                .collect();
            v.sort();
            v
        }
        Err(_) => vec![],
    }
}

#[tokio::test]
async fn several_objects_per_manifest_work_with_upstreams_limits() {
    let _serving = spaces::hold(WDS2).await.expect("hold wds2");
    let (wds, its, wec1) = setup().await;
    let wec2 = support::client("wec2").await;
    let _cm = Proc::manager(
        "wrap",
        &[],
        &[
            "--controllers",
            "binding,transport,hub",
            "--max-num-wrapped",
            "2",
            "--max-size-wrapped",
            "3000",
        ],
    );
    let ns = unique("wrap");
    namespace(&wds, &ns).await;
    for i in 0..5 {
        config_map(&wds, &ns, &format!("c{i}"), 10).await;
    }
    config_map(&wds, &ns, "big", 4000).await;
    let name = unique("wrap");
    policy(
        &wds,
        &name,
        &ns,
        "wec1",
        json!([{"resources": ["configmaps"], "namespaces": [&ns],
                "objectSelectors": [{"matchLabels": {"bench": &ns}}]}]),
    )
    .await;
    // Namespace + 5 small ConfigMaps, two per ManifestWork, upstream's shard names; "big" is
    // over the size limit: named in the Binding's errors, not delivered.
    let shards: Vec<String> = (0..3).map(|i| format!("{name}-{WDS2}-{i}")).collect();
    let got = until("three ManifestWorks of two objects in wec1", 120, || {
        let its = its.clone();
        let (name, shards) = (name.clone(), shards.clone());
        async move {
            let w = works(&its, "wec1", &name).await;
            let names: Vec<String> = w.iter().map(|(n, _)| n.clone()).collect();
            (names == shards && w.iter().all(|(_, m)| m.len() == 2)).then_some(w)
        }
    })
    .await;
    let carried: Vec<String> = got.into_iter().flat_map(|(_, m)| m).collect();
    assert!(!carried.contains(&"big".to_owned()), "{carried:?}");
    let bindings: Api<Binding> = Api::all(wds.clone());
    until("the oversized object in the Binding's errors", 60, || {
        let bindings = bindings.clone();
        let name = name.clone();
        async move {
            let b = bindings.get_opt(&name).await.ok()??;
            b.status?
                .errors
                .iter()
                .any(|e| e.contains("configmaps") && e.contains("/big") && e.contains("3000"))
                .then_some(())
        }
    })
    .await;
    let small: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    let on_wec1 = until("the five ConfigMaps on wec1", 120, || {
        let (wec1, ns, small) = (wec1.clone(), ns.clone(), small.clone());
        async move {
            let m = wec_maps(&wec1, &ns).await;
            (m.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>() == small).then_some(m)
        }
    })
    .await;

    // `stellar where` shows each object in its shard, applied.
    let out = Command::new(env!("CARGO_BIN_EXE_stellar"))
        .args(["where", "--its-kubeconfig"])
        .arg(spaces::kubeconfig(ITS))
        .arg("--wds-kubeconfig")
        .arg(spaces::kubeconfig(WDS2))
        .args(["--wds-name", WDS2])
        .output()
        .expect("stellar where");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("NAMESPACE"), "{text}");
    for c in &small {
        let object = format!("configmaps/{c}");
        let line = text
            .lines()
            .find(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() == 7 && cols[0] == ns && cols[1] == object && cols[2] == name
            })
            .unwrap_or_else(|| panic!("no row for {c}: {text}"));
        assert!(
            line.contains("wec1") && line.contains(&format!("{name}-{WDS2}-")),
            "{line}"
        );
    }

    // Removing an object re-shards; the others move between ManifestWorks without ever
    // being deleted on the WEC (same UIDs).
    Api::<ConfigMap>::namespaced(wds.clone(), &ns)
        .delete("c0", &DeleteParams::default())
        .await
        .expect("delete c0");
    let expected: Vec<(String, String)> = on_wec1[1..].to_vec();
    until("c0 gone from wec1 and the rest untouched", 120, || {
        let (wec1, ns, expected) = (wec1.clone(), ns.clone(), expected.clone());
        async move { (wec_maps(&wec1, &ns).await == expected).then_some(()) }
    })
    .await;
    let shards: Vec<String> = (0..3).map(|i| format!("{name}-{WDS2}-{i}")).collect();
    until("re-sharded as 2, 2, 1", 60, || {
        let (its, name, shards) = (its.clone(), name.clone(), shards.clone());
        async move {
            let w = works(&its, "wec1", &name).await;
            let counts: Vec<usize> = w.iter().map(|(_, m)| m.len()).collect();
            let names: Vec<String> = w.iter().map(|(n, _)| n.clone()).collect();
            (names == shards && counts == [2, 2, 1]).then_some(())
        }
    })
    .await;
    assert_eq!(wec_maps(&wec1, &ns).await, expected);

    // Retargeting moves every shard; deleting the policy cleans every mailbox and WEC.
    let bp = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    );
    bp.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"clusterSelectors": [{"matchLabels": {"name": "wec2"}}]}})),
    )
    .await
    .expect("retarget");
    until("the shards moved to wec2", 120, || {
        let (its, wec1, wec2, ns, name) = (
            its.clone(),
            wec1.clone(),
            wec2.clone(),
            ns.clone(),
            name.clone(),
        );
        async move {
            let moved = works(&its, "wec1", &name).await.is_empty()
                && works(&its, "wec2", &name).await.len() == 3
                && wec_maps(&wec2, &ns).await.len() == 4
                && wec_maps(&wec1, &ns).await.is_empty();
            moved.then_some(())
        }
    })
    .await;
    bp.delete(&name, &DeleteParams::default())
        .await
        .expect("delete policy");
    until("every ManifestWork and WEC copy gone", 120, || {
        let (its, wec2, ns, name) = (its.clone(), wec2.clone(), ns.clone(), name.clone());
        async move {
            (works(&its, "wec2", &name).await.is_empty() && wec_maps(&wec2, &ns).await.is_empty())
                .then_some(())
        }
    })
    .await;
}

async fn deployment(wds: &Client, ns: &str, name: &str) {
    create(
        wds,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    )
    .await
    .expect("deployment");
}

#[tokio::test]
async fn returned_status_is_cleared_after_a_restart() {
    let _serving = spaces::hold(WDS2).await.expect("hold wds2");
    let (wds, _its, _wec1) = setup().await;
    let ns = unique("restart");
    namespace(&wds, &ns).await;
    deployment(&wds, &ns, "web").await;
    let name = unique("restart");
    policy(
        &wds,
        &name,
        &ns,
        "wec1",
        json!([{"apiGroup": "apps", "resources": ["deployments"], "namespaces": [&ns],
                "objectNames": ["web"], "wantSingletonReportedState": true}]),
    )
    .await;
    let deploys = support::dynamic(&wds, "apps", "v1", "Deployment", Some(&ns));
    {
        let mut full = Proc::manager("status-1", &[], &[]);
        until(
            "wec1's status returned into the WDS Deployment",
            180,
            || {
                let deploys = deploys.clone();
                async move {
                    let d = deploys.get("web").await.ok()?;
                    let labelled = d.labels().get(names::SINGLETON_STATUS_LABEL)? == "true";
                    (labelled && d.data["status"]["replicas"].as_i64() == Some(1)).then_some(())
                }
            },
        )
        .await;
        full.signal("-KILL"); // a crash: nothing is cleaned up on the way out
        full.exit_code(30).await;
    }
    // While no status controller runs, the policy goes (the binding controller and the
    // transport retire its Binding and ManifestWorks).
    let _rest = Proc::manager("status-2", &[], &["--controllers", "binding,transport,hub"]);
    support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    )
    .delete(&name, &DeleteParams::default())
    .await
    .expect("delete policy");
    let bindings: Api<Binding> = Api::all(wds.clone());
    until("the Binding gone", 120, || {
        let (bindings, name) = (bindings.clone(), name.clone());
        async move { bindings.get_opt(&name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    let d = deploys.get("web").await.expect("deployment");
    assert!(
        d.labels().contains_key(names::SINGLETON_STATUS_LABEL),
        "no status controller ran, yet the status was cleared"
    );
    // A fresh status controller knows nothing in memory: the label tells it.
    let status = Proc::manager("status-3", &[], &["--controllers", "status"]);
    until("the returned status cleared", 120, || {
        let deploys = deploys.clone();
        async move {
            let d = deploys.get("web").await.ok()?;
            let cleared = !d.labels().contains_key(names::SINGLETON_STATUS_LABEL)
                && d.data["status"] == json!({});
            cleared.then_some(())
        }
    })
    .await;
    drop(status);
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<(String, i32)> {
    let spec = leases.get_opt(name).await.ok()??.spec?;
    Some((
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default(),
    ))
}

#[tokio::test]
async fn two_controller_managers_one_leader_and_the_standby_takes_over() {
    let _serving = spaces::hold(WDS2).await.expect("hold wds2");
    let (wds, its, _wec1) = setup().await;
    let lease = unique("cm-lease");
    let flags = [
        "--leader-elect",
        "--leader-elect-lease",
        lease.as_str(),
        "--leader-elect-lease-duration",
        "6",
    ];
    let leases: Api<Lease> = Api::namespaced(wds.clone(), "kube-system");
    let mut a = Proc::manager("leader-a", &[("POD_NAME", "cm-a")], &flags);
    let (_, transitions) = until("cm-a holds the Lease", 60, || {
        let (leases, lease) = (leases.clone(), lease.clone());
        async move { holder(&leases, &lease).await.filter(|(h, _)| h == "cm-a") }
    })
    .await;
    let b = Proc::manager("leader-b", &[("POD_NAME", "cm-b")], &flags);
    until("cm-b contending", 60, || {
        let log = b.log();
        async move { log.contains("waiting for leadership").then_some(()) }
    })
    .await;

    // The leader acts.
    let ns = unique("leader");
    namespace(&wds, &ns).await;
    config_map(&wds, &ns, "one", 10).await;
    let first = unique("leader");
    policy(
        &wds,
        &first,
        &ns,
        "wec1",
        json!([{"resources": ["configmaps"], "namespaces": [&ns],
                "objectSelectors": [{"matchLabels": {"bench": &ns}}]}]),
    )
    .await;
    until("the leader's ManifestWorks", 120, || {
        let (its, first) = (its.clone(), first.clone());
        async move { (works(&its, "wec1", &first).await.len() == 2).then_some(()) }
    })
    .await;
    // The standby did nothing: it never led nor started a controller, and cm-a still holds.
    let standby = b.log();
    assert!(
        !standby.contains("leading") && !standby.contains("controller-manager running"),
        "the standby acted: {standby}"
    );
    assert_eq!(
        holder(&leases, &lease).await,
        Some(("cm-a".to_owned(), transitions))
    );
    assert!(a.log().contains("leading"), "{}", a.log());

    // The leader dies without releasing: the standby takes over once the lease expires.
    a.signal("-KILL");
    a.exit_code(30).await;
    until("cm-b holds the Lease", 60, || {
        let (leases, lease) = (leases.clone(), lease.clone());
        async move { holder(&leases, &lease).await.filter(|(h, _)| h == "cm-b") }
    })
    .await;
    let (_, after) = holder(&leases, &lease).await.expect("lease");
    assert_eq!(after, transitions + 1, "one transition, A to B");
    let second = unique("leader");
    policy(
        &wds,
        &second,
        &ns,
        "wec1",
        json!([{"resources": ["configmaps"], "namespaces": [&ns],
                "objectSelectors": [{"matchLabels": {"bench": &ns}}]}]),
    )
    .await;
    until("the new leader's ManifestWorks", 120, || {
        let (its, second) = (its.clone(), second.clone());
        async move { (works(&its, "wec1", &second).await.len() == 2).then_some(()) }
    })
    .await;
    assert!(b.log().contains("leading"), "{}", b.log());

    // A graceful stop releases the Lease.
    let mut b = b;
    b.signal("-TERM");
    assert_eq!(b.exit_code(60).await, Some(0), "{}", b.log());
    let (h, _) = holder(&leases, &lease).await.expect("lease");
    assert!(h.is_empty(), "released, yet held by {h:?}");
    let bp = support::dynamic(
        &wds,
        "control.kubestellar.io",
        "v1alpha1",
        "BindingPolicy",
        None,
    );
    // Clean up with a leader running (the policies carry the binding controller's finalizer).
    let _c = Proc::manager("leader-c", &[], &[]);
    for p in [&first, &second] {
        bp.delete(p, &DeleteParams::default())
            .await
            .expect("delete policy");
    }
    until("the policies gone", 120, || {
        let bp = bp.clone();
        let (first, second) = (first.clone(), second.clone());
        async move {
            let gone = bp.get_opt(&first).await.ok()?.is_none()
                && bp.get_opt(&second).await.ok()?.is_none();
            gone.then_some(())
        }
    })
    .await;
}
