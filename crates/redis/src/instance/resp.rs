//! A small RESP2 client for the instance manager's own connections to its redis-server (over
//! a Unix socket) and to peers (TCP, for password checks and tests).
//!
//! Contract:
//! - [`encode`] writes a command as an array of bulk strings; [`parse`] reads one reply from
//!   the front of a buffer, answering `Ok(None)` when the buffer holds only part of it, so a
//!   reply split across reads is never misread. Both are pure.
//! - [`Conn::command`] sends one command and reads its reply within the connection's
//!   timeout; an error reply is [`RespError::Server`] with Redis' text (`WRONGPASS …`,
//!   `NOAUTH …`), never a panic. A connection that timed out or failed is not reused.
//! - Nothing here knows passwords or roles: callers authenticate with `AUTH`.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `+OK`
    Simple(String),
    /// `-ERR …` (kept as a value here; [`Conn::command`] turns it into an error).
    Error(String),
    /// `:42`
    Int(i64),
    /// `$n` bulk string, `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*n` array, `None` for the null array.
    Array(Option<Vec<Value>>),
}

impl Value {
    /// The reply as text: simple and bulk strings (lossy UTF-8), integers.
    pub fn text(&self) -> Option<String> {
        match self {
            Value::Simple(s) => Some(s.clone()),
            Value::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        }
    }

    /// The reply as an integer (integer replies, or numeric strings).
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            other => other.text()?.trim().parse().ok(),
        }
    }
}

/// Something that went wrong talking RESP.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    /// Connecting, reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The reply did not come within the timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The bytes were not RESP.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Redis answered with an error reply.
    #[error("{0}")]
    Server(String),
    /// The connection closed before a full reply.
    #[error("connection closed by redis-server")]
    Closed,
}

impl RespError {
    /// Whether Redis refused the credentials (`WRONGPASS`, `NOAUTH`, `NOPERM` on AUTH).
    pub fn is_auth(&self) -> bool {
        matches!(self, RespError::Server(m) if m.starts_with("WRONGPASS") || m.starts_with("NOAUTH") || m.starts_with("ERR invalid password") || m.starts_with("ERR AUTH"))
    }
}

/// A command as RESP: an array of bulk strings.
pub fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(16 + args.iter().map(|a| a.as_ref().len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply from the front of `buf`: `Ok(Some((value, bytes used)))`, `Ok(None)` when
/// more bytes are needed, or an error for bytes that are not RESP.
pub fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, RespError> {
    parse_at(buf, 0, 0)
}

const MAX_DEPTH: usize = 32;
const MAX_BULK: i64 = 512 * 1024 * 1024;

fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(from..)?;
    let at = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..at], from + at + 2))
}

fn number(bytes: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            RespError::Protocol(format!("bad length {:?}", String::from_utf8_lossy(bytes)))
        })
}

fn parse_at(buf: &[u8], from: usize, depth: usize) -> Result<Option<(Value, usize)>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError::Protocol("replies nested too deeply".into()));
    }
    let Some(&kind) = buf.get(from) else {
        return Ok(None);
    };
    let Some((head, next)) = line(buf, from + 1) else {
        return Ok(None);
    };
    let text = || String::from_utf8_lossy(head).into_owned();
    match kind {
        b'+' => Ok(Some((Value::Simple(text()), next))),
        b'-' => Ok(Some((Value::Error(text()), next))),
        b':' => Ok(Some((Value::Int(number(head)?), next))),
        b'$' => {
            let n = number(head)?;
            if n < 0 {
                return Ok(Some((Value::Bulk(None), next)));
            }
            if n > MAX_BULK {
                return Err(RespError::Protocol(format!("bulk string of {n} bytes")));
            }
            let end = next + n as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(RespError::Protocol("bulk string without CRLF".into()));
            }
            Ok(Some((Value::Bulk(Some(buf[next..end].to_vec())), end + 2)))
        }
        b'*' => {
            let n = number(head)?;
            if n < 0 {
                return Ok(Some((Value::Array(None), next)));
            }
            let mut items = Vec::with_capacity(n.min(1024) as usize);
            let mut at = next;
            for _ in 0..n {
                match parse_at(buf, at, depth + 1)? {
                    Some((v, used)) => {
                        items.push(v);
                        at = used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Value::Array(Some(items)), at)))
        }
        other => Err(RespError::Protocol(format!(
            "unexpected reply type byte {:?}",
            other as char
        ))),
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// One connection to a redis-server.
pub struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    timeout: Duration,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Conn {
    /// Connects to a Unix socket.
    pub async fn unix(path: &Path, timeout: Duration) -> Result<Self, RespError> {
        let s = tokio::time::timeout(timeout, tokio::net::UnixStream::connect(path))
            .await
            .map_err(|_| RespError::Timeout(timeout))??;
        Ok(Self::over(s, timeout))
    }

    /// Connects over TCP.
    pub async fn tcp(addr: &str, timeout: Duration) -> Result<Self, RespError> {
        let s = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| RespError::Timeout(timeout))??;
        s.set_nodelay(true)?;
        Ok(Self::over(s, timeout))
    }

    /// A connection over an already connected stream (TLS, tests).
    pub fn over(
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
        timeout: Duration,
    ) -> Self {
        Self {
            stream: Box::new(stream),
            buf: Vec::with_capacity(4096),
            timeout,
        }
    }

    /// Changes the per-command timeout (long commands: `WAIT`, `SHUTDOWN`).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends `args` and returns the reply; an error reply is [`RespError::Server`].
    pub async fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, RespError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.round_trip(args)).await {
            Ok(Ok(Value::Error(e))) => Err(RespError::Server(e)),
            Ok(r) => r,
            Err(_) => Err(RespError::Timeout(timeout)),
        }
    }

    /// [`Conn::command`] with string arguments, answering the reply's text (empty for nil).
    pub async fn text(&mut self, args: &[&str]) -> Result<String, RespError> {
        Ok(self.command(args).await?.text().unwrap_or_default())
    }

    async fn round_trip<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, RespError> {
        self.stream.write_all(&encode(args)).await?;
        self.stream.flush().await?;
        loop {
            if let Some((v, used)) = parse(&self.buf)? {
                self.buf.drain(..used);
                return Ok(v);
            }
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(RespError::Closed);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
        // Binary-safe: a password with CRLF and spaces is one argument.
        assert_eq!(
            encode(&["AUTH", "a b\r\n"]),
            b"*2\r\n$4\r\nAUTH\r\n$5\r\na b\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn replies_parse_one_at_a_time() {
        let table: &[(&[u8], Value, usize)] = &[
            (b"+OK\r\n", Value::Simple("OK".into()), 5),
            (
                b"-WRONGPASS invalid\r\n",
                Value::Error("WRONGPASS invalid".into()),
                20,
            ),
            (b":-12\r\n", Value::Int(-12), 6),
            (b"$-1\r\n", Value::Bulk(None), 5),
            (b"$0\r\n\r\n", Value::Bulk(Some(vec![])), 6),
            (
                b"$4\r\na\r\nb\r\n",
                Value::Bulk(Some(b"a\r\nb".to_vec())),
                10,
            ),
            (b"*-1\r\n", Value::Array(None), 5),
            (
                b"*2\r\n:1\r\n$1\r\nx\r\n+trailing\r\n",
                Value::Array(Some(vec![Value::Int(1), Value::Bulk(Some(b"x".to_vec()))])),
                15,
            ),
        ];
        for (bytes, want, used) in table {
            let got = parse(bytes).expect("valid").expect("complete");
            assert_eq!(
                (&got.0, got.1),
                (want, *used),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn a_partial_reply_asks_for_more() {
        let full = b"*2\r\n$5\r\nhello\r\n:7\r\n";
        for cut in 0..full.len() {
            assert!(
                parse(&full[..cut]).expect("valid prefix").is_none(),
                "cut at {cut}"
            );
        }
        assert!(parse(full).expect("valid").is_some());
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        for bad in [&b"?x\r\n"[..], b"$abc\r\n", b"$3\r\nabcXY", b":1.5\r\n"] {
            assert!(matches!(parse(bad), Err(RespError::Protocol(_))), "{bad:?}");
        }
    }

    #[test]
    fn auth_refusals_are_recognised() {
        for m in [
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOAUTH Authentication required.",
        ] {
            assert!(RespError::Server(m.into()).is_auth());
        }
        assert!(!RespError::Server("ERR unknown command".into()).is_auth());
    }

    #[tokio::test]
    async fn a_reply_split_across_reads_is_reassembled() {
        let (client, mut server) = tokio::io::duplex(64);
        let mut conn = Conn::over(client, Duration::from_secs(5));
        let srv = tokio::spawn(async move {
            let mut req = vec![0u8; 64];
            let n = server.read(&mut req).await.expect("read");
            assert_eq!(&req[..n], encode(&["GET", "k"]).as_slice());
            for part in [&b"$1"[..], b"1\r\nhello", b" world\r\n"] {
                server.write_all(part).await.expect("write");
                server.flush().await.expect("flush");
                tokio::task::yield_now().await;
            }
            server
        });
        let v = conn.command(&["GET", "k"]).await.expect("reply");
        assert_eq!(v.text().as_deref(), Some("hello world"));
        drop(srv.await);
    }
}
