use super::*;

type BootCase = (
    &'static str,
    View,
    PrimaryAddr,
    Result<(), String>,
    Option<Boot>,
);
type RunCase = (
    &'static str,
    View,
    PrimaryAddr,
    Info,
    Option<Hold>,
    Action,
    Option<Hold>,
);

const ME: &str = "demo-1";

fn view(current: &str, target: &str) -> View {
    View {
        fencing: Fencing::NotFenced,
        current_primary: current.into(),
        target_primary: target.into(),
        replica_mode: None,
        promote: false,
    }
}

fn fenced(mut v: View) -> View {
    v.fencing = Fencing::Fenced;
    v
}

fn replica_mode(mut v: View, promote: bool) -> View {
    v.replica_mode = Some(Some(Source {
        host: "source.example".into(),
        port: 6380,
    }));
    v.promote = promote;
    v
}

fn ip(s: &str) -> PrimaryAddr {
    PrimaryAddr::Ip(s.into())
}

fn wait(b: &Boot) -> bool {
    matches!(b, Boot::Wait(_))
}

#[test]
fn boot_never_self_elects() {
    let replica_of = |h: &str| Boot::Replica {
        host: h.into(),
        port: 6379,
    };
    let ok = Ok(());
    // (case, view, primary lookup, secrets, expected; None = Wait)
    let table: Vec<BootCase> = vec![
        (
            "current primary starts as primary",
            view(ME, ""),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            Some(Boot::Primary),
        ),
        (
            "current and target agree",
            view(ME, ME),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            Some(Boot::Primary),
        ),
        (
            "handoff to another pod: the old primary waits",
            view(ME, "demo-2"),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            None,
        ),
        (
            "failover pending: the old primary waits",
            view(ME, "pending"),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            None,
        ),
        (
            "a replica follows the primary's IP",
            view("demo-0", ""),
            ip("10.0.0.5"),
            ok.clone(),
            Some(replica_of("10.0.0.5")),
        ),
        (
            "a replica follows even during a handoff to itself",
            view("demo-0", ME),
            ip("10.0.0.5"),
            ok.clone(),
            Some(replica_of("10.0.0.5")),
        ),
        (
            "no current primary: wait, never self-elect",
            view("", ""),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            None,
        ),
        (
            "no current primary, target is me: still wait",
            view("", ME),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            None,
        ),
        (
            "primary pod missing",
            view("demo-0", ""),
            PrimaryAddr::Missing,
            ok.clone(),
            None,
        ),
        (
            "primary pod without IP",
            view("demo-0", ""),
            PrimaryAddr::NoIp,
            ok.clone(),
            None,
        ),
        (
            "API error",
            view("demo-0", ""),
            PrimaryAddr::Unknown("timeout".into()),
            ok.clone(),
            None,
        ),
        (
            "fenced primary",
            fenced(view(ME, "")),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            None,
        ),
        (
            "fenced replica",
            fenced(view("demo-0", "")),
            ip("10.0.0.5"),
            ok.clone(),
            None,
        ),
        (
            "password not projected yet",
            view(ME, ""),
            PrimaryAddr::NotNeeded,
            Err("no password".into()),
            None,
        ),
        (
            "replica mode follows the source",
            replica_mode(view(ME, ""), false),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            Some(Boot::Replica {
                host: "source.example".into(),
                port: 6380,
            }),
        ),
        (
            "replica mode: others follow the source during promotion",
            replica_mode(view("demo-0", ""), true),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            Some(Boot::Replica {
                host: "source.example".into(),
                port: 6380,
            }),
        ),
        (
            "replica mode: the promoted leader starts as primary",
            replica_mode(view(ME, ""), true),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            Some(Boot::Primary),
        ),
        (
            "replica mode: fenced still waits",
            fenced(replica_mode(view(ME, ""), false)),
            PrimaryAddr::NotNeeded,
            ok.clone(),
            None,
        ),
    ];
    for (case, v, addr, secrets, want) in table {
        let got = boot(ME, &v, &addr, 6379, secrets);
        match want {
            Some(w) => assert_eq!(got, w, "{case}"),
            None => assert!(wait(&got), "{case}: {got:?}"),
        }
    }
}

#[test]
fn wait_reasons_say_why() {
    let got = boot(
        ME,
        &fenced(view(ME, "")),
        &PrimaryAddr::NotNeeded,
        6379,
        Ok(()),
    );
    assert!(
        matches!(&got, Boot::Wait(r) if r.contains("fenced")),
        "{got:?}"
    );
    let got = boot(ME, &view("demo-0", ""), &PrimaryAddr::Missing, 6379, Ok(()));
    assert!(
        matches!(&got, Boot::Wait(r) if r.contains("demo-0") && r.contains("does not exist")),
        "{got:?}"
    );
    let got = boot(ME, &view("", ""), &PrimaryAddr::NotNeeded, 6379, Ok(()));
    assert!(
        matches!(&got, Boot::Wait(r) if r.contains("currentPrimary is empty")),
        "{got:?}"
    );
    let mut v = view(ME, "");
    v.fencing = Fencing::Unreadable("annotation broken".into());
    assert_eq!(
        boot(ME, &v, &PrimaryAddr::NotNeeded, 6379, Ok(())),
        Boot::Wait("annotation broken".into())
    );
}

fn master() -> Info {
    Info::parse("role:master\r\nmaster_repl_offset:10\r\n")
}

fn slave_of(host: &str, port: u16) -> Info {
    Info::parse(&format!(
        "role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:up\r\n"
    ))
}

fn follow_(host: &str, port: u16, kill: bool) -> Action {
    Action::Follow {
        host: host.into(),
        port,
        kill_clients: kill,
        reason: String::new(),
    }
}

// Compares actions ignoring their sentences.
fn same(a: &Action, b: &Action) -> bool {
    match (a, b) {
        (Action::Nothing(_), Action::Nothing(_)) => true,
        (Action::Stop(_), Action::Stop(_)) => true,
        (Action::Promote(_), Action::Promote(_)) => true,
        (
            Action::Follow {
                host,
                port,
                kill_clients,
                ..
            },
            Action::Follow {
                host: h,
                port: p,
                kill_clients: k,
                ..
            },
        ) => host == h && port == p && kill_clients == k,
        _ => false,
    }
}

#[test]
fn running_instances_converge_on_the_current_primary() {
    let nothing = Action::Nothing(None);
    let stop = Action::Stop(String::new());
    let promote = Action::Promote(String::new());
    let a = ip("10.0.0.5");
    // (case, view, lookup, observed, hold, expected action, expected hold)
    let table: Vec<RunCase> = vec![
        (
            "primary stays primary",
            view(ME, ""),
            PrimaryAddr::NotNeeded,
            master(),
            None,
            nothing.clone(),
            None,
        ),
        (
            "current primary that is a replica promotes itself",
            view(ME, ME),
            PrimaryAddr::NotNeeded,
            slave_of("10.0.0.9", 6379),
            None,
            promote.clone(),
            None,
        ),
        (
            "replica in place",
            view("demo-0", ""),
            a.clone(),
            slave_of("10.0.0.5", 6379),
            None,
            nothing.clone(),
            None,
        ),
        (
            "replica re-points to a new primary IP",
            view("demo-0", ""),
            a.clone(),
            slave_of("10.0.0.4", 6379),
            None,
            follow_("10.0.0.5", 6379, false),
            None,
        ),
        (
            "a stale primary is demoted and its clients killed",
            view("demo-0", ""),
            a.clone(),
            master(),
            None,
            follow_("10.0.0.5", 6379, true),
            None,
        ),
        (
            "fenced: stop",
            fenced(view(ME, "")),
            PrimaryAddr::NotNeeded,
            master(),
            None,
            stop.clone(),
            None,
        ),
        (
            "fenced wins over a hold",
            fenced(view("demo-0", "")),
            a.clone(),
            master(),
            Some(Hold::Primary),
            stop.clone(),
            Some(Hold::Primary),
        ),
        (
            "handoff in progress: hands off",
            view("demo-0", "demo-2"),
            a.clone(),
            master(),
            None,
            nothing.clone(),
            None,
        ),
        (
            "no current primary: hands off",
            view("", ""),
            PrimaryAddr::NotNeeded,
            master(),
            None,
            nothing.clone(),
            None,
        ),
        (
            "promoted by the operator, stale view: kept",
            view("demo-0", ""),
            a.clone(),
            master(),
            Some(Hold::Primary),
            nothing.clone(),
            Some(Hold::Primary),
        ),
        (
            "promoted, view names me as target: hold dropped, handoff waits",
            view("demo-0", ME),
            a.clone(),
            master(),
            Some(Hold::Primary),
            nothing.clone(),
            None,
        ),
        (
            "promoted, view names me as current: normal rules",
            view(ME, ME),
            PrimaryAddr::NotNeeded,
            master(),
            Some(Hold::Primary),
            nothing.clone(),
            None,
        ),
        (
            "switched over, stale view still names me: kept as replica",
            view(ME, ""),
            PrimaryAddr::NotNeeded,
            slave_of("10.0.0.5", 6379),
            Some(Hold::Replica),
            nothing.clone(),
            Some(Hold::Replica),
        ),
        (
            "switched over, view names another: follow it",
            view("demo-2", "demo-2"),
            ip("10.0.0.7"),
            slave_of("10.0.0.5", 6379),
            Some(Hold::Replica),
            follow_("10.0.0.7", 6379, false),
            None,
        ),
        (
            "a primary whose current primary vanished stops",
            view("demo-0", ""),
            PrimaryAddr::Missing,
            master(),
            None,
            stop.clone(),
            None,
        ),
        (
            "a primary whose current primary has no IP stops",
            view("demo-0", ""),
            PrimaryAddr::NoIp,
            master(),
            None,
            stop.clone(),
            None,
        ),
        (
            "API error: no change",
            view("demo-0", ""),
            PrimaryAddr::Unknown("timeout".into()),
            master(),
            None,
            nothing.clone(),
            None,
        ),
        (
            "a replica whose primary vanished waits for it",
            view("demo-0", ""),
            PrimaryAddr::Missing,
            slave_of("10.0.0.5", 6379),
            None,
            nothing.clone(),
            None,
        ),
        (
            "replica mode: follow the source",
            replica_mode(view(ME, ""), false),
            PrimaryAddr::NotNeeded,
            master(),
            None,
            follow_("source.example", 6380, true),
            None,
        ),
        (
            "replica mode: already following",
            replica_mode(view(ME, ""), false),
            PrimaryAddr::NotNeeded,
            slave_of("source.example", 6380),
            None,
            nothing.clone(),
            None,
        ),
        (
            "replica mode: the leader promotes",
            replica_mode(view(ME, ""), true),
            PrimaryAddr::NotNeeded,
            slave_of("source.example", 6380),
            None,
            promote.clone(),
            None,
        ),
        (
            "replica mode: others keep following during promotion",
            replica_mode(view("demo-0", ""), true),
            PrimaryAddr::NotNeeded,
            slave_of("source.example", 6380),
            None,
            nothing.clone(),
            None,
        ),
    ];
    for (case, v, addr, info, hold, want, want_hold) in table {
        let (got, got_hold) = running(ME, &v, &addr, 6379, &info, hold);
        assert!(same(&got, &want), "{case}: got {got:?}, want {want:?}");
        assert_eq!(got_hold, want_hold, "{case}");
    }
}

#[test]
fn the_view_reads_the_cluster() {
    let c: RedisCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "redis.io/v1", "kind": "RedisCluster",
        "metadata": {"name": "demo", "annotations": {"redis.io/fencedInstances": "[\"*\"]"}},
        "spec": {"storage": {"size": "1Gi"}, "replicaMode": {"enabled": true, "promote": true,
                 "source": {"host": " src ", "port": 0}}},
        "status": {"currentPrimary": "demo-0", "targetPrimary": "demo-1"}
    }))
    .expect("cluster");
    let v = View::of(&c, "demo-0");
    assert_eq!(v.fencing, Fencing::Fenced);
    assert_eq!(
        (v.current_primary.as_str(), v.target_primary.as_str()),
        ("demo-0", "demo-1")
    );
    assert_eq!(
        v.replica_mode,
        Some(Some(Source {
            host: "src".into(),
            port: 6379
        }))
    );
    assert!(v.promote);
}
