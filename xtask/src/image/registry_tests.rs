//! `cargo xtask image` end to end, minus the release build: the flags a user types package a
//! tiny static executable, write the OCI archive and push it to a real registry (Debian's
//! docker-registry on loopback); the archive is read back as a layout and the image back from
//! the registry, both checked against each other, not against the writer's own structures.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Parser;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use testenv::registry::RegistryServer;

use super::oci::{CONFIG_TYPE, LAYER_TYPE, MANIFEST_TYPE, REF_NAME, digest};
use super::{Args, elf, oci, push};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    Image(Args),
}

/// `cargo xtask <args>` as main parses it, down to the image flags.
fn parse(args: &[&str]) -> Args {
    let Sub::Image(args) =
        Cli::parse_from(std::iter::once("xtask").chain(args.iter().copied())).cmd;
    args
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("xtask-image-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The regular files of a tar archive by path, and the (mode, uid, gid, mtime) of each entry.
type Files = BTreeMap<String, (Vec<u8>, (u32, u64, u64, u64))>;

fn untar(bytes: &[u8]) -> Files {
    let mut out = Files::new();
    for entry in tar::Archive::new(bytes).entries().unwrap() {
        let mut entry = entry.unwrap();
        let h = entry.header().clone();
        let meta = (
            h.mode().unwrap(),
            h.uid().unwrap(),
            h.gid().unwrap(),
            h.mtime().unwrap(),
        );
        let mut content = Vec::new();
        entry.read_to_end(&mut content).unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        out.insert(path, (content, meta));
    }
    out
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The blob a descriptor points at in a layout, checked against the descriptor's digest and size.
fn blob<'a>(layout: &'a Files, descriptor: &Value) -> &'a [u8] {
    let digest_s = descriptor["digest"].as_str().unwrap();
    let path = format!("blobs/sha256/{}", digest_s.trim_start_matches("sha256:"));
    let bytes = &layout
        .get(&path)
        .unwrap_or_else(|| panic!("{path} missing"))
        .0;
    assert_eq!(digest(bytes), digest_s, "{path}");
    assert_eq!(
        descriptor["size"].as_u64(),
        Some(bytes.len() as u64),
        "{path}"
    );
    bytes
}

/// What the archive at `path` holds: the manifest, config and layer bytes, and the name.
struct Layout {
    manifest: Vec<u8>,
    config: Vec<u8>,
    layer: Vec<u8>,
    name: String,
}

fn read_layout(path: &Path) -> Layout {
    let files = untar(&std::fs::read(path).unwrap());
    let layout: Value = serde_json::from_slice(&files["oci-layout"].0).unwrap();
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");
    let index: Value = serde_json::from_slice(&files["index.json"].0).unwrap();
    assert_eq!(index["schemaVersion"], 2);
    let entries = index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "one image per archive");
    assert_eq!(entries[0]["mediaType"], MANIFEST_TYPE);
    let manifest_bytes = blob(&files, &entries[0]).to_vec();
    let manifest: Value = serde_json::from_slice(&manifest_bytes).unwrap();
    assert_eq!(manifest["config"]["mediaType"], CONFIG_TYPE);
    assert_eq!(manifest["layers"][0]["mediaType"], LAYER_TYPE);
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    Layout {
        config: blob(&files, &manifest["config"]).to_vec(),
        layer: blob(&files, &manifest["layers"][0]).to_vec(),
        manifest: manifest_bytes,
        name: entries[0]["annotations"][REF_NAME]
            .as_str()
            .unwrap()
            .to_string(),
    }
}

/// Checks that `config` runs `/<name>` as 65532:65532 from `layer`, which holds exactly `binary`.
fn check_image(config: &[u8], layer: &[u8], name: &str, binary: &[u8]) {
    let config: Value = serde_json::from_slice(config).unwrap();
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!([format!("/{name}")])
    );
    assert_eq!(
        (config["architecture"].as_str(), config["os"].as_str()),
        (Some("amd64"), Some("linux"))
    );
    let tar = gunzip(layer);
    assert_eq!(
        config["rootfs"]["diff_ids"],
        serde_json::json!([digest(&tar)])
    );
    let files = untar(&tar);
    assert_eq!(files.keys().collect::<Vec<_>>(), [name]);
    assert_eq!(files[name], (binary.to_vec(), (0o755, 0, 0, 0)));
}

struct Registry {
    url: String,
    client: reqwest::Client,
}

impl Registry {
    async fn get(&self, path: &str, accept: &str) -> reqwest::Response {
        let resp = self
            .client
            .get(format!("{}/v2/{path}", self.url))
            .header(ACCEPT, accept)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "GET {path}");
        resp
    }
}

#[test]
fn xtask_image_writes_a_layout_and_pushes_the_same_image() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(RegistryServer::start()).unwrap();
    let dir = TempDir::new("push");
    let binary = elf::tiny_static_executable();
    let bin_path = dir.0.join("redroid-operator");
    std::fs::write(&bin_path, &binary).unwrap();
    let push_to = format!("{}/flotilla", server.url());
    let (bin_arg, out_arg) = (bin_path.to_str().unwrap(), dir.0.to_str().unwrap());
    let args = [
        "image", "redroid", "--tag", "t1", "--binary", bin_arg, "--out", out_arg, "--push",
        &push_to,
    ];
    super::run(parse(&args)).unwrap();

    let layout = read_layout(&dir.0.join("redroid-operator-t1.oci.tar"));
    assert_eq!(
        layout.name,
        format!("{}/flotilla/redroid-operator:t1", server.host())
    );
    check_image(&layout.config, &layout.layer, "redroid-operator", &binary);

    let registry = Registry {
        url: server.url(),
        client: reqwest::Client::new(),
    };
    runtime.block_on(async {
        let resp = registry
            .get("flotilla/redroid-operator/manifests/t1", MANIFEST_TYPE)
            .await;
        let content_type = resp.headers()[CONTENT_TYPE].to_str().unwrap().to_string();
        assert_eq!(content_type, MANIFEST_TYPE);
        let digest_header = resp.headers()["Docker-Content-Digest"]
            .to_str()
            .unwrap()
            .to_string();
        let manifest = resp.bytes().await.unwrap();
        assert_eq!(
            manifest, layout.manifest,
            "the registry serves the archive's manifest"
        );
        assert_eq!(digest_header, digest(&manifest));
        let manifest: Value = serde_json::from_slice(&manifest).unwrap();
        let blob = |d: &Value| {
            format!(
                "flotilla/redroid-operator/blobs/{}",
                d["digest"].as_str().unwrap()
            )
        };
        let config = registry.get(&blob(&manifest["config"]), "*/*").await;
        let config = config.bytes().await.unwrap();
        let layer = registry.get(&blob(&manifest["layers"][0]), "*/*").await;
        let layer = layer.bytes().await.unwrap();
        assert_eq!(
            (config.as_ref(), layer.as_ref()),
            (layout.config.as_slice(), layout.layer.as_slice())
        );
        check_image(&config, &layer, "redroid-operator", &binary);
    });

    // Pushed again under another tag: both blobs are found by HEAD and not sent again.
    let before = server.requests();
    let args = [
        "image",
        "redroid-operator",
        "--tag",
        "t2",
        "--binary",
        bin_arg,
        "--out",
        out_arg,
        "--push",
        &push_to,
    ];
    super::run(parse(&args)).unwrap();
    assert_eq!(
        server.requests() - before,
        3,
        "HEAD layer, HEAD config, PUT manifest"
    );
    let same = read_layout(&dir.0.join("redroid-operator-t2.oci.tar"));
    assert_eq!(
        same.manifest, layout.manifest,
        "the same binary makes the same image"
    );
}

#[test]
fn a_registry_with_basic_auth_takes_the_push_with_credentials_only() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(RegistryServer::start_with_basic_auth("ci", "s3cret"))
        .unwrap();
    let op = super::IMAGES[1];
    let binary = elf::tiny_static_executable();
    let recipe = oci::Recipe {
        name: op.binary,
        binary: &binary,
        labels: op.labels(),
        created_by: "test".into(),
    };
    let image = oci::assemble(&recipe).unwrap();
    let target = || push::Target::parse(&format!("{}/flotilla", server.url())).unwrap();
    runtime.block_on(async {
        let anonymous = push::Pusher::new(target(), None, None).unwrap();
        let err = anonymous
            .push(&image, op.binary, "t")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("401") && err.contains("Basic") && err.contains("skopeo copy"),
            "{err}"
        );
        let creds = push::BasicAuth {
            username: "ci".into(),
            password: "s3cret".into(),
        };
        let pusher = push::Pusher::new(target(), Some(creds), None).unwrap();
        let pushed = pusher.push(&image, op.binary, "t").await.unwrap();
        assert_eq!(pushed, image.manifest.digest);
        let (url, creds) = (server.url(), Some(("ci", "s3cret")));
        let tagged = testenv::registry::tag_exists(&url, creds, "flotilla/cocoon-operator", "t");
        assert!(tagged.await.unwrap());
    });
}

#[test]
fn a_dynamic_binary_is_refused_before_anything_is_written() {
    let dir = TempDir::new("dynamic");
    let me = std::env::current_exe().unwrap();
    let args = [
        "image",
        "cocoon-operator",
        "--binary",
        me.to_str().unwrap(),
        "--out",
        dir.0.to_str().unwrap(),
    ];
    let err = format!("{:#}", super::run(parse(&args)).unwrap_err());
    assert!(
        err.contains("cannot run alone in an image") && err.contains("dynamically linked"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
}
