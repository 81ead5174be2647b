//! `cargo xtask image`: each operator's container image, built without a container engine.
//!
//! Contract:
//! - [`IMAGES`] lists the operator images. Each is named `ghcr.io/flotilla/<binary>:<tag>`
//!   (tag: the workspace version unless `--tag`), holds `/<binary>` and nothing else, and runs
//!   it as its entrypoint as user 65532:65532 ([`oci`] has the format). Adding an operator is
//!   one line there plus `cargo xtask gen`, which writes its `deploy/<package>/Containerfile`.
//! - The binary is built in release mode for [`TARGET`] with [`STATIC_RUSTFLAGS`] (glibc linked
//!   in: a static-pie that needs no loader or shared library and resolves names through
//!   /etc/hosts and DNS without NSS modules), in `<cargo target dir>/image`, so the development
//!   build's cache is left alone, one cargo run per image exactly as its Containerfile runs it.
//!   `--binary` packages a given file instead. Either way the file must be a static x86-64 ELF
//!   ([`elf`]), or the image would not start.
//! - The result is an OCI archive `<out>/<binary>-<tag>.oci.tar` (default out:
//!   `<cargo target dir>/images`) that `skopeo copy oci-archive:` and `podman load` read;
//!   `--push` also uploads it ([`push`]) and then names it after the push target instead of
//!   ghcr.io.
//! - The Containerfile is rendered from the same table and constants ([`containerfile`]), so a
//!   container engine builds the same binary into the same file, user, entrypoint and labels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, ensure};

pub mod containerfile;
pub mod elf;
pub mod oci;
pub mod push;
#[cfg(test)]
mod registry_tests;

/// One operator image: the binary `binary` of the workspace package `package` (whose
/// kustomize base is `deploy/<package>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperatorImage {
    /// The workspace package (crate) and its `deploy/` directory.
    pub package: &'static str,
    /// The binary: the image name, the file `/<binary>` and the entrypoint.
    pub binary: &'static str,
}

/// Every operator image. An operator adds itself here with one line (package, binary).
pub const IMAGES: &[OperatorImage] = &[
    OperatorImage::new("redroid", "redroid-operator"),
    OperatorImage::new("cocoon", "cocoon-operator"),
    OperatorImage::new("redis", "redis-operator"),
    OperatorImage::new("fdb", "fdb-operator"),
];

/// Where the project publishes its images.
pub const REGISTRY: &str = "ghcr.io/flotilla";
/// The project's sources (the `org.opencontainers.image.source` label, which also links a
/// ghcr.io package to its repository).
pub const SOURCE: &str = "https://github.com/flotilla/flotilla";
/// The workspace version: the default tag and the version label.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The target triple of the image binaries (the images are linux/amd64).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// What makes a glibc binary static (a static-pie).
pub const STATIC_RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// `cargo xtask image` flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Images to make, by binary or package name (`redroid-operator` or `redroid`); all when none.
    pub operators: Vec<String>,
    /// The tag (default: the workspace version).
    #[arg(long)]
    pub tag: Option<String>,
    /// Package this static binary instead of building one (with exactly one image named).
    #[arg(long, value_name = "FILE")]
    pub binary: Option<PathBuf>,
    /// Directory for the OCI archives (default: <cargo target dir>/images).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also push to `[http://|https://]host[:port][/prefix]` as `<prefix>/<binary>:<tag>` (no
    /// scheme: https).
    #[arg(long, value_name = "REGISTRY")]
    pub push: Option<String>,
    /// Basic-auth user for the push; the password is read from REGISTRY_PASSWORD.
    #[arg(long, requires = "push")]
    pub username: Option<String>,
    /// PEM bundle trusted for the push besides the built-in roots.
    #[arg(long, requires = "push", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

impl OperatorImage {
    /// The image of binary `binary` of package `package`.
    pub const fn new(package: &'static str, binary: &'static str) -> Self {
        Self { package, binary }
    }

    /// `ghcr.io/flotilla/<binary>:<tag>`: the name the deploy/ manifests use.
    pub fn reference(&self, tag: &str) -> String {
        format!("{REGISTRY}/{}:{tag}", self.binary)
    }

    /// The image config's labels (the Containerfile sets the same).
    pub fn labels(&self) -> BTreeMap<String, String> {
        [
            (
                "org.opencontainers.image.licenses",
                env!("CARGO_PKG_LICENSE"),
            ),
            ("org.opencontainers.image.source", SOURCE),
            ("org.opencontainers.image.title", self.binary),
            ("org.opencontainers.image.version", VERSION),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

/// The images `names` ask for (by binary or package name), all of them when empty.
pub fn select(names: &[String]) -> anyhow::Result<Vec<OperatorImage>> {
    if names.is_empty() {
        return Ok(IMAGES.to_vec());
    }
    names
        .iter()
        .map(|n| {
            IMAGES
                .iter()
                .find(|i| i.binary == n || i.package == n)
                .copied()
                .with_context(|| {
                    let known: Vec<&str> = IMAGES.iter().map(|i| i.binary).collect();
                    format!("no operator image {n:?}; known: {}", known.join(", "))
                })
        })
        .collect()
}

/// Runs `cargo xtask image`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let images = select(&args.operators)?;
    let tag = args.tag.clone().unwrap_or_else(|| VERSION.to_string());
    let target = args.push.as_deref().map(push::Target::parse).transpose()?;
    let binaries = match &args.binary {
        Some(file) => {
            ensure!(
                images.len() == 1,
                "--binary packages one image: name exactly one"
            );
            vec![file.clone()]
        }
        None => build(&images)?,
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target_dir().join("images"));
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let mut built = Vec::new();
    for (op, binary) in images.iter().zip(&binaries) {
        let reference = match &target {
            Some(t) => t.reference(op.binary, &tag),
            None => op.reference(&tag),
        };
        let image = package(
            op,
            binary,
            &reference,
            &out.join(format!("{}-{tag}.oci.tar", op.binary)),
        )?;
        built.push((op, reference, image));
    }
    let Some(target) = target else { return Ok(()) };
    let auth = match args.username {
        Some(username) => {
            let password = std::env::var("REGISTRY_PASSWORD").context(
                "--username: the password is read from REGISTRY_PASSWORD, which is unset",
            )?;
            Some(push::BasicAuth { username, password })
        }
        None => None,
    };
    let pusher = push::Pusher::new(target, auth, args.ca_cert.as_deref())?;
    let runtime = tokio::runtime::Runtime::new()?;
    for (op, reference, image) in built {
        let start = Instant::now();
        let digest = runtime.block_on(pusher.push(&image, op.binary, &tag))?;
        println!("pushed {reference}@{digest} in {:.1?}", start.elapsed());
    }
    Ok(())
}

/// Checks `binary`, assembles its image named `reference` and writes it as an OCI archive to
/// `archive`.
fn package(
    op: &OperatorImage,
    binary: &Path,
    reference: &str,
    archive: &Path,
) -> anyhow::Result<oci::Image> {
    let start = Instant::now();
    let bytes = std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?;
    elf::check_static_amd64(&bytes)
        .with_context(|| format!("{} cannot run alone in an image", binary.display()))?;
    let recipe = oci::Recipe {
        name: op.binary,
        binary: &bytes,
        labels: op.labels(),
        created_by: format!("COPY {0} /{0} # cargo xtask image", op.binary),
    };
    let image = oci::assemble(&recipe)?;
    let tmp = archive.with_extension("tar.tmp");
    std::fs::write(&tmp, oci::layout_archive(&image, reference)?)
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, archive).with_context(|| format!("write {}", archive.display()))?;
    let mib = |n: usize| n as f64 / (1024.0 * 1024.0);
    println!(
        "{reference}: {} ({:.1} MiB binary, {:.1} MiB compressed) in {:.1?}\n  {}",
        image.manifest.digest,
        mib(bytes.len()),
        mib(image.size()),
        start.elapsed(),
        archive.display()
    );
    Ok(image)
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `target/` in the repository).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

fn repo_root() -> PathBuf {
    testenv::workspace_root()
}

/// Builds the static release binary of each of `images`, one cargo run each: the features of
/// a package's dependencies then do not depend on which other images are built alongside, so
/// the binary is the one its Containerfile builds (`-p <package>` alone). Returns the paths.
fn build(images: &[OperatorImage]) -> anyhow::Result<Vec<PathBuf>> {
    let dir = target_dir().join("image");
    let rustflags = match std::env::var("RUSTFLAGS") {
        Ok(flags) if !flags.trim().is_empty() => format!("{flags} {STATIC_RUSTFLAGS}"),
        _ => STATIC_RUSTFLAGS.to_string(),
    };
    let mut paths = Vec::new();
    for op in images {
        let start = Instant::now();
        let status = testenv::cargo::command()
            .args(["build", "--release", "--locked", "--target", TARGET])
            .args(["-p", op.package, "--bin", op.binary])
            .env("CARGO_TARGET_DIR", &dir)
            .env("RUSTFLAGS", &rustflags)
            .current_dir(repo_root())
            .status()
            .context("run cargo build")?;
        ensure!(
            status.success(),
            "cargo build of {} failed ({status})",
            op.binary
        );
        println!("built {} in {:.1?}", op.binary, start.elapsed());
        paths.push(dir.join(TARGET).join("release").join(op.binary));
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;

    #[test]
    fn images_are_selected_by_binary_or_package_name() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(select(&[]).unwrap(), IMAGES.to_vec());
        let picked = select(&names(&["cocoon", "redroid-operator"])).unwrap();
        assert_eq!(
            picked.iter().map(|i| i.binary).collect::<Vec<_>>(),
            ["cocoon-operator", "redroid-operator"]
        );
        let err = select(&names(&["kubectl-redroid"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("known: redroid-operator, cocoon-operator, redis-operator"),
            "{err}"
        );
    }

    #[test]
    fn every_image_binary_is_a_binary_of_its_package() {
        for op in IMAGES {
            let bin = repo_root().join(format!("crates/{}/src/bin/{}.rs", op.package, op.binary));
            assert!(bin.exists(), "{} has no binary {}", op.package, op.binary);
        }
    }

    /// The Deployment users apply runs the image this tool makes, as the image's user, with
    /// the image's entrypoint.
    #[test]
    fn deploy_manifests_run_the_versioned_image_with_its_entrypoint() {
        for op in IMAGES {
            let path = repo_root().join(format!("deploy/{}/manager/deployment.yaml", op.package));
            let yaml = std::fs::read_to_string(&path).unwrap();
            let deployment: Deployment = serde_yaml::from_str(&yaml).unwrap();
            let pod = deployment.spec.unwrap().template.spec.unwrap();
            let manager = pod.containers.iter().find(|c| c.name == "manager").unwrap();
            assert_eq!(
                manager.image.as_deref(),
                Some(op.reference(VERSION).as_str()),
                "{}",
                path.display()
            );
            assert_eq!(
                manager.command,
                None,
                "{}: the image's entrypoint runs the binary",
                path.display()
            );
            let security = pod.security_context.unwrap();
            let user = format!(
                "{}:{}",
                security.run_as_user.unwrap(),
                security.run_as_group.unwrap()
            );
            assert_eq!(user, oci::USER, "{}", path.display());
        }
    }
}
