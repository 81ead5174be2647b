//! The instance manager's connections to its own redis-server, over the Unix socket, and the
//! Redis commands behind each role change.
//!
//! Contract:
//! - [`Local::conn`] opens a fresh connection and authenticates with the newest password the
//!   rotation holds, falling back to older ones, so a rotated password never locks the
//!   instance manager out (upstream kept the boot-time password for ever). Connections are not
//!   pooled: each operation opens its own, which keeps a slow command (a switchover's wait)
//!   from blocking a health check.
//! - [`Local::follow`] is `REPLICAOF host port` followed, when asked, by `CLIENT KILL TYPE
//!   normal` and `CLIENT KILL TYPE pubsub` (never the replication links, never itself), so
//!   clients of a demoted primary reconnect to the new one.
//! - [`Local::switchover`] runs Redis `FAILOVER TO host port TIMEOUT ms` (writes paused while
//!   the target catches up, then an atomic handover) and waits for its end: the outcome says
//!   whether this instance is now a replica of the target or the failover was abandoned with
//!   writes resumed, in which case nothing was lost and nothing changed.
//! - [`Local::shutdown`] asks for a graceful `SHUTDOWN` (persist, wait for lagging replicas up
//!   to `shutdown-timeout`); the connection closing is the success.

use std::path::PathBuf;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use super::info::Info;
use super::resp::{Conn, RespError};

/// Timeout of ordinary commands.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// The local redis-server.
#[derive(Debug)]
pub struct Local {
    socket: PathBuf,
    passwords: RwLock<Vec<String>>,
}

/// How a switchover ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Switchover {
    /// This instance is a replica of the target now.
    Done,
    /// Already a replica of the target before the call.
    Already,
    /// Redis abandoned it (the target did not catch up in time); still primary, writes on.
    Abandoned(String),
}

impl Local {
    /// The redis-server behind `socket`, authenticated with `passwords` (newest first).
    pub fn new(socket: PathBuf, passwords: Vec<String>) -> Self {
        Self {
            socket,
            passwords: RwLock::new(passwords),
        }
    }

    /// Replaces the passwords new connections try (newest first).
    pub fn set_passwords(&self, passwords: Vec<String>) {
        *self.passwords.write().unwrap_or_else(|p| p.into_inner()) = passwords;
    }

    /// The socket path.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// An authenticated connection.
    pub async fn conn(&self) -> Result<Conn, RespError> {
        let passwords = self
            .passwords
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut last = RespError::Server("NOAUTH no password to authenticate with".into());
        for pw in passwords.iter().filter(|p| !p.is_empty()) {
            let mut c = Conn::unix(&self.socket, COMMAND_TIMEOUT).await?;
            match c.command(&["AUTH", pw.as_str()]).await {
                Ok(_) => return Ok(c),
                Err(e) if e.is_auth() => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// `INFO <section>` parsed.
    pub async fn info(&self, section: &str) -> Result<Info, RespError> {
        let text = self.conn().await?.text(&["INFO", section]).await?;
        Ok(Info::parse(&text))
    }

    /// `PING`.
    pub async fn ping(&self) -> Result<(), RespError> {
        self.conn().await?.command(&["PING"]).await.map(drop)
    }

    /// `REPLICAOF NO ONE`.
    pub async fn promote(&self) -> Result<(), RespError> {
        self.conn()
            .await?
            .command(&["REPLICAOF", "NO", "ONE"])
            .await
            .map(drop)
    }

    /// `REPLICAOF host port`, then kills normal and pub/sub clients when `kill_clients`.
    pub async fn follow(
        &self,
        host: &str,
        port: u16,
        kill_clients: bool,
    ) -> Result<u64, RespError> {
        let mut c = self.conn().await?;
        c.command(&["REPLICAOF", host, &port.to_string()]).await?;
        if !kill_clients {
            return Ok(0);
        }
        kill_clients_on(&mut c).await
    }

    /// Kills normal and pub/sub clients (not replication links, not this connection).
    pub async fn kill_clients(&self) -> Result<u64, RespError> {
        kill_clients_on(&mut self.conn().await?).await
    }

    /// `CONFIG SET key value`.
    pub async fn config_set(&self, key: &str, value: &str) -> Result<(), RespError> {
        self.conn()
            .await?
            .command(&["CONFIG", "SET", key, value])
            .await
            .map(drop)
    }

    /// Any command.
    pub async fn command(&self, args: &[String]) -> Result<super::resp::Value, RespError> {
        self.conn().await?.command(args).await
    }

    /// Hands the primary role to the replica at `host:port` (see the module contract).
    pub async fn switchover(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<Switchover, RespError> {
        let before = self.info("replication").await?;
        if before.master() == Some((host.to_owned(), port)) {
            return Ok(Switchover::Already);
        }
        let ms = timeout.as_millis().max(1).to_string();
        if before.get("master_failover_state") == "no-failover"
            || before.get("master_failover_state").is_empty()
        {
            self.conn()
                .await?
                .command(&["FAILOVER", "TO", host, &port.to_string(), "TIMEOUT", &ms])
                .await?;
        }
        // Redis ends the failover by itself: handed over, or abandoned at the timeout.
        let deadline = Instant::now() + timeout + Duration::from_secs(10);
        loop {
            let i = self.info("replication").await?;
            if i.get("master_failover_state") == "no-failover" {
                if !i.is_master() {
                    kill_clients_on(&mut self.conn().await?).await?;
                    return Ok(Switchover::Done);
                }
                return Ok(Switchover::Abandoned(format!(
                    "{host}:{port} did not catch up within {} ms; the failover was abandoned and writes resumed",
                    timeout.as_millis()
                )));
            }
            if Instant::now() > deadline {
                return Err(RespError::Timeout(timeout));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A graceful `SHUTDOWN`; `Ok` once the server closed the connection.
    pub async fn shutdown(&self, wait: Duration) -> Result<(), RespError> {
        let mut c = self.conn().await?;
        c.set_timeout(wait);
        match c.command(&["SHUTDOWN"]).await {
            Err(RespError::Closed) | Err(RespError::Io(_)) => Ok(()),
            Err(e) => Err(e),
            Ok(v) => Err(RespError::Server(format!("SHUTDOWN answered {v:?}"))),
        }
    }
}

async fn kill_clients_on(c: &mut Conn) -> Result<u64, RespError> {
    let mut killed = 0;
    for kind in ["normal", "pubsub"] {
        let n = c
            .command(&["CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes"])
            .await?;
        killed += n.int().unwrap_or(0).max(0) as u64;
    }
    Ok(killed)
}
