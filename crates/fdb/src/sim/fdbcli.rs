//! `fdbcli --exec` against the fake database: each command applied through the fake's
//! [`AdminClient`] methods (so the fake records the same calls as with the in-process fake
//! clients) or its keys ([`super::keyspace`]), printed as fdbcli prints it.
//!
//! Contract:
//! - With more than one command each is echoed as `>>> <command>` first, as fdbcli does.
//! - The first failing command ends the run with exit 1; what the failure prints is
//!   [`super::backup::render_error`]'s (`Specified timeout reached` for a timeout).
//! - `status json` prints the fake's status; when the fake answers with a timeout (an
//!   unconfigured or unavailable database) it prints an unavailable document (exit 0), which
//!   the client's parser turns into the same timeout.
//! - Keys: `writemode on` is needed to write, `option on READ_SYSTEM_KEYS` (or
//!   `ACCESS_SYSTEM_KEYS`) to read `\xff` keys, `ACCESS_SYSTEM_KEYS` to write them. Writes
//!   inside `begin … commit` apply at `commit`; reads in a transaction see the database, not
//!   the transaction's own writes. Runs are serialised by the caller's `gate`, held from
//!   `begin` to `commit`, so a transaction never conflicts.
//! - `sleep <n>` sleeps (without the gate); `kill; kill L; sleep 1; kill L; sleep 5` is one
//!   `kill_for_upgrade` of L, `kill; kill L; sleep 5` one `kill`.

use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard};

use super::backup::render_error;
use super::keyspace::Keys;
use super::{Response, configure};
use crate::admin::keys::{printable, unescape};
use crate::admin::{AdminClient, AdminError};
use crate::crd::{ConnectionString, ProcessAddress};

#[derive(Default)]
struct Session {
    out: String,
    err: String,
    writemode: bool,
    system_keys: bool,
    read_system_keys: bool,
    transaction: Option<Vec<Write>>,
    upgrade_kill: Option<bool>,
}

enum Write {
    Set(Vec<u8>, Vec<u8>),
    Clear(Vec<u8>),
    ClearRange(Vec<u8>, Vec<u8>),
}

/// Runs `commands` (see the module docs).
pub async fn exec(keys: &Keys, gate: &Mutex<()>, commands: &[Vec<String>]) -> Response {
    let mut s = Session::default();
    let kills: Vec<&Vec<String>> = commands
        .iter()
        .filter(|c| c[0] == "kill" && c.len() > 1)
        .collect();
    if kills.len() == 2 && kills[0] == kills[1] {
        s.upgrade_kill = Some(false);
    }
    let mut guard: Option<MutexGuard<'_, ()>> = None;
    for tokens in commands {
        if commands.len() > 1 {
            s.out.push_str(&format!(">>> {}\n", tokens.join(" ")));
        }
        if tokens[0] == "sleep" && s.transaction.is_none() {
            guard = None;
            let secs: u64 = tokens.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(secs)).await;
            continue;
        }
        if guard.is_none() {
            guard = Some(gate.lock().await);
        }
        if let Err(e) = s.run(keys, tokens).await {
            let r = render_error(&e);
            s.out.push_str(&r.stdout);
            s.err.push_str(&r.stderr);
            return Response {
                stdout: s.out,
                stderr: s.err,
                code: r.code,
            };
        }
        if s.transaction.is_none() {
            guard = None;
        }
    }
    drop(guard);
    Response {
        stdout: s.out,
        stderr: s.err,
        code: 0,
    }
}

fn error(text: impl Into<String>) -> AdminError {
    AdminError::Command {
        binary: "fdbcli".into(),
        code: Some(1),
        output: format!("ERROR: {}", text.into()),
    }
}

fn arg(tokens: &[String], i: usize) -> Result<Vec<u8>, AdminError> {
    let t = tokens
        .get(i)
        .ok_or_else(|| error(format!("`{}' needs more arguments", tokens[0])))?;
    unescape(t).map_err(error)
}

fn targets(tokens: &[String]) -> Result<Vec<ProcessAddress>, AdminError> {
    tokens
        .iter()
        .map(|t| {
            if t.starts_with("locality_") && t.contains(':') {
                return Ok(ProcessAddress::new(t, 0, false));
            }
            ProcessAddress::parse(t).map_err(|_| {
                error(format!(
                    "'{t}' is neither a valid network endpoint address nor a locality"
                ))
            })
        })
        .collect()
}

impl Session {
    async fn run(&mut self, keys: &Keys, tokens: &[String]) -> Result<(), AdminError> {
        let rest = &tokens[1..];
        let db = &keys.fake;
        match tokens[0].as_str() {
            "status" if rest == ["json"] => self.status(keys).await?,
            "configure" => {
                let (new, config) = configure::parse(rest).map_err(error)?;
                db.configure_database(&config, new).await?;
                self.out.push_str(if new {
                    "Database created\n"
                } else {
                    "Configuration changed\n"
                });
            }
            "exclude" => self.exclude(keys, rest).await?,
            "include" => db.include(&targets(rest)?).await?,
            "kill" => self.kill(keys, rest).await?,
            "coordinators" => {
                let addresses = targets(rest)?;
                if addresses.is_empty() {
                    return Err(error("the simulator changes coordinators only"));
                }
                db.change_coordinators(&addresses).await?;
                self.out.push_str("Coordination state changed\n");
            }
            "maintenance" => match rest {
                [on, zone, secs] if on == "on" => {
                    let secs = secs
                        .parse()
                        .map_err(|_| error("bad maintenance duration"))?;
                    db.set_maintenance_zone(zone, secs).await?;
                }
                [off] if off == "off" => db.reset_maintenance_mode().await?,
                _ => return Err(error("the simulator runs `maintenance on|off' only")),
            },
            "option" => self.option(rest)?,
            "writemode" => self.writemode = rest.first().is_some_and(|m| m == "on"),
            "begin" => {
                self.transaction = Some(Vec::new());
                self.out.push_str("Transaction started\n");
            }
            "commit" => self.commit(keys).await?,
            "get" => self.get(keys, tokens).await?,
            "getrange" => self.getrange(keys, tokens).await?,
            "set" => {
                self.write(keys, Write::Set(arg(tokens, 1)?, arg(tokens, 2)?))
                    .await?
            }
            "clear" => self.write(keys, Write::Clear(arg(tokens, 1)?)).await?,
            "clearrange" => {
                self.write(keys, Write::ClearRange(arg(tokens, 1)?, arg(tokens, 2)?))
                    .await?;
            }
            other => {
                return Err(error(format!(
                    "Unknown command `{other}' (or not simulated by fdb-sim)."
                )));
            }
        }
        Ok(())
    }

    async fn status(&mut self, keys: &Keys) -> Result<(), AdminError> {
        let doc = match keys.fake.get_status().await {
            Ok(status) => serde_json::to_value(&status).map_err(|e| error(e.to_string()))?,
            Err(AdminError::Timeout(reason)) => unavailable(keys, &reason),
            Err(e) => return Err(e),
        };
        let text = serde_json::to_string_pretty(&doc).map_err(|e| error(e.to_string()))?;
        self.out.push_str(&text);
        self.out.push('\n');
        Ok(())
    }

    async fn exclude(&mut self, keys: &Keys, rest: &[String]) -> Result<(), AdminError> {
        let no_wait = rest.iter().any(|t| t == "no_wait");
        let words: Vec<String> = rest.iter().filter(|t| *t != "no_wait").cloned().collect();
        if words.iter().any(|w| w == "failed" || w == "FORCE") {
            return Err(error(
                "the simulator runs `exclude [no_wait] <targets>' only",
            ));
        }
        let addresses = targets(&words)?;
        if addresses.is_empty() {
            return Err(error(
                "At least one valid network endpoint address or a locality is not provided",
            ));
        }
        if !no_wait {
            self.out.push_str(
                "Waiting for state to be removed from all excluded servers. This may take a while.\n\
                 (Interrupting this wait with CTRL+C will not cancel the data movement.)\n",
            );
        }
        keys.fake.exclude(&addresses, no_wait).await?;
        let processes = keys.fake.processes();
        let holding = keys.fake.holding_data();
        for t in &words {
            let machine = if t.starts_with("locality_") {
                ""
            } else {
                "(Whole machine)"
            };
            let matching: Vec<_> = processes
                .iter()
                .filter(|p| {
                    p.address.split(':').next() == Some(t.as_str())
                        || p.address == *t
                        || *t == format!("locality_instance_id:{}", p.instance_id)
                })
                .collect();
            if matching.is_empty() {
                self.err.push_str(&format!("  {t}{machine}  ---- WARNING: Missing from cluster! Be sure that you excluded the correct processes before removing them from the cluster!\n"));
            } else if matching.iter().any(|p| holding.contains(&p.instance_id)) {
                self.err.push_str(&format!("  {t}{machine}  ---- WARNING: Exclusion in progress! It is not safe to remove this process from the cluster\n"));
            } else {
                self.out.push_str(&format!("  {t}{machine}  ---- Successfully excluded. It is now safe to remove this process from the cluster.\n"));
            }
        }
        Ok(())
    }

    async fn kill(&mut self, keys: &Keys, rest: &[String]) -> Result<(), AdminError> {
        if rest.is_empty() {
            return Ok(());
        }
        let addresses = targets(rest)?;
        match self.upgrade_kill {
            Some(false) => {
                keys.fake.kill_for_upgrade(&addresses).await?;
                self.upgrade_kill = Some(true);
            }
            Some(true) => {}
            None => keys.fake.kill(&addresses).await?,
        }
        self.out.push_str(&format!(
            "Attempted to kill {} processes\n",
            addresses.len()
        ));
        Ok(())
    }

    fn option(&mut self, rest: &[String]) -> Result<(), AdminError> {
        let on = match rest.first().map(String::as_str) {
            Some("on") => true,
            Some("off") => false,
            _ => return Err(error("Usage: option <on|off> <option>")),
        };
        match rest.get(1).map(String::as_str) {
            Some("ACCESS_SYSTEM_KEYS") => self.system_keys = on,
            Some("READ_SYSTEM_KEYS") => self.read_system_keys = on,
            other => {
                return Err(error(format!(
                    "Unrecognized option `{}' (or not simulated by fdb-sim)",
                    other.unwrap_or_default()
                )));
            }
        }
        let scope = if self.transaction.is_some() {
            "current transaction"
        } else {
            "all transactions"
        };
        let verb = if on { "enabled" } else { "disabled" };
        self.out.push_str(&format!("Option {verb} for {scope}\n"));
        Ok(())
    }

    fn readable(&self, key: &[u8]) -> Result<(), AdminError> {
        if key.first() == Some(&0xff) && !self.system_keys && !self.read_system_keys {
            return Err(error("Key outside legal range (2004)"));
        }
        Ok(())
    }

    async fn get(&mut self, keys: &Keys, tokens: &[String]) -> Result<(), AdminError> {
        let key = arg(tokens, 1)?;
        self.readable(&key)?;
        let line = match keys.get(&key).await? {
            Some(v) => format!("`{}' is `{}'\n", printable(&key), printable(&v)),
            None => format!("`{}': not found\n", printable(&key)),
        };
        self.out.push_str(&line);
        Ok(())
    }

    async fn getrange(&mut self, keys: &Keys, tokens: &[String]) -> Result<(), AdminError> {
        let begin = arg(tokens, 1)?;
        let end = match tokens.get(2) {
            Some(e) if e.parse::<usize>().is_err() => unescape(e).map_err(error)?,
            _ => vec![0xff],
        };
        let limit = tokens
            .last()
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|_| tokens.len() > 2)
            .unwrap_or(25);
        self.readable(&begin)?;
        let pairs = keys.range(&begin, &end, limit).await?;
        self.out.push('\n');
        for (k, v) in &pairs {
            self.out
                .push_str(&format!("`{}' is `{}'\n", printable(k), printable(v)));
        }
        if pairs.len() == limit {
            self.out
                .push_str(&format!("\nRange limited to {limit} keys\n"));
        }
        Ok(())
    }

    async fn write(&mut self, keys: &Keys, w: Write) -> Result<(), AdminError> {
        if !self.writemode {
            return Err(error(
                "writemode must be enabled to set or clear keys in the database.",
            ));
        }
        let key = match &w {
            Write::Set(k, _) | Write::Clear(k) | Write::ClearRange(k, _) => k,
        };
        if key.first() == Some(&0xff) && !self.system_keys {
            return Err(error("Key outside legal range (2004)"));
        }
        match &mut self.transaction {
            Some(pending) => pending.push(w),
            None => {
                apply(keys, &w).await?;
                self.committed(keys);
            }
        }
        Ok(())
    }

    async fn commit(&mut self, keys: &Keys) -> Result<(), AdminError> {
        let pending = self
            .transaction
            .take()
            .ok_or_else(|| error("No active transaction"))?;
        for w in &pending {
            apply(keys, w).await?;
        }
        self.committed(keys);
        Ok(())
    }

    fn committed(&mut self, keys: &Keys) {
        let version = keys.fake.now() * 1_000_000;
        self.out.push_str(&format!("Committed ({version})\n"));
    }
}

async fn apply(keys: &Keys, w: &Write) -> Result<(), AdminError> {
    match w {
        Write::Set(k, v) => keys.set(k, v).await,
        Write::Clear(k) => keys.clear(k).await,
        Write::ClearRange(b, e) => keys.clear_range(b, e).await,
    }
}

// What `status json` prints when the database does not answer: the client's view only.
fn unavailable(keys: &Keys, reason: &str) -> serde_json::Value {
    let cs = keys.fake.connection_string();
    let addresses: Vec<String> = ConnectionString::parse(&cs)
        .map(|c| c.coordinators)
        .unwrap_or_default();
    let processes = keys.fake.processes();
    let coordinators: Vec<serde_json::Value> = addresses
        .iter()
        .map(|a| {
            let reachable = processes.iter().any(|p| p.address == *a);
            serde_json::json!({"address": a, "reachable": reachable})
        })
        .collect();
    let reachable = coordinators
        .iter()
        .filter(|c| c["reachable"] == true)
        .count();
    serde_json::json!({
        "client": {
            "coordinators": {
                "coordinators": coordinators,
                "quorum_reachable": reachable * 2 > addresses.len(),
            },
            "database_status": {"available": false, "healthy": false},
            "messages": [{"name": "status_incomplete_timeout", "description": reason}],
        },
        "cluster": {"layers": {"_valid": false}},
    })
}
