//! Azure Blob Storage backups against Azurite (Microsoft's emulator: a real Blob service that
//! verifies Shared Key and SAS signatures) on loopback: the three credential kinds upstream
//! accepts, Put Blob and Put Block + Put Block List, downloads, and the store's refusals; then
//! a real redis-server's RDB and AOF backups through `backup::take`, restored into a fresh
//! data directory and booted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use redis::crd::{AzureBlobDestination, BackupDestination};
use redis::instance::azure::{Container, Credentials};
use redis::instance::backup::{self, Store};
use redis::instance::{restore, s3};
use testenv::azurite::{ACCOUNT, AzuriteServer, KEY};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let d = std::env::temp_dir().join(format!("az-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Self(d)
    }

    fn creds(&self, files: &[(&str, &str)]) -> PathBuf {
        let d = self
            .0
            .join(format!("creds-{}", files.first().map_or("none", |f| f.0)));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("creds");
        for (k, v) in files {
            std::fs::write(d.join(k), v).expect("write");
        }
        d
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn destination(endpoint: &str, container: &str) -> AzureBlobDestination {
    AzureBlobDestination {
        container: container.into(),
        path: "backups/demo".into(),
        account_name: String::new(),
        endpoint: endpoint.into(),
    }
}

fn key_creds() -> Credentials {
    Credentials::Key {
        account: ACCOUNT.into(),
        key: KEY.into(),
    }
}

async fn start(container: &str) -> AzuriteServer {
    let server = AzuriteServer::start_at(std::net::Ipv4Addr::LOCALHOST)
        .await
        .expect("azurite");
    let c = Container::new(&destination(&server.endpoint(), container), key_creds())
        .expect("container");
    let http = reqwest::Client::new();
    let req = c
        .request(
            &http,
            reqwest::Method::PUT,
            "",
            &[("restype", "container".into())],
            0,
            "",
            &[],
        )
        .expect("request");
    let resp = req.send().await.expect("create container");
    assert_eq!(resp.status().as_u16(), 201, "{:?}", resp.text().await);
    server
}

/// An account SAS for the Blob service (version 2020-12-06 and later string to sign).
fn account_sas(permissions: &str) -> String {
    let (version, expiry) = ("2021-08-06", "2099-01-01T00:00:00Z");
    let to_sign =
        format!("{ACCOUNT}\n{permissions}\nb\nsco\n\n{expiry}\n\nhttps,http\n{version}\n\n");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &B64.decode(KEY).expect("key"));
    let sig = B64.encode(ring::hmac::sign(&key, to_sign.as_bytes()).as_ref());
    format!(
        "sv={version}&ss=b&srt=sco&sp={permissions}&se={expiry}&spr=https,http&sig={}",
        s3::uri_encode(&sig, false)
    )
}

fn file(dir: &Path, name: &str, len: usize) -> PathBuf {
    let p = dir.join(name);
    let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&p, bytes).expect("file");
    p
}

#[tokio::test]
async fn blobs_round_trip_with_each_kind_of_credentials() {
    let server = start("backups").await;
    let scratch = Scratch::new("kinds");
    let d = destination(&server.endpoint(), "backups");
    let src = file(&scratch.0, "artifact.rdb", 100_000);
    let want = std::fs::read(&src).expect("read");
    let connection = format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
        server.endpoint()
    );
    let sas = account_sas("rwdlac");
    let cases: [(&str, Vec<(&str, &str)>); 4] = [
        (
            "key",
            vec![
                ("AZURE_STORAGE_ACCOUNT", ACCOUNT),
                ("AZURE_STORAGE_KEY", KEY),
            ],
        ),
        ("connection string", vec![("connectionString", &connection)]),
        ("sas", vec![("AZURE_STORAGE_SAS_TOKEN", &sas)]),
        // A connection string wins over the others, as upstream's order says.
        (
            "all three",
            vec![
                ("AZURE_STORAGE_CONNECTION_STRING", &connection),
                ("AZURE_STORAGE_KEY", "d3Jvbmc="),
                ("sasToken", "sv=bad"),
            ],
        ),
    ];
    for (i, (what, files)) in cases.into_iter().enumerate() {
        let creds = scratch.creds(&files);
        let store = Store::open(
            &BackupDestination {
                s3: None,
                azure: Some(d.clone()),
            },
            &creds,
        )
        .expect(what);
        let key = format!("backups/demo/b{i}.rdb");
        let (size, sha) = store.put_file(&key, &src).await.expect(what);
        assert_eq!(
            (size, sha),
            (want.len() as u64, s3::sha256_hex(&want)),
            "{what}"
        );
        assert_eq!(store.path(&key), format!("azblob://backups/{key}"));
        let back = scratch.0.join(format!("back-{i}"));
        store.get_to_file(&key, &back).await.expect(what);
        assert_eq!(std::fs::read(&back).expect("read"), want, "{what}");
    }
}

#[tokio::test]
async fn large_artifacts_go_up_in_blocks() {
    let server = start("big").await;
    let scratch = Scratch::new("blocks");
    let mut c = Container::new(&destination(&server.endpoint(), "big"), key_creds()).expect("c");
    // Small limits so a 2.5-block file takes the block path.
    c.single_put_max = 1 << 20;
    c.block_size = 1 << 20;
    let src = file(&scratch.0, "big.aof.tar.gz", (5 << 20) / 2);
    let http = reqwest::Client::new();
    let (size, _) = c
        .put_file(&http, "x/big.aof.tar.gz", &src)
        .await
        .expect("put");
    assert_eq!(size, (5 << 20) / 2);
    let back = scratch.0.join("back");
    let n = c
        .get_to_file(&http, "x/big.aof.tar.gz", &back)
        .await
        .expect("get");
    assert_eq!(n, size);
    assert_eq!(
        std::fs::read(&back).expect("r"),
        std::fs::read(&src).expect("r")
    );
    // The committed blob is made of the blocks.
    let req = c
        .request(
            &http,
            reqwest::Method::GET,
            "x/big.aof.tar.gz",
            &[("comp", "blocklist".into())],
            0,
            "",
            &[],
        )
        .expect("request");
    let list = req
        .send()
        .await
        .expect("block list")
        .text()
        .await
        .expect("body");
    assert_eq!(list.matches("<Block>").count(), 3, "{list}");
}

#[tokio::test]
async fn the_store_refuses_bad_credentials_and_missing_containers_with_its_reason() {
    let server = start("backups").await;
    let scratch = Scratch::new("refused");
    let src = file(&scratch.0, "a.rdb", 1000);
    let http = reqwest::Client::new();
    let wrong = Credentials::Key {
        account: ACCOUNT.into(),
        key: B64.encode([7u8; 64]),
    };
    let c = Container::new(&destination(&server.endpoint(), "backups"), wrong).expect("c");
    let err = c.put_file(&http, "a.rdb", &src).await.unwrap_err();
    assert!(
        err.contains("403") && err.contains("AuthorizationFailure"),
        "{err}"
    );
    let c = Container::new(&destination(&server.endpoint(), "nope"), key_creds()).expect("c");
    let err = c.put_file(&http, "a.rdb", &src).await.unwrap_err();
    assert!(err.contains("ContainerNotFound"), "{err}");
    // A read-only SAS cannot write.
    let c = Container::new(
        &destination(&server.endpoint(), "backups"),
        Credentials::Sas(account_sas("rl")),
    )
    .expect("c");
    let err = c.put_file(&http, "a.rdb", &src).await.unwrap_err();
    assert!(err.contains("403"), "{err}");
    // No credentials at all: the three names upstream documents.
    let none = scratch.creds(&[("AWS_ACCESS_KEY_ID", "x")]);
    let err = Store::open(
        &BackupDestination {
            s3: None,
            azure: Some(destination(&server.endpoint(), "backups")),
        },
        &none,
    )
    .unwrap_err();
    assert!(err.contains("AZURE_STORAGE_CONNECTION_STRING"), "{err}");
}

/// A redis-server started as the instance manager starts it, with `n` keys.
struct Redis {
    _dir: Scratch,
    paths: redis::instance::config::Paths,
    local: redis::instance::local::Local,
    child: redis::instance::process::Child,
}

fn spec() -> redis::crd::RedisClusterSpec {
    serde_json::from_value::<redis::crd::RedisCluster>(serde_json::json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "demo"},
        "spec": {"storage": {"size": "1Gi"}, "instances": 1}
    }))
    .expect("spec")
    .spec
}

impl Redis {
    async fn boot(data: Option<PathBuf>) -> Self {
        use redis::instance::{auth, config, decide::Boot, local::Local, process};
        testenv::procnode::ensure_host_packages().expect("redis-tools");
        let dir = Scratch::new("redis");
        let paths = config::Paths {
            data_dir: data.unwrap_or_else(|| dir.0.join("data")),
            socket: dir.0.join("redis.sock"),
            tls_dir: dir.0.join("tls"),
        };
        std::fs::create_dir_all(&paths.data_dir).expect("data");
        let port = testenv::process::free_port().expect("port");
        let spec = spec();
        let conf = config::render(&config::Input {
            spec: &spec,
            boot: &Boot::Primary,
            bind: "127.0.0.1",
            port,
            paths: &paths,
            default_user: &auth::default_user_rules(&[auth::hash("pw")]),
            masterauth: "pw",
            shutdown_timeout: 5,
        });
        std::fs::write(paths.conf(), conf.text).expect("conf");
        let child =
            process::spawn(Path::new("/usr/bin/redis-check-rdb"), &paths.conf()).expect("spawn");
        let local = Local::new(paths.socket.clone(), vec!["pw".into()]);
        testenv::eventually("redis-server answers", Duration::from_secs(30), || async {
            local.ping().await.ok()
        })
        .await
        .expect("redis-server");
        Self {
            _dir: dir,
            paths,
            local,
            child,
        }
    }

    async fn dbsize(&self) -> Option<i64> {
        self.local.command(&["DBSIZE".into()]).await.ok()?.int()
    }
}

#[tokio::test]
async fn redis_backups_go_to_azure_and_restore_into_a_fresh_data_directory() {
    let server = start("redis").await;
    let a = Redis::boot(None).await;
    for i in 0..300 {
        a.local
            .command(&["SET".into(), format!("k{i}"), "v".into()])
            .await
            .expect("set");
    }
    let scratch = Scratch::new("redis-creds");
    let connection = format!(
        "AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
        server.endpoint()
    );
    let creds = scratch.creds(&[("AZURE_STORAGE_CONNECTION_STRING", &connection)]);
    for (name, method) in [("az-rdb", "rdb"), ("az-aof", "aof")] {
        let req = redis::instance_api::BackupRequest {
            backup_name: name.into(),
            method: method.into(),
            destination: BackupDestination {
                s3: None,
                azure: Some(destination("", "redis")),
            },
        };
        let plan = backup::plan(&req).expect("plan");
        let done = backup::take(&a.local, &a.paths.data_dir, &creds, &plan)
            .await
            .expect("backup");
        let ext = if method == "aof" { "aof.tar.gz" } else { "rdb" };
        assert_eq!(
            done.backup_path,
            format!("azblob://redis/backups/demo/{name}.{ext}")
        );
        // Restore as the init container does: locate, download, install, boot.
        let b: redis::crd::RedisBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "redis.io/v1", "kind": "RedisBackup", "metadata": {"name": name},
            "spec": {"clusterName": "demo", "destination": req.destination},
            "status": {"phase": "Completed", "backupPath": done.backup_path,
                "artifactType": done.artifact_type},
        }))
        .expect("backup");
        let (dest, key, aof) = restore::locate(&b).expect("locate");
        let target = Scratch::new("restored");
        let data = target.0.join("data");
        std::fs::create_dir_all(&data).expect("data");
        let tmp = data.join(".restore-download");
        let bytes = Store::open(&dest, &creds)
            .expect("store")
            .get_to_file(&key, &tmp)
            .await
            .expect("download");
        assert_eq!(bytes as i64, done.backup_size);
        restore::install(&data, &tmp, aof).expect("install");
        let mut b = Redis::boot(Some(data)).await;
        assert_eq!(b.dbsize().await, Some(300), "{method}: every key restored");
        b.child
            .stop(&b.local, Duration::from_secs(10))
            .await
            .expect("stop");
    }
}

/// Delete Blob, as the instance sends it for a RedisBackup with `deletionPolicy: Delete`, with
/// each kind of credentials: the blob goes, a missing one counts as gone (404 is done), and a
/// SAS without the delete permission is the service's refusal, with its code.
#[tokio::test]
async fn blobs_are_deleted_with_each_kind_of_credentials_and_a_missing_blob_counts_as_gone() {
    let server = start("deletions").await;
    let scratch = Scratch::new("delete");
    let d = destination(&server.endpoint(), "deletions");
    let src = file(&scratch.0, "artifact.rdb", 10_000);
    let connection = format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
        server.endpoint()
    );
    let sas = account_sas("rwdlac");
    let cases: [(&str, Vec<(&str, &str)>); 3] = [
        (
            "key",
            vec![
                ("AZURE_STORAGE_ACCOUNT", ACCOUNT),
                ("AZURE_STORAGE_KEY", KEY),
            ],
        ),
        ("connection string", vec![("connectionString", &connection)]),
        ("sas", vec![("AZURE_STORAGE_SAS_TOKEN", &sas)]),
    ];
    let dest = BackupDestination {
        s3: None,
        azure: Some(d.clone()),
    };
    for (i, (what, files)) in cases.into_iter().enumerate() {
        let store = Store::open(&dest, &scratch.creds(&files)).expect(what);
        let key = format!("backups/demo/d{i}.rdb");
        store.put_file(&key, &src).await.expect(what);
        assert!(store.delete(&key).await.expect(what), "{what}: deleted");
        let back = scratch.0.join(format!("gone-{i}"));
        let err = store.get_to_file(&key, &back).await.expect_err(what);
        assert!(err.contains("BlobNotFound"), "{what}: {err}");
        assert!(!store.delete(&key).await.expect(what), "{what}: not there");
    }
    // Read and write, no delete permission: refused, saying why, and the blob stays.
    let writer = Store::open(
        &dest,
        &scratch.creds(&[("AZURE_STORAGE_SAS_TOKEN", &account_sas("rwlac"))]),
    )
    .expect("sas");
    writer
        .put_file("backups/demo/stays.rdb", &src)
        .await
        .expect("put");
    let err = writer
        .delete("backups/demo/stays.rdb")
        .await
        .expect_err("no delete permission");
    assert!(err.contains("HTTP 403"), "{err}");
    let back = scratch.0.join("stays");
    writer
        .get_to_file("backups/demo/stays.rdb", &back)
        .await
        .expect("still there");
}
