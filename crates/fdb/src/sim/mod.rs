//! `fdb-sim`: a stand-in for FoundationDB's command-line tools, serving the in-memory
//! [`FakeDatabase`](crate::admin::fake::FakeDatabase) to the operator's real admin client
//! ([`crate::admin::cli`]). Test support and a tool for trying the operator by hand; it is not
//! part of the operator's image (which holds `fdb-operator` only).
//!
//! Two roles, one binary (`src/bin/fdb-sim.rs`):
//! - **server** (`fdb-sim serve --socket <path>`): holds the databases ([`server::Registry`]),
//!   one per cluster, found by the cluster file's content (the connection string); listens on
//!   that unix socket only. With `--follow-namespace <ns>` its processes follow that
//!   namespace's FoundationDB pods as their monitors would make them ([`follow`]).
//! - **front end**: the same binary invoked as `fdbcli`, `fdbbackup` or `fdbrestore`
//!   (symlinks laid out as `$FDB_BINARY_DIR/<major.minor>/<tool>`, see [`install`]). It parses
//!   exactly the arguments the admin client passes ([`args`]), reads the cluster file, sends
//!   the request to the server and prints the answer in FoundationDB's formats with
//!   FoundationDB's exit codes; `fdbcli --version` is answered locally from the version
//!   directory's name ([`protocol_version`]).
//!
//! The socket: `$FDB_SIM_SOCKET` when set, else `fdb-sim.sock` in `$FDB_BINARY_DIR` (the
//! directory above the version directory the tool was started from), where [`install`] and
//! `fdb-sim install` expect the server to listen. The socket file is the only channel: no TCP.
//!
//! What it plays and what it does not: see docs/fdb.md ("What the fake database proves").

pub mod args;
pub mod backup;
pub mod configure;
pub mod fdbcli;
pub mod follow;
pub mod keyspace;
pub mod server;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable naming the server's socket (overrides the file next to the
/// binaries).
pub const SOCKET_ENV: &str = "FDB_SIM_SOCKET";
/// The socket's file name in `$FDB_BINARY_DIR`.
pub const SOCKET_FILE: &str = "fdb-sim.sock";
/// The tools the front end answers to.
pub const TOOLS: [&str; 3] = ["fdbcli", "fdbbackup", "fdbrestore"];

/// One tool run, as the front end sends it to the server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Request {
    /// The cluster file's content (trimmed; empty when the call names none).
    pub cluster_file: String,
    /// What to do.
    pub call: Call,
}

/// What a tool was asked to do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Call {
    /// `fdbcli --exec`: the commands, each as its tokens (still escaped as typed).
    Exec(Vec<Vec<String>>),
    /// An `fdbbackup` subcommand.
    Backup(args::BackupArgs),
    /// An `fdbrestore` subcommand.
    Restore(args::RestoreArgs),
}

/// What the tool prints and how it exits.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit code.
    pub code: i32,
}

impl Response {
    /// A success printing `stdout`.
    pub fn ok(stdout: impl Into<String>) -> Self {
        Response {
            stdout: stdout.into(),
            ..Response::default()
        }
    }

    /// A failure (exit 1) printing `stderr`.
    pub fn error(stderr: impl Into<String>) -> Self {
        Response {
            stderr: stderr.into(),
            code: 1,
            ..Response::default()
        }
    }
}

/// The socket the front end started as `argv0` talks to: `$FDB_SIM_SOCKET`, else
/// `<argv0's directory>/../fdb-sim.sock`.
pub fn socket_path(argv0: &Path, env: Option<PathBuf>) -> PathBuf {
    if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
        return p;
    }
    let version_dir = argv0.parent().unwrap_or(Path::new("."));
    version_dir
        .parent()
        .unwrap_or(Path::new("."))
        .join(SOCKET_FILE)
}

/// FoundationDB's protocol version of a `major.minor` (or full release-candidate) version
/// directory, as `fdbcli --version` prints it; `None` for a name that is no version.
pub fn protocol_version(version_dir: &str) -> Option<String> {
    let mut parts = version_dir.split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    // The releases' own protocol versions; later ones follow their pattern.
    let known = match (major, minor) {
        (6, 2) => "fdb00b062010001",
        (6, 3) => "fdb00b063010001",
        (7, 0) => "fdb00b070010001",
        (7, 1) => "fdb00b071010000",
        _ => return Some(format!("fdb00b0{major}{minor}000000")),
    };
    Some(known.to_owned())
}

/// `fdbcli --version`'s text for a version directory.
pub fn version_text(version_dir: &str) -> Option<String> {
    let protocol = protocol_version(version_dir)?;
    Some(format!(
        "FoundationDB CLI {version_dir} (fdb-sim)\nsource version fdb-sim\nprotocol {protocol}\n"
    ))
}

/// Lays out `dir` as a `$FDB_BINARY_DIR`: `<dir>/<major.minor>/{fdbcli,fdbbackup,fdbrestore}`
/// as symlinks to `exe` for each version (`7.1.57` → `7.1`); returns the socket path the
/// front ends will use (`<dir>/fdb-sim.sock`).
pub fn install(dir: &Path, exe: &Path, versions: &[&str]) -> std::io::Result<PathBuf> {
    for version in versions {
        let v = crate::crd::FdbVersion::parse(version)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let sub = if v.release_candidate > 0 {
            v.to_string()
        } else {
            v.compact()
        };
        let target = dir.join(sub);
        std::fs::create_dir_all(&target)?;
        for tool in TOOLS {
            let link = target.join(tool);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(exe, &link)?;
        }
    }
    Ok(dir.join(SOCKET_FILE))
}

/// What the front end does with a command line: answer it locally, or send a request.
#[derive(Debug, PartialEq)]
pub enum Prepared {
    /// Print this and exit (`--version`, a bad command line, an unreadable cluster file).
    Answer(Response),
    /// Send this to the server, waiting at most the timeout.
    Send(Request, std::time::Duration),
}

/// How long the front end waits for the server when the tool has no `--timeout`.
pub const DEFAULT_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Reads the command line of the tool started as `argv0` (its file name is the tool, its
/// directory the version) and the cluster file it names.
pub fn prepare(argv0: &Path, args: &[String]) -> Prepared {
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let tool = name(Some(argv0));
    let version_dir = name(argv0.parent());
    let parsed = match args::parse(&tool, args) {
        Ok(p) => p,
        Err(e) => return Prepared::Answer(Response::error(format!("ERROR: {e}\n"))),
    };
    let (cluster_file, timeout, call) = match parsed {
        args::Parsed::Version => {
            return Prepared::Answer(match version_text(&version_dir) {
                Some(text) => Response::ok(text),
                None => Response::error(format!(
                    "ERROR: fdb-sim: {version_dir:?} is no version directory; install the tools under $FDB_BINARY_DIR/<major.minor>/\n"
                )),
            });
        }
        args::Parsed::Run {
            cluster_file,
            timeout,
            call,
        } => (cluster_file, timeout, call),
    };
    let content = match &cluster_file {
        None => String::new(),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => text.trim().to_owned(),
            Err(e) => {
                return Prepared::Answer(Response::error(format!(
                    "ERROR: Unable to read cluster file `{}': {e}\n",
                    path.display()
                )));
            }
        },
    };
    let request = Request {
        cluster_file: content,
        call,
    };
    Prepared::Send(request, timeout.unwrap_or(DEFAULT_WAIT))
}

/// The front end: the tool started as `argv0` with `args`, answered by the server the
/// socket rules name (see the module docs).
pub async fn front_end(argv0: &Path, args: &[String]) -> Response {
    match prepare(argv0, args) {
        Prepared::Answer(r) => r,
        Prepared::Send(req, timeout) => {
            let socket = socket_path(argv0, std::env::var_os(SOCKET_ENV).map(PathBuf::from));
            server::call(&socket, &req, timeout).await
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn socket_next_to_the_binaries_unless_the_environment_names_one() {
        let argv0 = Path::new("/opt/fdb/7.1/fdbcli");
        assert_eq!(socket_path(argv0, None), Path::new("/opt/fdb/fdb-sim.sock"));
        assert_eq!(
            socket_path(argv0, Some("/run/sim.sock".into())),
            Path::new("/run/sim.sock")
        );
        assert_eq!(
            socket_path(argv0, Some("".into())),
            Path::new("/opt/fdb/fdb-sim.sock")
        );
    }

    #[test]
    fn version_text_goes_through_the_admin_clients_parser() {
        assert_eq!(protocol_version("7.1").as_deref(), Some("fdb00b071010000"));
        assert_eq!(protocol_version("7.3").as_deref(), Some("fdb00b073000000"));
        assert_eq!(
            protocol_version("7.1.0-rc1").as_deref(),
            Some("fdb00b071010000")
        );
        assert_eq!(protocol_version("tools"), None);
        let text = version_text("7.1").unwrap();
        assert!(text.starts_with("FoundationDB CLI 7.1"));
    }

    #[test]
    fn install_links_each_tool_under_major_minor() {
        let dir = std::env::temp_dir().join(format!("fdb-sim-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let socket = install(&dir, Path::new("/bin/true"), &["7.1.57", "7.3.63"]).unwrap();
        assert_eq!(socket, dir.join("fdb-sim.sock"));
        for v in ["7.1", "7.3"] {
            for tool in TOOLS {
                let link = std::fs::read_link(dir.join(v).join(tool)).unwrap();
                assert_eq!(link, Path::new("/bin/true"));
            }
        }
        install(&dir, Path::new("/bin/false"), &["7.1.57"]).expect("a second install replaces");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
