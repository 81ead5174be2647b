//! The samples in deploy/redroid/samples must work on a real cluster, not only apply: they are
//! applied to the plane with both controllers running, and every integration container of
//! the Jobs and CronJobs the operator creates from them is run for real by `/bin/sh`, the way
//! the container would run it (docs/redroid.md: command and args are exec'd after the ADB
//! wait, the image's entrypoint is not used), against stand-ins for what the images provide:
//! `sh` and `adb` in every integration image, plus the programs listed in [`IMAGE_PROGRAMS`].
//! The stand-in `adb` answers the wait (`connect`, `getprop sys.boot_completed`) and records
//! every other call, as do the image programs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use kit::controller::RunContext;
use kube::api::{Api, DynamicObject, ListParams};
use redroid::context::{Context, Settings};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

/// Programs each sample integration image provides besides `sh` and `adb` (by image name,
/// without the tag). A sample using a new image must say what it runs here.
const IMAGE_PROGRAMS: [(&str, &[&str]); 2] = [
    ("ghcr.io/maaassistantarknights/maa-cli", &["maa"]),
    ("ghcr.io/example/adb-installer", &[]),
];

fn samples_dir() -> PathBuf {
    testenv::workspace_root().join("deploy/redroid/samples")
}

fn sample_objects(namespace: &str) -> Vec<DynamicObject> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .expect("samples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("sample");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let mut obj: DynamicObject = serde::Deserialize::deserialize(doc).expect("object");
            obj.metadata.namespace = Some(namespace.to_owned());
            out.push(obj);
        }
    }
    out
}

/// A directory of stand-in programs that log `<name> <args>` to `calls.log` beside them.
fn stand_ins(programs: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redroid-samples-{}-{}",
        std::process::id(),
        kit::names::short_hash(&programs.join(","))
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("calls.log");
    let _ = std::fs::remove_file(&log);
    let adb = format!(
        "#!/bin/sh\ncase \"$1\" in\n  connect) echo \"connected to $2\" ;;\n  -s) if [ \"$3\" = shell ] && [ \"$5\" = sys.boot_completed ]; then echo 1; else echo \"adb $*\" >> '{}'; fi ;;\n  *) echo \"adb $*\" >> '{}' ;;\nesac\n",
        log.display(),
        log.display()
    );
    write_program(&dir.join("adb"), &adb);
    for p in programs {
        let body = format!("#!/bin/sh\necho \"{p} $*\" >> '{}'\n", log.display());
        write_program(&dir.join(p), &body);
    }
    dir
}

fn write_program(path: &Path, body: &str) {
    std::fs::write(path, body).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn image_programs(image: &str) -> &'static [&'static str] {
    let name = image.rsplit_once(':').map_or(image, |(n, _)| n);
    IMAGE_PROGRAMS
        .iter()
        .find(|(i, _)| *i == name)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("image {image} is not in IMAGE_PROGRAMS: say what it runs"))
}

/// Runs `c` as its image would, with stand-ins; returns the calls it made.
fn run_container(owner: &str, c: &Container) -> String {
    let command = c.command.clone().unwrap_or_default();
    assert_eq!(
        command,
        ["/bin/sh", "-c"],
        "{owner}/{}: the ADB wait wrapper",
        c.name
    );
    let args = c.args.clone().unwrap_or_default();
    let image = c.image.clone().unwrap_or_default();
    let dir = stand_ins(image_programs(&image));
    let env: BTreeMap<String, String> = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .args(&args)
        .env_clear()
        .envs(&env)
        .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
        .output()
        .expect("run sh");
    let calls = std::fs::read_to_string(dir.join("calls.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{owner}/{} ({image}) would fail on a real cluster: exit {:?}\nstderr: {}",
        c.name,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    calls
}

fn integrations(template: Option<&PodTemplateSpec>) -> Vec<Container> {
    template
        .and_then(|t| t.spec.as_ref())
        .map(|s| s.containers.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_task_containers_run_what_the_images_provide() {
    let client = testenv::client().await;
    for crd in redroid::crd::crds() {
        testenv::install_crd(&client, crd)
            .await
            .expect("install CRD");
    }
    let ns = testenv::TestNamespace::new(&client, "redroid-samples").await;
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    let ctx = Arc::new(Context::new(client.clone(), Settings::default()));
    let addr = "127.0.0.1:0".parse().expect("addr");
    let rc = RunContext {
        client: client.clone(),
        metrics: kit::metrics::Metrics::new(),
        readiness: kit::health::Readiness::new(),
        shutdown: stop.clone(),
        metrics_addr: addr,
        probe_addr: addr,
    };
    let scope = Some(ns.name.clone());
    tokio::spawn(redroid::task::run(ctx.clone(), rc.clone(), scope.clone()));
    tokio::spawn(redroid::instance::run(ctx, rc, scope));
    for obj in sample_objects(&ns.name) {
        testenv::rbac::apply(&client, &obj, "flotilla-samples")
            .await
            .expect("apply sample");
    }

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let job = testenv::eventually("a Job of the one-shot sample", WAIT, || async {
        let lp = ListParams::default().labels("redroid.isning.moe/task=install-apps");
        jobs.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await
    .expect("one-shot Job");
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns.name);
    let cronjob = testenv::eventually("a CronJob of the scheduled sample", WAIT, || async {
        let lp = ListParams::default().labels("redroid.isning.moe/task=daily-routine");
        cronjobs.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await
    .expect("CronJob");

    let job_template = job.spec.as_ref().map(|s| &s.template);
    let job_containers = integrations(job_template);
    assert!(!job_containers.is_empty());
    for c in &job_containers {
        let calls = run_container("install-apps", c);
        assert!(
            calls.contains("adb -s 127.0.0.1:5555 install-multiple /apks/base.apk"),
            "the installer runs adb install-multiple on the sidecar's Android: {calls:?}"
        );
    }
    let cron_template = cronjob.spec.job_template.spec.as_ref().map(|s| &s.template);
    for c in &integrations(cron_template) {
        let calls = run_container("daily-routine", c);
        assert!(
            calls.starts_with("maa run daily --config /etc/maa/config.json"),
            "{calls:?}"
        );
    }
}
