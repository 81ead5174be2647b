//! `kubectl-redroid` against the local control plane: one namespace per test, the CRDs
//! installed, objects and their status written directly (no operator needed). The plugin runs
//! in-process through `main_with`, pointed at the plane with `--kubeconfig`.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use redroid::crd::{RedroidInstance, RedroidTask};
use redroid::names;
use serde_json::json;
use testenv::TestNamespace;

async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}

/// Runs `kubectl redroid -n <ns> ARGS…`; Ok(stdout) or Err(error message).
async fn plugin(ns: &str, args: &[&str]) -> Result<String, String> {
    let kubeconfig = testenv::kubeconfig_path().display().to_string();
    let mut argv: Vec<String> = vec!["--kubeconfig".into(), kubeconfig, "-n".into(), ns.into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut out = Vec::new();
    let result = redroid::plugin::main_with(argv, &mut out).await;
    let text = String::from_utf8(out).expect("utf-8 output");
    result.map(|()| text).map_err(|e| e.to_string())
}

async fn create_instance(
    client: &Client,
    ns: &str,
    name: &str,
    index: i32,
) -> Api<RedroidInstance> {
    let api: Api<RedroidInstance> = Api::namespaced(client.clone(), ns);
    let obj: RedroidInstance = serde_json::from_value(json!({
        "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
        "metadata": {"name": name}, "spec": {"index": index}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create instance");
    api
}

async fn set_status(api: &Api<RedroidInstance>, name: &str, status: serde_json::Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .expect("patch instance status");
}

async fn create_task(client: &Client, ns: &str, name: &str, schedule: &str, instances: &[&str]) {
    let api: Api<RedroidTask> = Api::namespaced(client.clone(), ns);
    let refs: Vec<_> = instances.iter().map(|i| json!({"name": i})).collect();
    let obj: RedroidTask = serde_json::from_value(json!({
        "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidTask",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "instances": refs, "integrations": [{"name": "maa", "image": "maa:1"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create task");
}

#[tokio::test]
async fn list_and_describe_show_names_phase_and_adb() {
    let (client, ns) = setup("plugin-list").await;
    let api = create_instance(&client, &ns.name, "android-0", 0).await;
    create_instance(&client, &ns.name, "android-1", 1).await;
    let adb = names::adb_address("android-0", &ns.name, 5555);
    set_status(&api, "android-0", json!({
        "phase": "Running", "podName": "android-0-pod-abcde", "adbAddress": adb,
        "woken": {"actor": "task/daily", "reason": "maintenance"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Running", "message": "Pod is running",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }))
    .await;

    let list = plugin(&ns.name, &["instance", "list"]).await.unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    for column in [
        "NAME",
        "INDEX",
        "PHASE",
        "ADB ADDRESS",
        "SUSPENDED",
        "WOKEN",
        "AGE",
    ] {
        assert!(lines[0].contains(column), "{list}");
    }
    assert!(
        lines[1].starts_with("android-0")
            && lines[1].contains("Running")
            && lines[1].contains(&adb),
        "{list}"
    );
    assert!(lines[1].contains("task/daily"), "{list}");
    assert!(
        lines[2].starts_with("android-1") && lines[2].contains("<none>"),
        "{list}"
    );

    let all = plugin(&ns.name, &["inst", "ls", "-A"]).await.unwrap();
    assert!(all.starts_with("NAMESPACE"), "{all}");
    assert!(
        all.lines()
            .any(|l| l.starts_with(&ns.name) && l.contains("android-0")),
        "{all}"
    );

    let described = plugin(&ns.name, &["instances", "describe", "android-0"])
        .await
        .unwrap();
    for needle in [
        "android-0-pod-abcde",
        adb.as_str(),
        "Woken:",
        "task/daily",
        "maintenance",
        "Ready:",
        "True (Running): Pod is running",
    ] {
        assert!(
            described.contains(needle),
            "{needle:?} missing from\n{described}"
        );
    }
}

#[tokio::test]
async fn suspend_for_sets_an_expiring_manual_override_and_resume_clears_it() {
    let (client, ns) = setup("plugin-suspend").await;
    let api = create_instance(&client, &ns.name, "android-0", 0).await;

    let before = jiff::Timestamp::now();
    let out = plugin(
        &ns.name,
        &[
            "instance",
            "suspend",
            "android-0",
            "--for",
            "10m",
            "--reason",
            "backup",
        ],
    )
    .await
    .unwrap();
    assert!(
        out.starts_with("redroidinstance/android-0 suspended until "),
        "{out}"
    );
    let got = api.get("android-0").await.unwrap();
    let suspended = got
        .status
        .as_ref()
        .and_then(|s| s.suspended.clone())
        .expect("status.suspended set");
    assert_eq!(suspended.actor.as_deref(), Some("manual"));
    assert_eq!(suspended.reason.as_deref(), Some("backup"));
    let ahead = suspended
        .until
        .expect("until set")
        .0
        .duration_since(before)
        .as_secs();
    assert!((595..=615).contains(&ahead), "until is {ahead}s ahead");
    assert!(!got.spec.suspend, "the spec is never written");

    plugin(&ns.name, &["instance", "resume", "android-0"])
        .await
        .unwrap();
    let got = api.get("android-0").await.unwrap();
    assert_eq!(got.status.and_then(|s| s.suspended), None);
}

#[tokio::test]
async fn wake_sets_status_woken() {
    let (client, ns) = setup("plugin-wake").await;
    let api = create_instance(&client, &ns.name, "android-0", 0).await;
    plugin(
        &ns.name,
        &[
            "instance",
            "wake",
            "android-0",
            "--actor",
            "alice",
            "--for",
            "1h30m",
        ],
    )
    .await
    .unwrap();
    let woken = api
        .get("android-0")
        .await
        .unwrap()
        .status
        .and_then(|s| s.woken)
        .expect("status.woken set");
    assert_eq!(woken.actor.as_deref(), Some("alice"));
    let ahead = woken
        .until
        .expect("until")
        .0
        .duration_since(jiff::Timestamp::now())
        .as_secs();
    assert!((5_300..=5_400).contains(&ahead), "until is {ahead}s ahead");

    let err = plugin(
        &ns.name,
        &["instance", "wake", "android-0", "--for", "soon"],
    )
    .await
    .unwrap_err();
    assert!(err.starts_with(r#"invalid duration "soon""#), "{err}");
}

async fn create_cronjob(client: &Client, ns: &str, task: &str, instance: &str) -> CronJob {
    let api: Api<CronJob> = Api::namespaced(client.clone(), ns);
    let labels = json!({names::TASK_LABEL: task, names::INSTANCE_LABEL: instance, names::COMPONENT_LABEL: names::COMPONENT_TASK});
    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": format!("{task}-{instance}"), "labels": labels},
        "spec": {"schedule": "0 4 * * *", "suspend": true, "jobTemplate": {
            "metadata": {"labels": labels},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {
                "restartPolicy": "Never", "containers": [{"name": "maa", "image": "maa:1"}]}}}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &cj)
        .await
        .expect("create CronJob")
}

#[tokio::test]
async fn trigger_creates_one_uniquely_named_job_per_instance() {
    let (client, ns) = setup("plugin-trigger").await;
    create_task(
        &client,
        &ns.name,
        "daily",
        "0 4 * * *",
        &["android-0", "android-1"],
    )
    .await;
    let mut cronjobs = Vec::new();
    for i in ["android-0", "android-1"] {
        cronjobs.push(create_cronjob(&client, &ns.name, "daily", i).await);
    }

    let out = plugin(&ns.name, &["task", "trigger", "daily"])
        .await
        .unwrap();
    assert_eq!(out.lines().count(), 2, "{out}");

    let jobs = Api::<Job>::namespaced(client.clone(), &ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(jobs.len(), 2);
    assert_ne!(jobs[0].name_any(), jobs[1].name_any());
    for job in &jobs {
        assert!(
            out.contains(&format!("job.batch/{} created", job.name_any())),
            "{out}"
        );
        let cronjob = &job.annotations()[names::CRONJOB_ANNOTATION];
        assert_eq!(
            job.annotations()[names::TRIGGERED_BY_ANNOTATION],
            "kubectl-redroid"
        );
        let owner = cronjobs
            .iter()
            .find(|c| &c.name_any() == cronjob)
            .expect("annotation names a CronJob");
        assert_eq!(job.owner_references()[0].uid, owner.uid().unwrap());
        assert_eq!(job.labels()[names::TASK_LABEL], "daily");
    }

    let listed = plugin(&ns.name, &["tasks", "list"]).await.unwrap();
    assert!(
        listed.contains("0 4 * * *") && listed.contains("<never>"),
        "{listed}"
    );
}

#[tokio::test]
async fn trigger_refuses_a_one_shot_task() {
    let (client, ns) = setup("plugin-oneshot").await;
    create_task(&client, &ns.name, "once", "", &["android-0"]).await;
    let err = plugin(&ns.name, &["task", "trigger", "once"])
        .await
        .unwrap_err();
    assert!(
        err.starts_with(&format!(
            r#"redroidtask "once" in namespace "{}" is a one-shot task"#,
            ns.name
        )),
        "{err}"
    );
    let listed = plugin(&ns.name, &["task", "list"]).await.unwrap();
    assert!(listed.contains("<one-shot>"), "{listed}");
    let described = plugin(&ns.name, &["task", "describe", "once"])
        .await
        .unwrap();
    assert!(
        described.contains("<one-shot>") && described.contains("maa:1"),
        "{described}"
    );
}

#[tokio::test]
async fn missing_objects_fail_with_a_message_naming_them() {
    let (_client, ns) = setup("plugin-missing").await;
    let want = format!(
        r#"redroidinstance "ghost" not found in namespace "{}""#,
        ns.name
    );
    for cmd in ["describe", "logs", "suspend", "resume", "port-forward"] {
        let err = plugin(&ns.name, &["instance", cmd, "ghost"])
            .await
            .unwrap_err();
        assert_eq!(err, want, "instance {cmd}");
    }
    let err = plugin(&ns.name, &["task", "logs", "ghost"])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        format!(
            r#"redroidtask "ghost" not found in namespace "{}""#,
            ns.name
        )
    );
}

#[tokio::test]
async fn instance_logs_never_read_a_task_pod() {
    let (client, ns) = setup("plugin-logs").await;
    let api = create_instance(&client, &ns.name, "android-0", 0).await;
    set_status(&api, "android-0", json!({"phase": "Stopped"})).await;
    let task_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "daily-android-0-job", "labels": {
            names::INSTANCE_LABEL: "android-0", names::COMPONENT_LABEL: names::COMPONENT_TASK}},
        "spec": {"containers": [{"name": "maa", "image": "maa:1"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &task_pod)
        .await
        .unwrap();

    let err = plugin(&ns.name, &["instance", "logs", "android-0"])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        format!(
            r#"redroidinstance "android-0" in namespace "{}" has no running pod (phase: Stopped)"#,
            ns.name
        )
    );
    let err = plugin(&ns.name, &["instance", "port-forward", "android-0"])
        .await
        .unwrap_err();
    assert!(
        err.ends_with("has no running pod (phase: Stopped)"),
        "{err}"
    );
}
