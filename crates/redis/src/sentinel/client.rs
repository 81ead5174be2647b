//! Asking Sentinels over RESP (port 26379, plain TCP or TLS as the caller's [`Dial`] says):
//! the master's address and flags, one Sentinel or all of them at once.
//!
//! Contract: [`ask`] never fails: a Sentinel that does not answer within the timeout, or
//! answers something unexpected, is [`Answer::Unreachable`] with the reason; one that does
//! not monitor the name is [`Answer::Unknown`]. [`ask_all`] asks every address concurrently
//! and keeps their order.

use std::time::Duration;

use super::quorum::Answer;
use crate::instance::dial::Dial;
use crate::instance::resp::Value;

/// Asks the Sentinel at `ip:port` about master `name`.
pub async fn ask(dial: &Dial, ip: &str, port: u16, name: &str, timeout: Duration) -> Answer {
    match tokio::time::timeout(timeout, ask_inner(dial, ip, port, name, timeout)).await {
        Ok(a) => a,
        Err(_) => Answer::Unreachable(format!("{ip}:{port}: no answer within {timeout:?}")),
    }
}

async fn ask_inner(dial: &Dial, ip: &str, port: u16, name: &str, timeout: Duration) -> Answer {
    let mut c = match dial.conn(ip, port, timeout).await {
        Ok(c) => c,
        Err(e) => return Answer::Unreachable(format!("{ip}:{port}: {e}")),
    };
    let addr = match c
        .command(&["SENTINEL", "get-master-addr-by-name", name])
        .await
    {
        Ok(Value::Array(Some(parts))) if parts.len() == 2 => parts,
        Ok(Value::Array(None) | Value::Bulk(None)) => return Answer::Unknown,
        Ok(other) => return Answer::Unreachable(format!("{ip}:{port}: unexpected {other:?}")),
        Err(e) => return Answer::Unreachable(format!("{ip}:{port}: {e}")),
    };
    let (Some(mip), Some(mport)) = (addr[0].text(), addr[1].int()) else {
        return Answer::Unreachable(format!("{ip}:{port}: unreadable address {addr:?}"));
    };
    let flags = match c.command(&["SENTINEL", "master", name]).await {
        Ok(Value::Array(Some(kv))) => flags_of(&kv),
        _ => String::new(),
    };
    Answer::Master {
        ip: mip,
        port: u16::try_from(mport).unwrap_or(0),
        flags,
    }
}

/// The `flags` field of a `SENTINEL master` reply (a flat key/value array).
pub fn flags_of(kv: &[Value]) -> String {
    kv.chunks(2)
        .find(|p| p.len() == 2 && p[0].text().as_deref() == Some("flags"))
        .and_then(|p| p[1].text())
        .unwrap_or_default()
}

/// Asks every Sentinel in `ips` (on `port`) at once.
pub async fn ask_all(
    dial: &Dial,
    ips: &[String],
    port: u16,
    name: &str,
    timeout: Duration,
) -> Vec<Answer> {
    futures::future::join_all(ips.iter().map(|ip| ask(dial, ip, port, name, timeout))).await
}

/// How many replicas and other Sentinels the Sentinel at `ip:port` knows for master `name`
/// (stale ones included), `None` when it does not say.
pub async fn known(
    dial: &Dial,
    ip: &str,
    port: u16,
    name: &str,
    timeout: Duration,
) -> Option<(i64, i64)> {
    let ask = async {
        let mut c = dial.conn(ip, port, timeout).await.ok()?;
        let Value::Array(Some(kv)) = c.command(&["SENTINEL", "master", name]).await.ok()? else {
            return None;
        };
        let field = |k: &str| {
            kv.chunks(2)
                .find(|p| p.len() == 2 && p[0].text().as_deref() == Some(k))
                .and_then(|p| p[1].int())
        };
        Some((field("num-slaves")?, field("num-other-sentinels")?))
    };
    tokio::time::timeout(timeout, ask).await.ok().flatten()
}

/// Sends `SENTINEL RESET <name>` to the Sentinel at `ip:port`: it forgets the replicas and
/// Sentinels it knows and rediscovers the live ones within seconds.
pub async fn reset(
    dial: &Dial,
    ip: &str,
    port: u16,
    name: &str,
    timeout: Duration,
) -> Result<(), String> {
    let mut c = dial
        .conn(ip, port, timeout)
        .await
        .map_err(|e| e.to_string())?;
    c.command(&["SENTINEL", "RESET", name])
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Sends `SENTINEL SET <name> auth-pass <password>` to the Sentinel at `ip:port`.
pub async fn set_auth_pass(
    dial: &Dial,
    ip: &str,
    port: u16,
    name: &str,
    password: &str,
    timeout: Duration,
) -> Result<(), String> {
    let mut c = dial
        .conn(ip, port, timeout)
        .await
        .map_err(|e| e.to_string())?;
    c.command(&["SENTINEL", "SET", name, "auth-pass", password])
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn flags_are_read_from_the_key_value_reply() {
        let kv = [
            b("name"),
            b("demo"),
            b("flags"),
            b("master,s_down"),
            b("ip"),
            b("1.2.3.4"),
        ];
        assert_eq!(flags_of(&kv), "master,s_down");
        assert_eq!(flags_of(&[b("name"), b("demo")]), "");
    }
}
