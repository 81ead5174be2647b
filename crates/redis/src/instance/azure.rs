//! Azure Blob Storage for backups and restores: the credentials upstream accepts, Shared Key
//! signing, and the calls a backup needs (Put Blob, Put Block + Put Block List for large
//! artifacts, Get Blob).
//!
//! Contract:
//! - [`Credentials::read`] reads the projected backup-credentials files under upstream's key
//!   names and picks, in upstream's order: a connection string
//!   (`AZURE_STORAGE_CONNECTION_STRING|azureStorageConnectionString|connectionString`), then
//!   an account key (`AZURE_STORAGE_KEY|azureStorageKey|accountKey`, with the account from
//!   `destination.azure.accountName` or `AZURE_STORAGE_ACCOUNT|azureStorageAccount|accountName`),
//!   then a SAS token (`AZURE_STORAGE_SAS_TOKEN|azureStorageSasToken|sasToken`). None of them
//!   is an error naming the three.
//! - [`Container::new`] resolves the blob service URL: a connection string's `BlobEndpoint`
//!   (or `DefaultEndpointsProtocol` + `AccountName` + `EndpointSuffix`, or Azurite's for
//!   `UseDevelopmentStorage=true`), whatever the destination says, as upstream; otherwise
//!   `destination.azure.endpoint` (Azurite, sovereign clouds: path-style
//!   `http://host:port/<account>`), else `https://<account>.blob.core.windows.net`.
//! - [`sign`] is pure: the `Authorization: SharedKey` header of a request (Blob service,
//!   version 2015-02-21 and later; checked against Azurite in the tests).
//! - [`Container::put_file`] uploads with one Put Blob up to [`SINGLE_PUT_MAX`], else in
//!   blocks of [`BLOCK_SIZE`] committed with Put Block List; it returns the size and hex
//!   SHA-256. [`Container::get_to_file`] streams a blob into a file. Any answer other than 2xx
//!   is an error carrying the service's error code and message.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::hmac;

use super::s3::{first_value, hash_file, uri_encode};
use crate::crd::AzureBlobDestination;

/// The service version spoken.
pub const API_VERSION: &str = "2021-08-06";
/// Artifacts up to this size go in one Put Blob.
pub const SINGLE_PUT_MAX: u64 = 64 << 20;
/// The block size of larger artifacts.
pub const BLOCK_SIZE: usize = 16 << 20;

/// Azurite's well-known development account (`UseDevelopmentStorage=true`).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Its well-known key.
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How requests are authorized.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// Shared Key: the account and its base64 key.
    SharedKey {
        /// The storage account.
        account: String,
        /// Its key, base64 as Azure shows it.
        key: String,
    },
    /// A SAS token appended to every URL (without the leading `?`).
    Sas(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::SharedKey { account, .. } => f
                .debug_struct("SharedKey")
                .field("account", account)
                .finish_non_exhaustive(),
            Auth::Sas(_) => f.write_str("Sas(..)"),
        }
    }
}

/// What the credentials files hold, in the order they are used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// A connection string.
    ConnectionString(ConnectionString),
    /// An account key (the account may come from the destination).
    Key {
        /// `AZURE_STORAGE_ACCOUNT`, may be empty.
        account: String,
        /// The key.
        key: String,
    },
    /// A SAS token.
    Sas(String),
}

/// A parsed connection string.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionString {
    /// The blob service URL.
    pub endpoint: String,
    /// The authorization.
    pub auth: Auth,
}

impl std::fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionString")
            .field("endpoint", &self.endpoint)
            .field("auth", &self.auth)
            .finish()
    }
}

impl ConnectionString {
    /// Parses an Azure Storage connection string.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut kv = std::collections::BTreeMap::new();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                format!(
                    "connection string part {k:?} has no '='",
                    k = part.split('=').next().unwrap_or("")
                )
            })?;
            kv.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
        let get = |k: &str| kv.get(k).cloned().unwrap_or_default();
        let dev = get("usedevelopmentstorage").eq_ignore_ascii_case("true");
        let account = if dev {
            DEV_ACCOUNT.to_owned()
        } else {
            get("accountname")
        };
        let key = if dev {
            DEV_KEY.to_owned()
        } else {
            get("accountkey")
        };
        let endpoint = match (get("blobendpoint"), dev) {
            (e, _) if !e.is_empty() => e,
            (_, true) => format!("http://127.0.0.1:10000/{DEV_ACCOUNT}"),
            _ if account.is_empty() => {
                return Err("the connection string names no AccountName or BlobEndpoint".into());
            }
            _ => {
                let proto = match get("defaultendpointsprotocol") {
                    p if p.is_empty() => "https".to_owned(),
                    p => p,
                };
                let suffix = match get("endpointsuffix") {
                    s if s.is_empty() => "core.windows.net".to_owned(),
                    s => s,
                };
                format!("{proto}://{account}.blob.{suffix}")
            }
        };
        let sas = get("sharedaccesssignature");
        let auth = if !key.is_empty() {
            if account.is_empty() {
                return Err("the connection string has an AccountKey but no AccountName".into());
            }
            Auth::SharedKey { account, key }
        } else if !sas.is_empty() {
            Auth::Sas(sas.trim_start_matches('?').to_owned())
        } else {
            return Err(
                "the connection string has neither AccountKey nor SharedAccessSignature".into(),
            );
        };
        Ok(Self { endpoint, auth })
    }
}

impl Credentials {
    /// Reads the credentials projected in `dir` (see the module contract).
    pub fn read(dir: &Path) -> Result<Self, String> {
        let cs = first_value(
            dir,
            &[
                "AZURE_STORAGE_CONNECTION_STRING",
                "azureStorageConnectionString",
                "connectionString",
            ],
        )?;
        if !cs.is_empty() {
            return ConnectionString::parse(&cs).map(Credentials::ConnectionString);
        }
        let account = first_value(
            dir,
            &[
                "AZURE_STORAGE_ACCOUNT",
                "azureStorageAccount",
                "accountName",
            ],
        )?;
        let key = first_value(dir, &["AZURE_STORAGE_KEY", "azureStorageKey", "accountKey"])?;
        if !key.is_empty() {
            return Ok(Credentials::Key { account, key });
        }
        let sas = first_value(
            dir,
            &[
                "AZURE_STORAGE_SAS_TOKEN",
                "azureStorageSasToken",
                "sasToken",
            ],
        )?;
        if !sas.is_empty() {
            return Ok(Credentials::Sas(sas.trim_start_matches('?').to_owned()));
        }
        Err(format!(
            "azure backup credentials in {} must include one of AZURE_STORAGE_CONNECTION_STRING, \
             AZURE_STORAGE_KEY, or AZURE_STORAGE_SAS_TOKEN",
            dir.display()
        ))
    }
}

/// One request to sign with Shared Key.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// `GET`, `PUT`, …
    pub method: &'a str,
    /// The URL path as sent (encoded), starting with `/`.
    pub path: &'a str,
    /// The query parameters, decoded.
    pub query: &'a [(&'a str, String)],
    /// `Content-Length` (0 is sent as an empty line).
    pub content_length: u64,
    /// `Content-Type`, empty when none.
    pub content_type: &'a str,
    /// The `x-ms-*` headers.
    pub ms_headers: &'a [(&'a str, String)],
}

/// The `Authorization` header of `req` for `account` with its base64 `key` (Shared Key).
pub fn sign(req: &Request<'_>, account: &str, key: &str) -> Result<String, String> {
    let mut ms: Vec<(String, String)> = req
        .ms_headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_ascii_lowercase(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    ms.sort();
    let headers: String = ms.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let mut params: Vec<(String, String)> = req
        .query
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    params.sort();
    let mut resource = format!("/{account}{}", req.path);
    for (k, v) in params {
        resource.push_str(&format!("\n{k}:{v}"));
    }
    let length = match req.content_length {
        0 => String::new(),
        n => n.to_string(),
    };
    let to_sign = format!(
        "{}\n\n\n{length}\n\n{}\n\n\n\n\n\n\n{headers}{resource}",
        req.method, req.content_type
    );
    let secret = B64
        .decode(key.trim())
        .map_err(|e| format!("the account key is not base64: {e}"))?;
    let mac = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &secret),
        to_sign.as_bytes(),
    );
    Ok(format!("SharedKey {account}:{}", B64.encode(mac.as_ref())))
}

/// A container to put blobs in or get them from.
#[derive(Clone, Debug)]
pub struct Container {
    /// The blob service URL (no trailing `/`).
    pub endpoint: String,
    /// The container.
    pub container: String,
    /// How requests are authorized.
    pub auth: Auth,
    /// Files up to this size go in one Put Blob ([`SINGLE_PUT_MAX`]).
    pub single_put_max: u64,
    /// The block size of larger files ([`BLOCK_SIZE`]).
    pub block_size: usize,
}

impl Container {
    /// The container of `d` with `creds` (see the module contract).
    pub fn new(d: &AzureBlobDestination, creds: Credentials) -> Result<Self, String> {
        let (endpoint, auth) = match creds {
            Credentials::ConnectionString(cs) => (cs.endpoint, cs.auth),
            Credentials::Key { account, key } => {
                let account = if d.account_name.is_empty() {
                    account
                } else {
                    d.account_name.clone()
                };
                if account.is_empty() {
                    return Err("azure shared-key auth requires an account name (set destination.azure.accountName or AZURE_STORAGE_ACCOUNT in the credentials secret)".into());
                }
                (
                    service_url(&account, &d.endpoint)?,
                    Auth::SharedKey { account, key },
                )
            }
            Credentials::Sas(sas) => (service_url(&d.account_name, &d.endpoint)?, Auth::Sas(sas)),
        };
        Ok(Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            container: d.container.clone(),
            auth,
            single_put_max: SINGLE_PUT_MAX,
            block_size: BLOCK_SIZE,
        })
    }

    fn url_and_path(&self, blob: &str) -> (String, String) {
        let base_path = self
            .endpoint
            .split_once("://")
            .map_or("", |(_, rest)| rest.find('/').map_or("", |i| &rest[i..]))
            .trim_end_matches('/');
        let blob = blob.trim_start_matches('/');
        let path = match blob {
            "" => format!("{base_path}/{}", uri_encode(&self.container, false)),
            b => format!(
                "{base_path}/{}/{}",
                uri_encode(&self.container, false),
                uri_encode(b, true)
            ),
        };
        let origin = match self.endpoint.split_once("://") {
            Some((scheme, rest)) => format!("{scheme}://{}", rest.split('/').next().unwrap_or("")),
            None => self.endpoint.clone(),
        };
        (format!("{origin}{path}"), path)
    }

    /// A request to `blob` (empty: the container itself) with `query` (decoded), a body of
    /// `length` bytes of `content_type` and `extra` `x-ms-*` headers, authorized.
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        blob: &str,
        query: &[(&str, String)],
        length: u64,
        content_type: &str,
        extra: &[(&'static str, String)],
    ) -> Result<reqwest::RequestBuilder, String> {
        let (url, path) = self.url_and_path(blob);
        let date = jiff::Timestamp::now()
            .strftime("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let mut ms: Vec<(&str, String)> =
            vec![("x-ms-date", date), ("x-ms-version", API_VERSION.into())];
        ms.extend(extra.iter().map(|(k, v)| (*k, v.clone())));
        let mut q: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", uri_encode(v, false)))
            .collect();
        if let Auth::Sas(sas) = &self.auth {
            q.push(sas.clone());
        }
        let full = if q.is_empty() {
            url
        } else {
            format!("{url}?{}", q.join("&"))
        };
        let mut req = http.request(method.clone(), &full);
        if let Auth::SharedKey { account, key } = &self.auth {
            let auth = sign(
                &Request {
                    method: method.as_str(),
                    path: &path,
                    query,
                    content_length: length,
                    content_type,
                    ms_headers: &ms,
                },
                account,
                key,
            )?;
            req = req.header("authorization", auth);
        }
        for (k, v) in ms {
            req = req.header(k, v);
        }
        if !content_type.is_empty() {
            req = req.header("content-type", content_type);
        }
        if method != reqwest::Method::GET {
            req = req.header("content-length", length.to_string());
        }
        Ok(req)
    }

    /// Uploads `file` as block blob `blob`; returns its size and hex SHA-256.
    pub async fn put_file(
        &self,
        http: &reqwest::Client,
        blob: &str,
        file: &Path,
    ) -> Result<(u64, String), String> {
        let (size, sha) = hash_file(file).await?;
        if size <= self.single_put_max {
            let f = tokio::fs::File::open(file)
                .await
                .map_err(|e| format!("opening {}: {e}", file.display()))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(f));
            let extra = [("x-ms-blob-type", "BlockBlob".to_owned())];
            let req = self.request(http, reqwest::Method::PUT, blob, &[], size, "", &extra)?;
            send(req.body(body), "Put Blob", blob).await?;
        } else {
            self.put_blocks(http, blob, file).await?;
        }
        Ok((size, sha))
    }

    async fn put_blocks(
        &self,
        http: &reqwest::Client,
        blob: &str,
        file: &Path,
    ) -> Result<(), String> {
        use tokio::io::AsyncReadExt as _;
        let mut f = tokio::fs::File::open(file)
            .await
            .map_err(|e| format!("opening {}: {e}", file.display()))?;
        let mut ids = Vec::new();
        loop {
            let mut chunk = Vec::with_capacity(self.block_size);
            let n = (&mut f)
                .take(self.block_size as u64)
                .read_to_end(&mut chunk)
                .await
                .map_err(|e| format!("reading {}: {e}", file.display()))?;
            if n == 0 {
                break;
            }
            let id = block_id(ids.len());
            let query = [("comp", "block".to_owned()), ("blockid", id.clone())];
            let req = self.request(http, reqwest::Method::PUT, blob, &query, n as u64, "", &[])?;
            send(req.body(chunk), "Put Block", blob).await?;
            ids.push(id);
        }
        let body = block_list(&ids);
        let query = [("comp", "blocklist".to_owned())];
        let req = self.request(
            http,
            reqwest::Method::PUT,
            blob,
            &query,
            body.len() as u64,
            "application/xml",
            &[],
        )?;
        send(req.body(body), "Put Block List", blob)
            .await
            .map(|_| ())
    }

    /// Downloads `blob` into `file` (created or truncated); returns the bytes written.
    pub async fn get_to_file(
        &self,
        http: &reqwest::Client,
        blob: &str,
        file: &Path,
    ) -> Result<u64, String> {
        use futures::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;
        let req = self.request(http, reqwest::Method::GET, blob, &[], 0, "", &[])?;
        let resp = send(req, "Get Blob", blob).await?;
        let mut out = tokio::fs::File::create(file)
            .await
            .map_err(|e| format!("creating {}: {e}", file.display()))?;
        let mut stream = resp.bytes_stream();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("Get Blob {blob}: {e}"))?;
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

impl Container {
    /// Deletes `blob` (Delete Blob, with its snapshots); `true` when the service deleted it,
    /// `false` when it was not there (404 `BlobNotFound`).
    pub async fn delete(&self, http: &reqwest::Client, blob: &str) -> Result<bool, String> {
        let extra = [("x-ms-delete-snapshots", "include".to_owned())];
        let req = self.request(http, reqwest::Method::DELETE, blob, &[], 0, "", &extra)?;
        let resp = req
            .send()
            .await
            .map_err(|e| format!("Delete Blob {blob}: {e}"))?;
        if resp.status().as_u16() == 404 {
            return Ok(false);
        }
        check(resp, "Delete Blob", blob).await.map(|_| true)
    }
}

fn service_url(account: &str, endpoint: &str) -> Result<String, String> {
    if !endpoint.is_empty() {
        return Ok(endpoint.to_owned());
    }
    if account.is_empty() {
        return Err(
            "azure destination requires accountName or endpoint when not using a connection string"
                .into(),
        );
    }
    Ok(format!("https://{account}.blob.core.windows.net"))
}

/// Block `i`'s id: base64 of a fixed-width counter (every id of a blob has the same length).
pub fn block_id(i: usize) -> String {
    B64.encode(format!("block-{i:08}"))
}

/// The Put Block List body committing `ids` in order.
pub fn block_list(ids: &[String]) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for id in ids {
        s.push_str(&format!("<Latest>{id}</Latest>"));
    }
    s.push_str("</BlockList>");
    s
}

async fn send(
    req: reqwest::RequestBuilder,
    what: &str,
    blob: &str,
) -> Result<reqwest::Response, String> {
    let resp = req
        .send()
        .await
        .map_err(|e| format!("{what} {blob}: {e}"))?;
    check(resp, what, blob).await
}

async fn check(
    resp: reqwest::Response,
    what: &str,
    blob: &str,
) -> Result<reqwest::Response, String> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let code = resp
        .headers()
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.text().await.unwrap_or_default();
    let msg: String = body.chars().take(500).collect();
    Err(format!("{what} {blob}: HTTP {status} {code}: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings_resolve_their_endpoint_and_auth() {
        let cs = ConnectionString::parse(
            "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/acct;",
        )
        .expect("parse");
        assert_eq!(cs.endpoint, "http://127.0.0.1:10000/acct");
        assert_eq!(
            cs.auth,
            Auth::SharedKey {
                account: "acct".into(),
                key: "a2V5".into()
            }
        );
        let cs = ConnectionString::parse(
            "AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
        )
        .expect("parse");
        assert_eq!(cs.endpoint, "https://acct.blob.core.chinacloudapi.cn");
        let cs = ConnectionString::parse(
            "BlobEndpoint=https://x.example/;SharedAccessSignature=?sv=1&sig=a",
        )
        .expect("parse");
        assert_eq!(cs.auth, Auth::Sas("sv=1&sig=a".into()));
        let cs = ConnectionString::parse("UseDevelopmentStorage=true").expect("parse");
        assert_eq!(cs.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        for bad in [
            "AccountName=a",
            "BlobEndpoint=http://x",
            "AccountKey=a2V5",
            "garbage",
        ] {
            assert!(ConnectionString::parse(bad).is_err(), "{bad}");
        }
    }

    fn dir(files: &[(&str, &str)]) -> std::path::PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "azure-creds-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        for (k, v) in files {
            std::fs::write(d.join(k), v).expect("write");
        }
        d
    }

    #[test]
    fn credentials_are_taken_in_upstreams_order() {
        let all = dir(&[
            ("connectionString", "UseDevelopmentStorage=true"),
            ("AZURE_STORAGE_KEY", "a2V5"),
            ("sasToken", "?sv=1"),
        ]);
        assert!(matches!(
            Credentials::read(&all),
            Ok(Credentials::ConnectionString(_))
        ));
        let key = dir(&[
            ("azureStorageAccount", "acct"),
            ("accountKey", "a2V5"),
            ("AZURE_STORAGE_SAS_TOKEN", "sv=1"),
        ]);
        assert_eq!(
            Credentials::read(&key),
            Ok(Credentials::Key {
                account: "acct".into(),
                key: "a2V5".into()
            })
        );
        let sas = dir(&[("azureStorageSasToken", "?sv=1&sig=x")]);
        assert_eq!(
            Credentials::read(&sas),
            Ok(Credentials::Sas("sv=1&sig=x".into()))
        );
        let none = dir(&[("AWS_ACCESS_KEY_ID", "x")]);
        assert!(
            Credentials::read(&none)
                .unwrap_err()
                .contains("AZURE_STORAGE_SAS_TOKEN")
        );
        for d in [all, key, sas, none] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn the_destination_names_the_account_and_endpoint() {
        let d = AzureBlobDestination {
            container: "c".into(),
            path: String::new(),
            account_name: "fromspec".into(),
            endpoint: String::new(),
        };
        let c = Container::new(
            &d,
            Credentials::Key {
                account: "fromfile".into(),
                key: "a2V5".into(),
            },
        )
        .expect("container");
        assert_eq!(c.endpoint, "https://fromspec.blob.core.windows.net");
        assert_eq!(
            c.auth,
            Auth::SharedKey {
                account: "fromspec".into(),
                key: "a2V5".into()
            }
        );
        let path_style = AzureBlobDestination {
            account_name: String::new(),
            endpoint: "http://127.0.0.1:10000/devstoreaccount1/".into(),
            ..d.clone()
        };
        let c = Container::new(
            &path_style,
            Credentials::Key {
                account: "devstoreaccount1".into(),
                key: "a2V5".into(),
            },
        )
        .expect("container");
        assert_eq!(
            c.url_and_path("backups/x y.rdb"),
            (
                "http://127.0.0.1:10000/devstoreaccount1/c/backups/x%20y.rdb".into(),
                "/devstoreaccount1/c/backups/x%20y.rdb".into()
            )
        );
        let no_account = AzureBlobDestination {
            account_name: String::new(),
            ..d
        };
        assert!(
            Container::new(
                &no_account,
                Credentials::Key {
                    account: String::new(),
                    key: "a2V5".into()
                }
            )
            .is_err()
        );
        assert!(Container::new(&no_account, Credentials::Sas("sv=1".into())).is_err());
    }

    #[test]
    fn block_ids_have_one_length_and_the_list_keeps_their_order() {
        let ids: Vec<String> = (0..3).map(block_id).collect();
        assert!(ids.iter().all(|i| i.len() == ids[0].len()));
        assert_eq!(
            block_list(&ids[..2]),
            format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Latest>{}</Latest><Latest>{}</Latest></BlockList>",
                ids[0], ids[1]
            )
        );
    }

    // The string to sign, spelled out for one request: every standard header line empty but
    // Content-Length and Content-Type, the x-ms headers sorted, the resource with its query.
    #[test]
    fn shared_key_signs_the_documented_string() {
        let ms = [
            ("x-ms-version", API_VERSION.to_owned()),
            ("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT".to_owned()),
        ];
        let query = [("comp", "block".to_owned()), ("blockid", "YQ==".to_owned())];
        let req = Request {
            method: "PUT",
            path: "/devstoreaccount1/c/b.rdb",
            query: &query,
            content_length: 5,
            content_type: "",
            ms_headers: &ms,
        };
        let expected_string = format!(
            "PUT\n\n\n5\n\n\n\n\n\n\n\n\nx-ms-date:Mon, 01 Jan 2024 00:00:00 GMT\nx-ms-version:{API_VERSION}\n/devstoreaccount1/devstoreaccount1/c/b.rdb\nblockid:YQ==\ncomp:block"
        );
        let mac = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &B64.decode(DEV_KEY).expect("key")),
            expected_string.as_bytes(),
        );
        assert_eq!(
            sign(&req, DEV_ACCOUNT, DEV_KEY).expect("sign"),
            format!("SharedKey {DEV_ACCOUNT}:{}", B64.encode(mac.as_ref()))
        );
        assert!(sign(&req, DEV_ACCOUNT, "not base64!").is_err());
    }
}
