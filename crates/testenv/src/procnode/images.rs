//! The image mapping: which host programs stand in for a container image on process-backed
//! nodes. Nothing is pulled; an image is a set of host files bound into the container's view
//! of the host's root filesystem, plus the image's ENTRYPOINT, CMD, ENV and WORKDIR.
//!
//! Contract:
//! - References are normalised like Docker's (`redis` is `docker.io/library/redis:latest`).
//! - Lookup order: an entry for the exact `repository:tag`, then one for the repository (any
//!   tag); entries from the ConfigMap `kube-system/procnode-images` (tests add theirs there)
//!   come before the built-in table:
//!
//!   | image | host files | entrypoint / cmd |
//!   |---|---|---|
//!   | `ghcr.io/flotilla/<bin>:*` | `<agent's target dir>/<bin>` at `/<bin>` | `/<bin>` |
//!   | `redis:*` | Debian's `redis-check-rdb` (the redis-server executable) at `/usr/local/bin/redis-server` and `…/redis-sentinel`, `redis-cli`, `redis-check-aof` | the official entrypoint's rule (bare arguments go to `redis-server`), cmd `redis-server`, workdir `/data` |
//!   | `debian:*` | none (the host is Debian) | `bash` |
//!
//! - An image without an entry, or whose host files are missing, does not resolve: the error
//!   text becomes the container's `ErrImagePull` message. Nothing ever runs by accident.
//! - Pure apart from [`Resolved::check`], which looks at the host's files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Namespace and name of the ConfigMap holding extra entries, one per data key (any key; the
/// value is an [`ImageEntry`] in YAML or JSON).
pub const CONFIG_MAP: (&str, &str) = ("kube-system", "procnode-images");

/// One image: what it maps to on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageEntry {
    /// The image it stands for: a repository (any tag) or `repository:tag`, normalised or not
    /// (`redis`, `docker.io/library/redis:7`, `ghcr.io/acme/app`).
    pub image: String,
    /// Files or directories visible in the container: container path → host path.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The image's ENTRYPOINT.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// The image's CMD.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// The image's ENV.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The image's WORKDIR.
    #[serde(default)]
    pub working_dir: Option<String>,
}

/// A normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `docker.io/library/redis`.
    pub repository: String,
    /// `7.2`, `latest`, or a digest (`sha256:…`).
    pub tag: String,
}

impl Reference {
    /// Normalises `image` like Docker does.
    pub fn parse(image: &str) -> Self {
        let (name, tag) = match image.split_once('@') {
            Some((name, digest)) => (name, Some(digest.to_string())),
            None => (image, None),
        };
        let (name, tag) = match (tag, name.rsplit_once(':')) {
            (Some(d), _) => (strip_tag(name), d),
            (None, Some((repo, t))) if !t.contains('/') => (repo, t.to_string()),
            (None, _) => (name, "latest".to_string()),
        };
        let first = name.split('/').next().unwrap_or_default();
        let has_domain = name.contains('/')
            && (first.contains('.') || first.contains(':') || first == "localhost");
        let repository = if has_domain {
            name.to_string()
        } else if name.contains('/') {
            format!("docker.io/{name}")
        } else {
            format!("docker.io/library/{name}")
        };
        Self { repository, tag }
    }
}

/// Does the reference name a tag or digest (rather than a whole repository)?
fn names_tag(image: &str) -> bool {
    image.contains('@')
        || image
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'))
}

fn strip_tag(name: &str) -> &str {
    match name.rsplit_once(':') {
        Some((repo, t)) if !t.contains('/') => repo,
        _ => name,
    }
}

/// The table: entries from the cluster, then the built-in ones.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// From the ConfigMap, in key order.
    pub extra: Vec<ImageEntry>,
    /// Where `ghcr.io/flotilla/<bin>` binaries are (the agent's own directory).
    pub bin_dir: PathBuf,
}

/// What an image resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The entry (for a prefix rule, made for this image).
    pub entry: ImageEntry,
    /// The `imageID` reported in the container status.
    pub image_id: String,
}

/// What the official redis image's entrypoint does (bar dropping root for the `redis` user):
/// bare arguments (`--port 1`, `x.conf`) are redis-server's; and, as the image is built with
/// protected mode off, redis-server gets `--protected-mode no` unless the arguments set it.
const REDIS_ENTRYPOINT: &str = r#"if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then set -- redis-server "$@"; fi
if [ "$1" = redis-server ]; then case " $* " in *" --protected-mode "*) ;; *) set -- "$@" --protected-mode no ;; esac; fi
exec "$@""#;

/// Repositories under which every name is a workspace binary.
const OWN_REGISTRY: &str = "ghcr.io/flotilla/";

impl Table {
    /// Finds the entry for `image`; the error is the `ErrImagePull` message.
    pub fn resolve(&self, image: &str) -> Result<Resolved, String> {
        let wanted = Reference::parse(image);
        let same_repo =
            |e: &&ImageEntry| Reference::parse(&e.image).repository == wanted.repository;
        let exact = self
            .extra
            .iter()
            .filter(same_repo)
            .find(|e| names_tag(&e.image) && Reference::parse(&e.image).tag == wanted.tag);
        let any_tag = || {
            self.extra
                .iter()
                .filter(same_repo)
                .find(|e| !names_tag(&e.image))
        };
        let entry = exact
            .or_else(any_tag)
            .cloned()
            .or_else(|| self.builtin(&wanted))
            .ok_or_else(|| {
                format!(
                    "image {image} has no process-node mapping (no host program stands in for \
                     {}:{}); add one to ConfigMap {}/{} (see docs/testenv.md)",
                    wanted.repository, wanted.tag, CONFIG_MAP.0, CONFIG_MAP.1
                )
            })?;
        Ok(Resolved {
            image_id: format!("proc://{}:{}", wanted.repository, wanted.tag),
            entry,
        })
    }

    fn builtin(&self, r: &Reference) -> Option<ImageEntry> {
        let image = format!("{}:{}", r.repository, r.tag);
        if let Some(bin) = r
            .repository
            .strip_prefix(OWN_REGISTRY)
            .filter(|b| !b.contains('/'))
        {
            let host = self.bin_dir.join(bin).display().to_string();
            return Some(ImageEntry {
                image,
                files: BTreeMap::from([(format!("/{bin}"), host)]),
                entrypoint: vec![format!("/{bin}")],
                ..ImageEntry::default()
            });
        }
        match r.repository.as_str() {
            "docker.io/library/redis" => {
                let server = "/usr/bin/redis-check-rdb";
                let files = [
                    ("/usr/local/bin/redis-server", server),
                    ("/usr/local/bin/redis-sentinel", server),
                    ("/usr/local/bin/redis-check-rdb", server),
                    ("/usr/local/bin/redis-check-aof", "/usr/bin/redis-check-aof"),
                    ("/usr/local/bin/redis-cli", "/usr/bin/redis-cli"),
                ];
                Some(ImageEntry {
                    image,
                    files: files
                        .iter()
                        .map(|(c, h)| (c.to_string(), h.to_string()))
                        .collect(),
                    // The official image's docker-entrypoint.sh: arguments alone (`--port 1`,
                    // `x.conf`) are redis-server's.
                    entrypoint: vec![
                        "sh".into(),
                        "-c".into(),
                        REDIS_ENTRYPOINT.into(),
                        "docker-entrypoint.sh".into(),
                    ],
                    cmd: vec!["redis-server".into()],
                    working_dir: Some("/data".into()),
                    ..ImageEntry::default()
                })
            }
            "docker.io/library/debian" => Some(ImageEntry {
                image,
                cmd: vec!["bash".into()],
                ..ImageEntry::default()
            }),
            _ => None,
        }
    }
}

impl Resolved {
    /// Fails when a host file of the entry is missing, naming it.
    pub fn check(&self) -> Result<(), String> {
        for (path, host) in &self.entry.files {
            if !Path::new(host).exists() {
                return Err(format!(
                    "image {} maps {path} to {host}, which does not exist on this host{}",
                    self.entry.image,
                    hint(host)
                ));
            }
        }
        Ok(())
    }
}

fn hint(host: &str) -> String {
    if host.starts_with("/usr/bin/redis") {
        " (install Debian's redis-tools)".into()
    } else if let Some(bin) = Path::new(host).file_name().and_then(|n| n.to_str()) {
        format!(" (build it: cargo build --bin {bin})")
    } else {
        String::new()
    }
}

/// Parses the ConfigMap's entries, skipping (and reporting) unreadable ones.
pub fn parse_entries(data: &BTreeMap<String, String>) -> (Vec<ImageEntry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for (key, value) in data {
        match serde_yaml::from_str::<ImageEntry>(value) {
            Ok(e) => entries.push(e),
            Err(e) => errors.push(format!("{key}: {e}")),
        }
    }
    (entries, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalise_like_docker() {
        let cases = [
            ("redis", "docker.io/library/redis", "latest"),
            ("redis:7.2", "docker.io/library/redis", "7.2"),
            ("library/redis:7", "docker.io/library/redis", "7"),
            ("bitnami/redis", "docker.io/bitnami/redis", "latest"),
            (
                "ghcr.io/flotilla/redroid-operator:0.1.0",
                "ghcr.io/flotilla/redroid-operator",
                "0.1.0",
            ),
            ("localhost:5000/app", "localhost:5000/app", "latest"),
            ("localhost:5000/app:v1", "localhost:5000/app", "v1"),
            ("redis@sha256:abc", "docker.io/library/redis", "sha256:abc"),
            (
                "redis:7@sha256:abc",
                "docker.io/library/redis",
                "sha256:abc",
            ),
        ];
        for (image, repo, tag) in cases {
            let r = Reference::parse(image);
            assert_eq!(
                (r.repository.as_str(), r.tag.as_str()),
                (repo, tag),
                "{image}"
            );
        }
    }

    fn table() -> Table {
        Table {
            extra: vec![
                ImageEntry {
                    image: "ghcr.io/flotilla/redroid-operator:test-1".into(),
                    files: BTreeMap::from([(
                        "/redroid-operator".into(),
                        "/fresh/redroid-operator".into(),
                    )]),
                    ..ImageEntry::default()
                },
                ImageEntry {
                    image: "example.com/tools".into(),
                    cmd: vec!["tool".into()],
                    ..ImageEntry::default()
                },
            ],
            bin_dir: PathBuf::from("/target/debug"),
        }
    }

    #[test]
    fn lookup_prefers_exact_tags_then_repositories_then_the_builtins() {
        let t = table();
        let host = |image: &str, path: &str| {
            t.resolve(image)
                .map(|r| r.entry.files.get(path).cloned())
                .expect("resolves")
        };
        // Exact tag from the cluster's table.
        assert_eq!(
            host(
                "ghcr.io/flotilla/redroid-operator:test-1",
                "/redroid-operator"
            )
            .as_deref(),
            Some("/fresh/redroid-operator")
        );
        // Any other tag: the built-in rule for our own images.
        assert_eq!(
            host(
                "ghcr.io/flotilla/redroid-operator:0.1.0",
                "/redroid-operator"
            )
            .as_deref(),
            Some("/target/debug/redroid-operator")
        );
        let own = t
            .resolve("ghcr.io/flotilla/cocoon-operator:latest")
            .expect("own image");
        assert_eq!(own.entry.entrypoint, ["/cocoon-operator"]);
        // A repository entry matches every tag.
        assert_eq!(
            t.resolve("example.com/tools:9").expect("tools").entry.cmd,
            ["tool"]
        );
        // Docker Hub short names.
        let redis = t.resolve("redis:7.0").expect("redis");
        assert_eq!(redis.entry.cmd, ["redis-server"]);
        assert_eq!(redis.entry.entrypoint[3], "docker-entrypoint.sh");
        assert_eq!(
            redis
                .entry
                .files
                .get("/usr/local/bin/redis-server")
                .map(String::as_str),
            Some("/usr/bin/redis-check-rdb")
        );
        assert_eq!(redis.image_id, "proc://docker.io/library/redis:7.0");
        assert!(t.resolve("debian:bookworm").is_ok());
    }

    #[test]
    fn unmapped_images_fail_with_a_reason() {
        let t = table();
        for image in [
            "nginx",
            "ghcr.io/flotilla/nested/x:1",
            "quay.io/someone/else",
        ] {
            let err = t.resolve(image).expect_err(image);
            assert!(err.contains("has no process-node mapping"), "{err}");
        }
        let missing = t.resolve("ghcr.io/flotilla/not-built:1").expect("maps");
        let err = missing.check().expect_err("binary missing");
        assert!(
            err.contains("/target/debug/not-built") && err.contains("cargo build"),
            "{err}"
        );
    }

    #[test]
    fn config_map_entries_parse_as_yaml() {
        let data = BTreeMap::from([
            (
                "good".to_string(),
                "image: busybox\nfiles: {/bin/busybox: /usr/bin/busybox}\ncmd: [sh]\n".to_string(),
            ),
            ("bad".to_string(), "image: [".to_string()),
        ]);
        let (entries, errors) = parse_entries(&data);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].cmd, ["sh"]);
        assert_eq!(errors.len(), 1);
    }
}
