//! The simulator's server: the databases, found by cluster file, behind a unix socket.
//!
//! Contract of [`Registry`]:
//! - A request's cluster file selects the database that has had exactly that connection
//!   string (every string a database had is remembered, so a file from before a coordinator
//!   change still reaches it, as the old coordinators forward real clients); else a database
//!   created by name ([`Registry::database`]) that has no connection string yet and whose name
//!   is the file's description claims it (the stand-in for processes reading the operator's
//!   first cluster file); else a new database is created for it.
//! - A request without a cluster file (`fdbbackup delete`) goes to the only database; with
//!   none or several it is refused.
//! - One request runs at a time per command (a transaction holds the gate to its `commit`).
//!
//! Wire format: one JSON [`Request`] line in, one JSON [`Response`] line out, per connection.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::keyspace::Keys;
use super::{Call, Request, Response, backup, fdbcli};
use crate::admin::fake::FakeDatabase;
use crate::crd::ConnectionString;

struct Entry {
    name: String,
    keys: Keys,
    known: BTreeSet<String>,
}

/// The simulated databases; clones share them.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Arc<Mutex<Vec<Entry>>>,
    gate: Arc<tokio::sync::Mutex<()>>,
    drain_reads: u32,
}

impl Registry {
    /// No databases yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every database it creates keeps an excluded process's data for `reads` status reads
    /// ([`FakeDatabase::set_drain_reads`]).
    #[must_use]
    pub fn with_drain_reads(mut self, reads: u32) -> Self {
        self.drain_reads = reads;
        self
    }

    fn new_database(&self) -> FakeDatabase {
        let db = FakeDatabase::new();
        db.set_drain_reads(self.drain_reads);
        db
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The database named `name` (a cluster's description), created when missing.
    pub fn database(&self, name: &str) -> FakeDatabase {
        let mut entries = self.entries();
        if let Some(e) = entries.iter().find(|e| e.name == name) {
            return e.keys.fake.clone();
        }
        let keys = Keys::new(self.new_database());
        let fake = keys.fake.clone();
        entries.push(Entry {
            name: name.to_owned(),
            keys,
            known: BTreeSet::new(),
        });
        fake
    }

    /// A database named `name` that no cluster file has reached yet (no connection string),
    /// created when there is none: where a new cluster's processes go before the operator's
    /// first cluster file claims it. Unlike [`Registry::database`] it never returns the
    /// database of an older cluster of the same name.
    pub fn unclaimed(&self, name: &str) -> FakeDatabase {
        let mut entries = self.entries();
        if let Some(e) = entries
            .iter()
            .find(|e| e.name == name && e.keys.fake.connection_string().is_empty())
        {
            return e.keys.fake.clone();
        }
        let keys = Keys::new(self.new_database());
        let fake = keys.fake.clone();
        entries.push(Entry {
            name: name.to_owned(),
            keys,
            known: BTreeSet::new(),
        });
        fake
    }

    /// The databases by name.
    pub fn databases(&self) -> Vec<(String, FakeDatabase)> {
        self.entries()
            .iter()
            .map(|e| (e.name.clone(), e.keys.fake.clone()))
            .collect()
    }

    /// The database `cluster_file` reaches (see the module docs).
    pub fn resolve(&self, cluster_file: &str) -> Result<Keys, String> {
        let mut entries = self.entries();
        if cluster_file.is_empty() {
            return match entries.as_slice() {
                [only] => Ok(only.keys.clone()),
                _ => {
                    Err("fdb-sim: a call without a cluster file needs exactly one database".into())
                }
            };
        }
        let cs = ConnectionString::parse(cluster_file)
            .map_err(|e| format!("ERROR: Invalid cluster file content {cluster_file:?}: {e}"))?;
        if let Some(e) = entries.iter().find(|e| e.known.contains(cluster_file)) {
            return Ok(e.keys.clone());
        }
        let claimable = entries
            .iter_mut()
            .find(|e| e.name == cs.database_name && e.keys.fake.connection_string().is_empty());
        let entry = match claimable {
            Some(e) => e,
            None => {
                entries.push(Entry {
                    name: cs.database_name.clone(),
                    keys: Keys::new(self.new_database()),
                    known: BTreeSet::new(),
                });
                entries.last_mut().expect("just pushed")
            }
        };
        entry.keys.fake.set_connection_string(cluster_file);
        entry.known.insert(cluster_file.to_owned());
        Ok(entry.keys.clone())
    }

    // Remembers the database's current connection string (after a coordinator change).
    fn remember(&self, keys: &Keys) {
        let cs = keys.fake.connection_string();
        for e in self.entries().iter_mut() {
            if e.keys.same(keys) {
                e.known.insert(cs.clone());
            }
        }
    }

    /// Runs one request.
    pub async fn handle(&self, req: &Request) -> Response {
        let keys = match self.resolve(&req.cluster_file) {
            Ok(k) => k,
            Err(e) => return Response::error(format!("{e}\n")),
        };
        let response = match &req.call {
            Call::Exec(commands) => fdbcli::exec(&keys, &self.gate, commands).await,
            Call::Backup(args) => {
                let _gate = self.gate.lock().await;
                backup::backup(&keys, args).await
            }
            Call::Restore(args) => {
                let _gate = self.gate.lock().await;
                backup::restore(&keys, args).await
            }
        };
        self.remember(&keys);
        response
    }
}

/// Serves `registry` on `listener` until `shutdown`.
pub async fn serve(listener: UnixListener, registry: Registry, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "fdb-sim: accept failed");
                    continue;
                }
            },
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &registry).await {
                tracing::warn!(error = %e, "fdb-sim: a connection failed");
            }
        });
    }
}

async fn answer(stream: UnixStream, registry: &Registry) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let response = match serde_json::from_str::<Request>(&line) {
        Ok(req) => registry.handle(&req).await,
        Err(e) => Response::error(format!("fdb-sim: unreadable request: {e}\n")),
    };
    let mut out = serde_json::to_vec(&response).map_err(std::io::Error::other)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

/// Sends `req` to the server at `socket`; a server that cannot be reached or does not answer
/// within `timeout` is a database that did not answer (`Specified timeout reached`).
pub async fn call(socket: &Path, req: &Request, timeout: Duration) -> Response {
    let exchange = async {
        let stream = UnixStream::connect(socket).await?;
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        write.write_all(&line).await?;
        let mut answer = String::new();
        BufReader::new(read).read_line(&mut answer).await?;
        serde_json::from_str::<Response>(&answer).map_err(std::io::Error::other)
    };
    let why = match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(response)) => return response,
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {timeout:?}"),
    };
    Response::error(format!(
        "ERROR: Specified timeout reached -- the fdb-sim server at {} did not answer: {why}\n",
        socket.display()
    ))
}

/// `fdb-sim serve`: binds `socket` (replacing a stale socket file), serves until SIGINT or
/// SIGTERM, then removes the socket file. Its databases drain excluded processes over
/// `drain_reads` status reads. With `follow` (a client and a namespace), the
/// databases' processes follow that namespace's FoundationDB pods
/// ([`super::follow::follow_namespace`]).
pub async fn run(
    socket: &Path,
    follow: Option<(kube::Client, String)>,
    drain_reads: u32,
) -> anyhow::Result<()> {
    if socket.exists() {
        std::fs::remove_file(socket)?;
    }
    let listener = UnixListener::bind(socket)?;
    tracing::info!(socket = %socket.display(), "fdb-sim serving");
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.cancel();
    });
    let registry = Registry::new().with_drain_reads(drain_reads);
    if let Some((client, namespace)) = follow {
        tracing::info!(%namespace, "following the FoundationDB pods");
        tokio::spawn(super::follow::follow_namespace(
            registry.clone(),
            client,
            namespace,
            shutdown.clone(),
        ));
    }
    serve(listener, registry, shutdown).await;
    let _ = std::fs::remove_file(socket);
    Ok(())
}
