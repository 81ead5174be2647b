//! S3-compatible object storage for backups and restores: AWS Signature Version 4 and the two
//! calls a backup needs (`PutObject`, `GetObject`).
//!
//! Contract:
//! - [`sign`] is pure: the `Authorization` header of a request, per AWS SigV4 (checked
//!   against AWS's published examples in the tests).
//! - [`Credentials::read`] reads the projected backup-credentials files under upstream's key
//!   names (`AWS_ACCESS_KEY_ID|aws_access_key_id|accessKeyId|access_key_id`, the same four
//!   spellings for the secret key and the session token); an access key and a secret key are
//!   required.
//! - [`Bucket`] addresses objects path-style at a custom `endpoint` (S3-compatible stores), or
//!   virtual-hosted at `https://<bucket>.s3.<region>.amazonaws.com` without one; the region
//!   defaults to `us-east-1`. [`Bucket::put_file`] streams a file with its SHA-256 as the
//!   signed payload hash (read once to hash, once to send); [`Bucket::get_to_file`] streams an
//!   object into a file. Any answer other than 2xx is an error carrying S3's message.

use std::path::Path;

use ring::hmac;
use sha2::{Digest, Sha256};

/// Upstream's default region.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Access keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Access key ID.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Session token (temporary credentials), empty when none.
    pub session_token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// The first non-empty value among the files `names` in `dir`.
pub fn first_value(dir: &Path, names: &[&str]) -> Result<String, String> {
    for n in names {
        match std::fs::read_to_string(dir.join(n)) {
            Ok(v) if !v.trim().is_empty() => return Ok(v.trim().to_owned()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading {}: {e}", dir.join(n).display())),
        }
    }
    Ok(String::new())
}

impl Credentials {
    /// Reads the credentials projected in `dir`.
    pub fn read(dir: &Path) -> Result<Self, String> {
        let access_key = first_value(
            dir,
            &[
                "AWS_ACCESS_KEY_ID",
                "aws_access_key_id",
                "accessKeyId",
                "access_key_id",
            ],
        )?;
        let secret_key = first_value(
            dir,
            &[
                "AWS_SECRET_ACCESS_KEY",
                "aws_secret_access_key",
                "secretAccessKey",
                "secret_access_key",
            ],
        )?;
        let session_token = first_value(
            dir,
            &[
                "AWS_SESSION_TOKEN",
                "aws_session_token",
                "sessionToken",
                "session_token",
            ],
        )?;
        if access_key.is_empty() || secret_key.is_empty() {
            return Err(format!(
                "backup credentials in {} must include an AWS access key and secret key",
                dir.display()
            ));
        }
        Ok(Self {
            access_key,
            secret_key,
            session_token,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// URI-encodes per SigV4 (unreserved characters kept; `/` kept when `keep_slash`).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One request to sign.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// `GET`, `PUT`, …
    pub method: &'a str,
    /// The URI path, already encoded.
    pub path: &'a str,
    /// The query string, canonical (sorted, encoded), empty when none.
    pub query: &'a str,
    /// Headers to sign, lower-case names (must include `host` and `x-amz-date`).
    pub headers: &'a [(&'a str, String)],
    /// Hex SHA-256 of the payload (or `UNSIGNED-PAYLOAD`).
    pub payload_hash: &'a str,
}

/// The `Authorization` header of `req` (SigV4).
pub fn sign(
    req: &Request<'_>,
    creds: &Credentials,
    region: &str,
    service: &str,
    amz_date: &str,
) -> String {
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_ascii_lowercase(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method, req.path, req.query, canonical_headers, signed, req.payload_hash
    );
    let date = &amz_date[..8];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let k = hmac(format!("AWS4{}", creds.secret_key).as_bytes(), date);
    let k = hmac(&k, region);
    let k = hmac(&k, service);
    let k = hmac(&k, "aws4_request");
    let signature = hex(&hmac(&k, &to_sign));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        creds.access_key
    )
}

/// A bucket to put objects in or get them from.
#[derive(Clone, Debug)]
pub struct Bucket {
    /// Bucket name.
    pub bucket: String,
    /// Custom endpoint (`http(s)://host:port`), path-style; empty for AWS.
    pub endpoint: String,
    /// Region.
    pub region: String,
    /// Credentials.
    pub creds: Credentials,
}

impl Bucket {
    fn url_and_path(&self, key: &str) -> (String, String, String) {
        let key = uri_encode(key.trim_start_matches('/'), true);
        if self.endpoint.is_empty() {
            let host = format!("{}.s3.{}.amazonaws.com", self.bucket, self.region);
            let path = format!("/{key}");
            (format!("https://{host}{path}"), host, path)
        } else {
            let base = self.endpoint.trim_end_matches('/');
            let host = base
                .split_once("://")
                .map_or(base, |(_, h)| h)
                .split('/')
                .next()
                .unwrap_or("")
                .to_owned();
            let path = format!("/{}/{key}", uri_encode(&self.bucket, false));
            (format!("{base}{path}"), host, path)
        }
    }

    fn signed(
        &self,
        method: &str,
        key: &str,
        payload_hash: &str,
    ) -> (String, Vec<(&'static str, String)>) {
        let (url, host, path) = self.url_and_path(key);
        let amz_date = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string();
        let mut headers: Vec<(&'static str, String)> = vec![
            ("host", host),
            ("x-amz-content-sha256", payload_hash.to_owned()),
            ("x-amz-date", amz_date.clone()),
        ];
        if !self.creds.session_token.is_empty() {
            headers.push(("x-amz-security-token", self.creds.session_token.clone()));
        }
        let auth = sign(
            &Request {
                method,
                path: &path,
                query: "",
                headers: &headers,
                payload_hash,
            },
            &self.creds,
            &self.region,
            "s3",
            &amz_date,
        );
        headers.retain(|(k, _)| *k != "host");
        headers.push(("authorization", auth));
        (url, headers)
    }

    /// Uploads `file` to `key`; returns its size and hex SHA-256.
    pub async fn put_file(
        &self,
        http: &reqwest::Client,
        key: &str,
        file: &Path,
    ) -> Result<(u64, String), String> {
        let (size, sha) = hash_file(file).await?;
        let (url, headers) = self.signed("PUT", key, &sha);
        let f = tokio::fs::File::open(file)
            .await
            .map_err(|e| format!("opening {}: {e}", file.display()))?;
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(f));
        let mut req = http
            .put(&url)
            .header("content-length", size.to_string())
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|e| format!("PUT {url}: {e}"))?;
        check(resp, "PUT", &url).await?;
        Ok((size, sha))
    }

    /// Downloads `key` into `file` (created or truncated); returns the bytes written.
    pub async fn get_to_file(
        &self,
        http: &reqwest::Client,
        key: &str,
        file: &Path,
    ) -> Result<u64, String> {
        use futures::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;
        let (url, headers) = self.signed("GET", key, &sha256_hex(b""));
        let mut req = http.get(&url);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let resp = check(resp, "GET", &url).await?;
        let mut out = tokio::fs::File::create(file)
            .await
            .map_err(|e| format!("creating {}: {e}", file.display()))?;
        let mut stream = resp.bytes_stream();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("GET {url}: {e}"))?;
            n += chunk.len() as u64;
            out.write_all(&chunk)
                .await
                .map_err(|e| format!("writing {}: {e}", file.display()))?;
        }
        out.sync_all()
            .await
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
        Ok(n)
    }
}

impl Bucket {
    /// Deletes `key` (S3 DeleteObject); `true` when the store answered it deleted, `false`
    /// when it said the key was not there (404). S3 itself answers 204 for a key that does not
    /// exist, so `true` means "not there any more".
    pub async fn delete(&self, http: &reqwest::Client, key: &str) -> Result<bool, String> {
        let (url, headers) = self.signed("DELETE", key, &sha256_hex(b""));
        let mut req = http.delete(&url);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|e| format!("DELETE {url}: {e}"))?;
        if resp.status().as_u16() == 404 {
            return Ok(false);
        }
        check(resp, "DELETE", &url).await.map(|_| true)
    }
}

async fn check(
    resp: reqwest::Response,
    method: &str,
    url: &str,
) -> Result<reqwest::Response, String> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    let msg: String = body.chars().take(500).collect();
    Err(format!("{method} {url}: HTTP {status}: {msg}"))
}

/// Size and hex SHA-256 of a file.
pub async fn hash_file(file: &Path) -> Result<(u64, String), String> {
    use tokio::io::AsyncReadExt as _;
    let mut f = tokio::fs::File::open(file)
        .await
        .map_err(|e| format!("opening {}: {e}", file.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let r = f
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        if r == 0 {
            break;
        }
        h.update(&buf[..r]);
        n += r as u64;
    }
    Ok((n, hex(&h.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_creds() -> Credentials {
        Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: String::new(),
        }
    }

    // AWS's S3 SigV4 documentation example "GET Object" (examplebucket/test.txt with a Range
    // header, 2013-05-24).
    #[test]
    fn the_s3_get_object_example_signs_as_documented() {
        let empty = sha256_hex(b"");
        let headers = [
            ("host", "examplebucket.s3.amazonaws.com".to_owned()),
            ("range", "bytes=0-9".to_owned()),
            ("x-amz-content-sha256", empty.clone()),
            ("x-amz-date", "20130524T000000Z".to_owned()),
        ];
        let auth = sign(
            &Request {
                method: "GET",
                path: "/test.txt",
                query: "",
                headers: &headers,
                payload_hash: &empty,
            },
            &example_creds(),
            "us-east-1",
            "s3",
            "20130524T000000Z",
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    // The same documentation's "PUT Object" example (test$file.text, 2013-05-24).
    #[test]
    fn the_s3_put_object_example_signs_as_documented() {
        let payload = sha256_hex(b"Welcome to Amazon S3.");
        let headers = [
            ("date", "Fri, 24 May 2013 00:00:00 GMT".to_owned()),
            ("host", "examplebucket.s3.amazonaws.com".to_owned()),
            ("x-amz-content-sha256", payload.clone()),
            ("x-amz-date", "20130524T000000Z".to_owned()),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY".to_owned()),
        ];
        let path = format!("/{}", uri_encode("test$file.text", true));
        let auth = sign(
            &Request {
                method: "PUT",
                path: &path,
                query: "",
                headers: &headers,
                payload_hash: &payload,
            },
            &example_creds(),
            "us-east-1",
            "s3",
            "20130524T000000Z",
        );
        assert!(
            auth.ends_with(
                "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
            ),
            "{auth}"
        );
    }

    #[test]
    fn keys_are_encoded_and_addressed_by_style() {
        assert_eq!(uri_encode("a b/c+d~e", true), "a%20b/c%2Bd~e");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
        let b = Bucket {
            bucket: "bk".into(),
            endpoint: "http://127.0.0.1:9000/".into(),
            region: DEFAULT_REGION.into(),
            creds: example_creds(),
        };
        assert_eq!(
            b.url_and_path("/backups/x.rdb"),
            (
                "http://127.0.0.1:9000/bk/backups/x.rdb".into(),
                "127.0.0.1:9000".into(),
                "/bk/backups/x.rdb".into()
            )
        );
        let aws = Bucket {
            endpoint: String::new(),
            region: "eu-west-1".into(),
            ..b
        };
        assert_eq!(
            aws.url_and_path("x.rdb").0,
            "https://bk.s3.eu-west-1.amazonaws.com/x.rdb"
        );
    }

    #[test]
    fn credentials_take_upstream_key_names() {
        let d = std::env::temp_dir().join(format!("s3creds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tmp");
        assert!(Credentials::read(&d).is_err());
        std::fs::write(d.join("accessKeyId"), "AK\n").expect("w");
        std::fs::write(d.join("aws_secret_access_key"), "SK").expect("w");
        std::fs::write(d.join("AWS_SESSION_TOKEN"), "").expect("w");
        std::fs::write(d.join("session_token"), "TOK").expect("w");
        let c = Credentials::read(&d).expect("creds");
        assert_eq!(
            (
                c.access_key.as_str(),
                c.secret_key.as_str(),
                c.session_token.as_str()
            ),
            ("AK", "SK", "TOK")
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
