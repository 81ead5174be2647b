//! The instance manager's Redis-facing pieces against real `redis-server` processes on
//! loopback (Debian's redis-server): the rendered configuration boots password-protected from
//! the first accepted connection, promotion and demotion (clients killed, replication links
//! kept), a switchover under a writer loses no acknowledged write, a password rotation under a
//! writer never locks out the new password's clients or replication, backups snapshot after
//! the request, and a graceful stop persists and exits within the grace period.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::instance::auth::{self, Rotation, Upstream};
use redis::instance::config::{self, Paths};
use redis::instance::decide::Boot;
use redis::instance::local::{Local, Switchover};
use redis::instance::process::{self, Child};
use redis::instance::resp::{Conn, RespError, Value};

mod support;

use support::{AK, SK, s3_server};

const T: Duration = Duration::from_secs(30);
/// Debian's Redis server executable (package redis-tools, as the process-backed nodes' redis
/// image uses); run as `redis-server`.
const REDIS: &str = "/usr/bin/redis-check-rdb";

fn ensure_redis() {
    testenv::procnode::ensure_host_packages().expect("redis-tools");
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let d = std::env::temp_dir().join(format!("ri-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Self(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    ensure_redis();
    testenv::process::free_port().expect("free port")
}

fn spec(extra: serde_json::Value) -> redis::crd::RedisClusterSpec {
    let mut base = serde_json::json!({"storage": {"size": "1Gi"}, "instances": 3});
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    serde_json::from_value::<redis::crd::RedisCluster>(serde_json::json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster", "metadata": {"name": "demo"}, "spec": base
    }))
    .expect("spec")
    .spec
}

/// One redis-server started the way the instance manager starts it.
struct Server {
    _dir: Scratch,
    paths: Paths,
    port: u16,
    child: Child,
    local: Local,
}

impl Server {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn config(
        paths: &Paths,
        port: u16,
        role: &Boot,
        hashes: &[String],
        masterauth: &str,
        spec: &redis::crd::RedisClusterSpec,
    ) -> String {
        config::render(&config::Input {
            spec,
            boot: role,
            bind: "127.0.0.1",
            port,
            paths,
            default_user: &auth::default_user_rules(hashes),
            masterauth,
            shutdown_timeout: 5,
        })
        .text
    }

    async fn start(
        tag: &str,
        role: &Boot,
        password: &str,
        spec: &redis::crd::RedisClusterSpec,
    ) -> Self {
        Self::start_on(tag, role, password, spec, None).await
    }

    async fn start_on(
        tag: &str,
        role: &Boot,
        password: &str,
        spec: &redis::crd::RedisClusterSpec,
        dump: Option<&Path>,
    ) -> Self {
        let dir = Scratch::new(tag);
        let paths = Paths {
            data_dir: dir.0.join("data"),
            socket: dir.0.join("redis.sock"),
            tls_dir: dir.0.join("tls"),
        };
        std::fs::create_dir_all(&paths.data_dir).expect("data");
        if let Some(d) = dump {
            std::fs::copy(d, paths.data_dir.join("dump.rdb")).expect("seed dump.rdb");
        }
        let port = free_port();
        let text = Self::config(&paths, port, role, &[auth::hash(password)], password, spec);
        std::fs::write(paths.conf(), text).expect("conf");
        let child = process::spawn(Path::new(REDIS), &paths.conf()).expect("redis-server");
        let local = Local::new(paths.socket.clone(), vec![password.to_owned()]);
        let s = Self {
            _dir: dir,
            paths,
            port,
            child,
            local,
        };
        s.wait_up().await;
        s
    }

    async fn wait_up(&self) {
        let deadline = Instant::now() + T;
        while self.local.ping().await.is_err() {
            assert!(Instant::now() < deadline, "redis-server did not come up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn client(&self, password: &str) -> Result<Conn, RespError> {
        let mut c = Conn::tcp(&self.addr(), Duration::from_secs(5)).await?;
        c.command(&["AUTH", password]).await?;
        Ok(c)
    }

    async fn info(&self) -> redis::instance::info::Info {
        self.local.info("all").await.expect("INFO")
    }
}

async fn until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + T;
    while !probe().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pair(tag: &str, password: &str) -> (Server, Server) {
    let s = spec(serde_json::json!({}));
    let a = Server::start(&format!("{tag}-a"), &Boot::Primary, password, &s).await;
    let b = Server::start(
        &format!("{tag}-b"),
        &Boot::Replica {
            host: "127.0.0.1".into(),
            port: a.port,
        },
        password,
        &s,
    )
    .await;
    until("the replica's link", || async { b.info().await.link_up() }).await;
    // The primary counts the replica online only once it acknowledged the sync, a moment after
    // the replica reports its link up; `FAILOVER` needs it online.
    until("the replica online on the primary", || async {
        a.info().await.get("slave0").contains("state=online")
    })
    .await;
    (a, b)
}

#[tokio::test]
async fn the_password_is_required_from_the_first_accepted_connection() {
    let dir = Scratch::new("auth");
    let paths = Paths {
        data_dir: dir.0.join("data"),
        socket: dir.0.join("redis.sock"),
        tls_dir: dir.0.join("tls"),
    };
    std::fs::create_dir_all(&paths.data_dir).expect("data");
    let port = free_port();
    let s = spec(serde_json::json!({}));
    std::fs::write(
        paths.conf(),
        Server::config(&paths, port, &Boot::Primary, &[auth::hash("pw")], "pw", &s),
    )
    .expect("conf");
    let mut child = process::spawn(Path::new(REDIS), &paths.conf()).expect("spawn");
    // Hammer the port from the moment the process exists: every connection that is accepted
    // must be refused without the password.
    let deadline = Instant::now() + T;
    let mut refused = 0;
    while refused < 20 {
        assert!(Instant::now() < deadline, "no connection accepted");
        let Ok(mut c) = Conn::tcp(&format!("127.0.0.1:{port}"), Duration::from_secs(2)).await
        else {
            continue;
        };
        match c.command(&["PING"]).await {
            Err(RespError::Server(m)) => {
                assert!(m.starts_with("NOAUTH"), "{m}");
                refused += 1;
            }
            Err(RespError::Closed | RespError::Io(_)) => {}
            other => panic!("a connection without the password was served: {other:?}"),
        }
    }
    let mut c = Conn::tcp(&format!("127.0.0.1:{port}"), Duration::from_secs(2))
        .await
        .expect("connect");
    assert!(c.command(&["AUTH", "wrong"]).await.unwrap_err().is_auth());
    c.command(&["AUTH", "pw"])
        .await
        .expect("the right password works");
    assert_eq!(
        c.command(&["PING"]).await.expect("ping"),
        Value::Simple("PONG".into())
    );
    let local = Local::new(paths.socket.clone(), vec!["pw".into()]);
    child
        .stop(&local, Duration::from_secs(10))
        .await
        .expect("stop");
}

#[tokio::test]
async fn promotion_and_demotion_kill_clients_but_not_replication() {
    let (a, b) = pair("roles", "pw").await;
    let replid = a.info().await.get("master_replid").to_owned();
    assert_eq!(b.info().await.get("master_replid"), replid);
    // Clients of the primary: a normal one and a subscriber.
    let mut normal = a.client("pw").await.expect("client");
    let mut sub = a.client("pw").await.expect("subscriber");
    sub.command(&["SUBSCRIBE", "news"])
        .await
        .expect("subscribe");
    // B becomes primary: a new replication ID, the old one kept as replid2.
    b.local.promote().await.expect("promote");
    let bi = b.info().await;
    assert!(bi.is_master());
    assert_ne!(bi.get("master_replid"), replid);
    assert_eq!(bi.get("master_replid2"), replid);
    // A follows B and its clients are disconnected.
    let killed = a
        .local
        .follow("127.0.0.1", b.port, true)
        .await
        .expect("demote");
    assert!(killed >= 2, "killed {killed}");
    assert!(
        normal.command(&["PING"]).await.is_err(),
        "the normal client was killed"
    );
    assert!(
        sub.command(&["PING"]).await.is_err(),
        "the subscriber was killed"
    );
    until("A replicating from B", || async {
        let i = a.info().await;
        i.link_up() && i.master() == Some(("127.0.0.1".into(), b.port))
    })
    .await;
    // Writes reach A through B; nothing needed a full resync of A (same history).
    let mut w = b.client("pw").await.expect("client of B");
    w.command(&["SET", "after", "1"]).await.expect("write");
    assert_eq!(
        w.command(&["WAIT", "1", "5000"]).await.expect("wait").int(),
        Some(1)
    );
    assert_eq!(
        a.local
            .command(&["GET".into(), "after".into()])
            .await
            .expect("get")
            .text()
            .as_deref(),
        Some("1")
    );
    // Demoting again is a no-op on the link (idempotent re-point).
    a.local
        .follow("127.0.0.1", b.port, false)
        .await
        .expect("again");
}

#[tokio::test]
async fn a_switchover_under_a_writer_loses_no_acknowledged_write() {
    let (a, b) = pair("switch", "pw").await;
    let addrs = [a.addr(), b.addr()];
    let acked = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut target = 0usize;
            let mut conn: Option<Conn> = None;
            let mut i = 0u64;
            let mut errors = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if conn.is_none() {
                    let c = match Conn::tcp(&addrs[target], Duration::from_secs(2)).await {
                        Ok(mut c) => c.command(&["AUTH", "pw"]).await.map(|_| c).ok(),
                        Err(_) => None,
                    };
                    if c.is_none() {
                        target = 1 - target;
                        continue;
                    }
                    conn = c;
                }
                let Some(c) = conn.as_mut() else { continue };
                let key = format!("k{i}");
                let ok = match c.command(&["SET", &key, "v"]).await {
                    Ok(_) => {
                        matches!(c.command(&["WAIT", "1", "1000"]).await, Ok(Value::Int(n)) if n >= 1)
                    }
                    Err(_) => false,
                };
                if ok {
                    acked.lock().expect("acked").insert(key);
                    i += 1;
                } else {
                    // READONLY on the demoted primary, or a killed connection: go to the other.
                    errors += 1;
                    conn = None;
                    target = 1 - target;
                }
            }
            errors
        })
    };
    until("writes before the switchover", || async {
        acked.lock().expect("acked").len() > 200
    })
    .await;
    let outcome = a
        .local
        .switchover("127.0.0.1", b.port, Duration::from_secs(10))
        .await
        .expect("switchover");
    assert_eq!(outcome, Switchover::Done);
    let at_switch = acked.lock().expect("acked").len();
    until("writes after the switchover", || async {
        acked.lock().expect("acked").len() > at_switch + 200
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    writer.await.expect("writer");
    assert!(b.info().await.is_master());
    let ai = a.info().await;
    assert_eq!(
        ai.master(),
        Some(("127.0.0.1".into(), b.port)),
        "A follows B"
    );
    let keys = acked.lock().expect("acked").clone();
    let mut c = b.client("pw").await.expect("B");
    let mut missing = Vec::new();
    for k in &keys {
        if c.command(&["EXISTS", k]).await.expect("exists").int() != Some(1) {
            missing.push(k.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        missing.len(),
        keys.len(),
        &missing[..missing.len().min(10)]
    );
    // A second call is idempotent.
    assert_eq!(
        a.local
            .switchover("127.0.0.1", b.port, Duration::from_secs(1))
            .await
            .expect("again"),
        Switchover::Already
    );
}

#[tokio::test]
async fn a_switchover_to_a_replica_that_cannot_catch_up_is_abandoned_with_writes_on() {
    let (a, b) = pair("abandon", "pw").await;
    // B stops acknowledging: its process is frozen.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(b.child.pid()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    let mut w = a.client("pw").await.expect("A");
    w.command(&["SET", "x", "1"]).await.expect("write");
    let outcome = a
        .local
        .switchover("127.0.0.1", b.port, Duration::from_millis(300))
        .await;
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    let outcome = outcome.expect("switchover");
    assert!(matches!(outcome, Switchover::Abandoned(_)), "{outcome:?}");
    assert!(a.info().await.is_master());
    w.command(&["SET", "y", "1"])
        .await
        .expect("writes resumed on A");
    // A target that is not a replica is refused by Redis.
    let err = a
        .local
        .switchover("127.0.0.1", free_port(), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, RespError::Server(_)), "{err}");
}

#[tokio::test]
async fn a_rotation_under_a_writer_never_locks_out_clients_or_replication() {
    let (a, b) = pair("rotate", "p1").await;
    let full_syncs = a.info().await.int("sync_full");
    // The manager's rotation steps, primary first (it sees the new Secret first).
    let ra = Rotation::start("p1", &[]);
    let rb = Rotation::start("p1", &[]);
    let ra2 = ra.next("p2", &Upstream::Me, false);
    a.local
        .command(&auth::add_args(&ra2.accepted()))
        .await
        .expect("accept p2 on A");
    a.local.set_passwords(ra2.candidates());
    // From now on a client with the new password works against the primary, while the
    // replica still authenticates with p1.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (addr, stop) = (a.addr(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let mut c = Conn::tcp(&addr, Duration::from_secs(2))
                    .await
                    .expect("connect");
                c.command(&["AUTH", "p2"])
                    .await
                    .expect("p2 is accepted throughout");
                c.command(&["INCR", "n"]).await.expect("write with p2");
                n += 1;
            }
            n
        })
    };
    // Break the replication link: B reconnects with its old masterauth, still accepted.
    a.local
        .command(&[
            "CLIENT".into(),
            "KILL".into(),
            "TYPE".into(),
            "replica".into(),
        ])
        .await
        .expect("kill link");
    until("B back with p1", || async { b.info().await.link_up() }).await;
    // B sees the Secret; the primary reports p2's generation, so masterauth moves.
    let rb2 = rb.next("p2", &Upstream::Peer(Some(ra2.generation())), false);
    assert_eq!(rb2.masterauth, "p2");
    b.local
        .command(&auth::add_args(&rb2.accepted()))
        .await
        .expect("accept p2 on B");
    b.local
        .config_set("masterauth", &rb2.masterauth)
        .await
        .expect("masterauth");
    // Every peer on p2: both retire p1.
    let ra3 = ra2.next(
        "p2",
        &Upstream::Me,
        rb2.generation() == auth::generation("p2"),
    );
    let rb3 = rb2.next("p2", &Upstream::Peer(Some(ra3.generation())), true);
    for (s, r) in [(&a, &ra3), (&b, &rb3)] {
        assert!(!r.rotating());
        s.local
            .command(&auth::remove_args(&auth::hash("p1")))
            .await
            .expect("retire p1");
        s.local.set_passwords(r.candidates());
    }
    // The link breaks again: B reconnects with p2.
    a.local
        .command(&[
            "CLIENT".into(),
            "KILL".into(),
            "TYPE".into(),
            "replica".into(),
        ])
        .await
        .expect("kill link");
    until("B back with p2", || async { b.info().await.link_up() }).await;
    stop.store(true, Ordering::SeqCst);
    let writes = writer.await.expect("writer never failed");
    assert!(writes > 0);
    assert!(a.client("p1").await.is_err(), "p1 is refused once retired");
    assert_eq!(
        a.info().await.int("sync_full"),
        full_syncs,
        "no full resync: replication only reconnected"
    );
    // The replica has every write.
    let mut w = a.client("p2").await.expect("p2");
    w.command(&["WAIT", "1", "5000"]).await.expect("wait");
    let on_a = w.command(&["GET", "n"]).await.expect("get").int();
    assert_eq!(
        b.local
            .command(&["GET".into(), "n".into()])
            .await
            .expect("get")
            .int(),
        on_a
    );
}

#[tokio::test]
async fn a_graceful_stop_persists_and_ends_within_the_grace_period() {
    let s = spec(serde_json::json!({}));
    let mut a = Server::start("stop", &Boot::Primary, "pw", &s).await;
    let mut c = a.client("pw").await.expect("client");
    for i in 0..100 {
        c.command(&["SET", &format!("k{i}"), "v"])
            .await
            .expect("set");
    }
    let started = Instant::now();
    let status = a
        .child
        .stop(&a.local, Duration::from_secs(10))
        .await
        .expect("stop");
    assert!(status.success(), "redis-server exited with {status}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Restarted on the same data, every key is there.
    a.child = process::spawn(Path::new(REDIS), &a.paths.conf()).expect("restart");
    a.wait_up().await;
    let mut c = a.client("pw").await.expect("client");
    assert_eq!(
        c.command(&["DBSIZE"]).await.expect("dbsize").int(),
        Some(100)
    );
    a.child
        .stop(&a.local, Duration::from_secs(10))
        .await
        .expect("stop");
}

#[tokio::test]
async fn min_sync_replicas_stop_an_isolated_primary_taking_writes() {
    let s = spec(serde_json::json!({"minSyncReplicas": 1, "minSyncReplicasMaxLag": 1}));
    let a = Server::start("minrep", &Boot::Primary, "pw", &s).await;
    let mut c = a.client("pw").await.expect("client");
    let err = c.command(&["SET", "k", "v"]).await.unwrap_err();
    assert!(err.to_string().starts_with("NOREPLICAS"), "{err}");
    // Turned off live (the manager's CONFIG SET of the live keys): writes go through.
    for (k, v) in config::live(&spec(serde_json::json!({}))) {
        a.local.config_set(&k, &v).await.expect("config set");
    }
    c.command(&["SET", "k", "v"]).await.expect("write");
}

#[tokio::test]
async fn a_backup_snapshot_starts_after_the_request_even_with_a_save_running() {
    use redis::instance::backup::{Kind, snapshot};
    let s = spec(serde_json::json!({"redis": {"enable-debug-command": "local"}}));
    let a = Server::start("snap", &Boot::Primary, "pw", &s).await;
    let mut c = a.client("pw").await.expect("client");
    // A BGSAVE that takes about a second, started by someone else first: 2000 keys at 500 µs
    // each (a per-key delay of a few µs would be stretched tens of times by the kernel's timer
    // slack and the machine's load: 200000 keys at 5 µs once took over 30 s).
    c.command(&["DEBUG", "POPULATE", "2000"])
        .await
        .expect("populate");
    c.command(&["CONFIG", "SET", "rdb-key-save-delay", "500"])
        .await
        .expect("slow saves");
    c.command(&["BGSAVE"])
        .await
        .expect("a save by another client");
    assert_eq!(a.info().await.int("rdb_bgsave_in_progress"), 1);
    c.command(&["SET", "written-after-that-save-began", "1"])
        .await
        .expect("write");
    c.command(&["CONFIG", "SET", "rdb-key-save-delay", "0"])
        .await
        .expect("fast again");
    let saves = a.info().await.int("rdb_saves");
    snapshot(&a.local, Kind::Rdb, T).await.expect("snapshot");
    let i = a.info().await;
    // rdb_saves counts saves as they start: the earlier one was counted already.
    assert!(
        i.int("rdb_saves") > saves,
        "our own save ran after the earlier one"
    );
    assert_eq!(i.get("rdb_last_bgsave_status"), "ok");
    // The snapshot holds the write made after the first save began.
    let only_rdb = spec(serde_json::json!({"redis": {"appendonly": "no"}}));
    let copy = Server::start_on(
        "snap-copy",
        &Boot::Primary,
        "pw",
        &only_rdb,
        Some(&a.paths.data_dir.join("dump.rdb")),
    )
    .await;
    let mut cc = copy.client("pw").await.expect("copy");
    assert_eq!(
        cc.command(&["EXISTS", "written-after-that-save-began"])
            .await
            .expect("exists")
            .int(),
        Some(1)
    );
    // AOF: a rewrite that starts after the request.
    let rewrites = a.info().await.int("aof_rewrites");
    snapshot(&a.local, Kind::Aof, T).await.expect("aof");
    assert!(a.info().await.int("aof_rewrites") > rewrites);
    assert!(
        a.paths
            .data_dir
            .join("appendonlydir/appendonly.aof.manifest")
            .is_file()
    );
}

fn credentials_dir(scratch: &Scratch) -> PathBuf {
    let d = scratch.0.join("backup-credentials");
    std::fs::create_dir_all(&d).expect("creds");
    // Upstream's alternative key spellings.
    std::fs::write(d.join("accessKeyId"), AK).expect("ak");
    std::fs::write(d.join("AWS_SECRET_ACCESS_KEY"), format!("{SK}\n")).expect("sk");
    d
}

#[tokio::test]
async fn backups_upload_to_s3_and_restore_into_a_fresh_data_directory() {
    use redis::instance::{backup, restore, s3};
    let s3srv = s3_server("redis-backups", "127.0.0.1").await;
    let s = spec(serde_json::json!({}));
    let a = Server::start("bk", &Boot::Primary, "pw", &s).await;
    let mut c = a.client("pw").await.expect("client");
    for i in 0..500 {
        c.command(&["SET", &format!("key:{i}"), &format!("value {i}")])
            .await
            .expect("set");
    }
    let creds_scratch = Scratch::new("creds");
    let creds = credentials_dir(&creds_scratch);
    for (name, method, restored_keys) in [("nightly-rdb", "rdb", 500), ("nightly-aof", "aof", 501)]
    {
        if method == "aof" {
            c.command(&["SET", "only-in-aof", "1"]).await.expect("set");
        }
        let req = redis::instance_api::BackupRequest {
            backup_name: name.into(),
            method: method.into(),
            destination: redis::crd::BackupDestination {
                s3: Some(redis::crd::S3Destination {
                    bucket: "redis-backups".into(),
                    path: "/backups/demo/".into(),
                    endpoint: s3srv.endpoint.clone(),
                    region: String::new(),
                }),
                azure: None,
            },
        };
        let plan = backup::plan(&req).expect("plan");
        let done = backup::take(&a.local, &a.paths.data_dir, &creds, &plan)
            .await
            .expect("backup");
        let ext = if method == "aof" { "aof.tar.gz" } else { "rdb" };
        assert_eq!(done.phase, "Completed");
        assert_eq!(
            done.backup_path,
            format!("s3://redis-backups/backups/demo/{name}.{ext}")
        );
        // The stored object is the artifact the result describes.
        let stored = s3srv
            .root
            .join(format!("redis-backups/backups/demo/{name}.{ext}"));
        let bytes = std::fs::read(&stored).expect("object stored");
        assert_eq!(bytes.len() as i64, done.backup_size);
        assert_eq!(s3::sha256_hex(&bytes), done.checksum_sha256);
        // Restore: download with the same credentials into a fresh data directory.
        let target = Scratch::new("restored");
        let data = target.0.join("data");
        std::fs::create_dir_all(&data).expect("data");
        let dest = req.destination.s3.clone().expect("s3");
        let bucket = backup::bucket(&dest, s3::Credentials::read(&creds).expect("creds"));
        let http = reqwest::Client::new();
        let tmp = data.join(".restore-download");
        bucket
            .get_to_file(&http, &plan.key, &tmp)
            .await
            .expect("download");
        restore::install(&data, &tmp, method == "aof").expect("install");
        // Boot a server on the restored data with the instance manager's configuration.
        let port = free_port();
        let paths = Paths {
            data_dir: data.clone(),
            socket: target.0.join("redis.sock"),
            tls_dir: target.0.join("tls"),
        };
        std::fs::write(
            paths.conf(),
            Server::config(&paths, port, &Boot::Primary, &[auth::hash("pw")], "pw", &s),
        )
        .expect("conf");
        let mut child = process::spawn(Path::new(REDIS), &paths.conf()).expect("spawn");
        let local = Local::new(paths.socket.clone(), vec!["pw".into()]);
        until("the restored server", || async {
            local.ping().await.is_ok()
        })
        .await;
        let n = local
            .command(&["DBSIZE".into()])
            .await
            .expect("dbsize")
            .int();
        assert_eq!(n, Some(restored_keys), "{method}: every key restored");
        child
            .stop(&local, Duration::from_secs(10))
            .await
            .expect("stop");
    }
    // Wrong credentials: the store refuses, and the backup fails saying where.
    std::fs::write(creds.join("AWS_SECRET_ACCESS_KEY"), "wrong").expect("w");
    let req = redis::instance_api::BackupRequest {
        backup_name: "refused".into(),
        method: "rdb".into(),
        destination: redis::crd::BackupDestination {
            s3: Some(redis::crd::S3Destination {
                bucket: "redis-backups".into(),
                path: String::new(),
                endpoint: s3srv.endpoint.clone(),
                region: String::new(),
            }),
            azure: None,
        },
    };
    let err = backup::take(
        &a.local,
        &a.paths.data_dir,
        &creds,
        &backup::plan(&req).expect("plan"),
    )
    .await
    .unwrap_err();
    // The store answers 403 as soon as it has the headers; the client may see that or the
    // connection closed under the body it is still sending.
    assert!(
        err.starts_with("PUT http://") && err.contains("/redis-backups/refused.rdb"),
        "{err}"
    );
}
