//! What `kubectl redis` commands compute (pure): the status report, the edited fencing list,
//! the promotion check, the RedisBackup to create and the `kubectl exec` argv of `cli`.
//!
//! Contract:
//! - [`status_report`]: the cluster's phase, primary (current and target), instances and
//!   last backups, its conditions, then one row per instance of `instancesStatus` (sorted by
//!   name): role (`primary`/`replica` from Redis' `master`/`slave`), ready, replication
//!   offset, lag in bytes (replicas), link (`up`/`down`, with how long down) and whether it is
//!   fenced (`redis.io/fencedInstances`).
//! - [`fenced`]: the annotation after fencing (`on`) or unfencing one instance: a sorted JSON
//!   array without duplicates, `None` (remove the annotation) when it becomes empty. Invalid
//!   JSON in the annotation is an error (it is never overwritten blindly).
//! - [`promotable`]: an instance can be promoted when it is a data instance listed in
//!   `instancesStatus`, not the current primary, not fenced, and no other handoff is under way
//!   (`targetPrimary` empty or the current primary).
//! - [`backup`]: a RedisBackup of the cluster with the given target, method and destination
//!   (exactly one of S3 or Azure).
//! - [`cli_argv`]: `kubectl exec -it -n <ns> <pod> -c redis -- sh -c …` running `redis-cli`
//!   with the password read inside the pod from `/projected/<authSecret>/password` (it never
//!   crosses the plugin), then the user's arguments, each quoted.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::plugin::table::{Describe, Table};
use kube::ResourceExt;

use crate::crd::{
    BackupDestination, BackupMethod, BackupPhase, BackupTarget, RedisBackup, RedisBackupSpec,
    RedisCluster,
};
use crate::names;

/// The instances listed in `redis.io/fencedInstances` (invalid JSON: none, as the operator
/// reads it).
pub fn fenced_set(rc: &RedisCluster) -> BTreeSet<String> {
    rc.annotations()
        .get(names::ANN_FENCED_INSTANCES)
        .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// The fencing annotation after (un)fencing `instance` (see the module contract).
pub fn fenced(current: Option<&str>, instance: &str, on: bool) -> Result<Option<String>, String> {
    let mut set: BTreeSet<String> = match current.map(str::trim) {
        None | Some("") => BTreeSet::new(),
        Some(v) => serde_json::from_str::<Vec<String>>(v)
            .map_err(|e| {
                format!(
                    "annotation {} holds {v:?}, not a JSON array of pod names ({e}); fix it by hand",
                    names::ANN_FENCED_INSTANCES
                )
            })?
            .into_iter()
            .collect(),
    };
    if on {
        set.insert(instance.to_owned());
    } else {
        set.remove(instance);
    }
    if set.is_empty() {
        return Ok(None);
    }
    let list: Vec<&String> = set.iter().collect();
    Ok(Some(
        serde_json::to_string(&list).map_err(|e| e.to_string())?,
    ))
}

/// Why `instance` cannot be promoted, if it cannot (see the module contract).
pub fn promotable(rc: &RedisCluster, instance: &str) -> Result<(), String> {
    let name = rc.name_any();
    let s = rc.status.clone().unwrap_or_default();
    if !s.instances_status.contains_key(instance) {
        let known: Vec<&String> = s.instances_status.keys().collect();
        return Err(format!(
            "{instance:?} is not an instance of rediscluster {name:?} (instances: {known:?})"
        ));
    }
    if s.current_primary == instance {
        return Err(format!("{instance:?} is already the primary of {name:?}"));
    }
    if fenced_set(rc).contains(instance) {
        return Err(format!(
            "{instance:?} is fenced; unfence it first (kubectl redis fence off {name} {instance})"
        ));
    }
    if !s.target_primary.is_empty() && s.target_primary != s.current_primary {
        return Err(format!(
            "a handoff to {:?} is under way; wait for it to finish",
            s.target_primary
        ));
    }
    Ok(())
}

/// The RedisBackup `name` of `cluster` (see the module contract).
pub fn backup(
    cluster: &str,
    name: &str,
    target: BackupTarget,
    method: BackupMethod,
    destination: BackupDestination,
) -> Result<RedisBackup, String> {
    BackupDestination::validate(Some(&destination))?;
    let mut b = RedisBackup::new(
        name,
        RedisBackupSpec {
            cluster_name: cluster.to_owned(),
            target,
            method,
            destination: Some(destination),
            deletion_policy: None,
        },
    );
    b.metadata
        .labels
        .get_or_insert_default()
        .insert(names::LABEL_CLUSTER.into(), cluster.into());
    Ok(b)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The `kubectl exec` arguments of `cli` (see the module contract). redis-cli connects through
/// redis-server's Unix socket: redis-server listens on the pod IP only (not on 127.0.0.1,
/// redis-cli's default), and the socket needs no TLS when the cluster has it.
pub fn cli_argv(namespace: &str, pod: &str, auth_secret: &str, args: &[String]) -> Vec<String> {
    let user: Vec<String> = args.iter().map(|a| quote(a)).collect();
    let script = format!(
        "REDISCLI_AUTH=\"$(cat {}/{auth_secret}/password)\" exec redis-cli -s {} {}",
        names::PROJECTED_DIR,
        names::REDIS_SOCKET,
        user.join(" ")
    );
    [
        "exec",
        "-it",
        "-n",
        namespace,
        pod,
        "-c",
        "redis",
        "--",
        "sh",
        "-c",
        script.trim_end(),
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

fn role(r: &str) -> &str {
    match r {
        "master" => "primary",
        "slave" => "replica",
        "" => "-",
        other => other,
    }
}

fn conditions(d: &mut Describe, conditions: &[Condition]) {
    if conditions.is_empty() {
        d.field("Conditions", "<none>");
        return;
    }
    d.field("Conditions", "");
    for c in conditions {
        let message = if c.message.is_empty() {
            String::new()
        } else {
            format!(": {}", c.message)
        };
        d.nested(
            c.type_.clone(),
            format!("{} ({}){message}", c.status, c.reason),
        );
    }
}

fn newest(backups: &[RedisBackup], phase: BackupPhase) -> Option<&RedisBackup> {
    backups
        .iter()
        .filter(|b| b.status.as_ref().and_then(|s| s.phase) == Some(phase))
        .max_by_key(|b| {
            let s = b.status.as_ref();
            (
                s.and_then(|s| s.completed_at.as_ref().map(|t| t.0)),
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                b.name_any(),
            )
        })
}

/// The `status` output for cluster `rc` and its RedisBackups (see the module contract).
pub fn status_report(rc: &RedisCluster, backups: &[RedisBackup]) -> String {
    let s = rc.status.clone().unwrap_or_default();
    let mut d = Describe::new();
    d.field("Name", rc.name_any());
    d.field("Namespace", rc.namespace().unwrap_or_default());
    let phase = s.phase.map(|p| format!("{p:?}")).unwrap_or_default();
    let phase = match (phase.as_str(), s.phase_reason.as_str()) {
        ("", _) => "<none>".to_owned(),
        (p, "") => p.to_owned(),
        (p, why) => format!("{p} ({why})"),
    };
    d.field("Phase", phase);
    d.field("Primary", or(&s.current_primary));
    if !s.target_primary.is_empty() && s.target_primary != s.current_primary {
        d.field("Target primary", s.target_primary.clone());
    }
    d.field(
        "Instances",
        format!("{} ready of {}", s.ready_instances, s.instances),
    );
    let fenced = fenced_set(rc);
    if !fenced.is_empty() {
        let list: Vec<&str> = fenced.iter().map(String::as_str).collect();
        d.field("Fenced", list.join(", "));
    }
    if let Some(v) = rc.annotations().get(names::ANN_HIBERNATION) {
        d.field("Hibernation", v.clone());
    }
    let last = |p: BackupPhase| {
        newest(backups, p).map_or_else(
            || "<none>".to_owned(),
            |b| {
                let s = b.status.clone().unwrap_or_default();
                let when = s
                    .completed_at
                    .map(|t| t.0.to_string())
                    .unwrap_or_else(|| "?".into());
                match p {
                    BackupPhase::Failed => format!("{} at {when}: {}", b.name_any(), s.error),
                    _ => format!("{} at {when} ({})", b.name_any(), s.backup_path),
                }
            },
        )
    };
    d.field("Last successful backup", last(BackupPhase::Completed));
    if newest(backups, BackupPhase::Failed).is_some() {
        d.field("Last failed backup", last(BackupPhase::Failed));
    }
    conditions(&mut d, &s.conditions);
    let mut out = d.render();
    out.push('\n');
    if s.instances_status.is_empty() {
        out.push_str("No instances reported.\n");
        return out;
    }
    let mut t = Table::new([
        "INSTANCE", "ROLE", "READY", "OFFSET", "LAG", "LINK", "FENCED",
    ]);
    for (name, i) in &s.instances_status {
        let replica = i.role == "slave";
        let link = match (replica, i.master_link_status.as_str()) {
            (false, _) => "-".to_owned(),
            (true, "") => "?".to_owned(),
            (true, "down") if i.link_down_since_seconds > 0 => {
                format!("down {}s", i.link_down_since_seconds)
            }
            (true, l) if i.master_sync_in_progress => format!("{l} (syncing)"),
            (true, l) => l.to_owned(),
        };
        let primary = if *name == s.current_primary && i.role != "master" {
            format!("{} (primary?)", role(&i.role))
        } else {
            role(&i.role).to_owned()
        };
        t.row([
            name.clone(),
            primary,
            if i.ready { "true" } else { "false" }.to_owned(),
            i.replication_offset.to_string(),
            if replica {
                i.replica_lag_bytes.to_string()
            } else {
                "-".into()
            },
            link,
            if fenced.contains(name) { "yes" } else { "no" }.to_owned(),
        ]);
    }
    out.push_str(&t.render());
    out
}

fn or(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{InstanceStatus, RedisClusterStatus, S3Destination};

    fn cluster(annotations: &[(&str, &str)], status: RedisClusterStatus) -> RedisCluster {
        let mut rc = RedisCluster::new("demo", crate::crd::RedisClusterSpec::default());
        rc.metadata.namespace = Some("ns".into());
        for (k, v) in annotations {
            rc.annotations_mut().insert((*k).into(), (*v).into());
        }
        rc.status = Some(status);
        rc
    }

    fn instances() -> RedisClusterStatus {
        let mut s = RedisClusterStatus {
            current_primary: "demo-0".into(),
            target_primary: "demo-0".into(),
            instances: 2,
            ready_instances: 2,
            ..Default::default()
        };
        s.instances_status.insert(
            "demo-0".into(),
            InstanceStatus {
                role: "master".into(),
                ready: true,
                replication_offset: 1000,
                ..Default::default()
            },
        );
        s.instances_status.insert(
            "demo-1".into(),
            InstanceStatus {
                role: "slave".into(),
                ready: true,
                replication_offset: 990,
                replica_lag_bytes: 10,
                master_link_status: "up".into(),
                ..Default::default()
            },
        );
        s
    }

    // (annotation, instance, on, expected annotation or an error)
    type Case = (
        Option<&'static str>,
        &'static str,
        bool,
        Result<Option<&'static str>, ()>,
    );

    #[test]
    fn fencing_edits_a_sorted_list_and_removes_it_when_empty() {
        let cases: &[Case] = &[
            (None, "demo-1", true, Ok(Some(r#"["demo-1"]"#))),
            (Some(""), "demo-1", true, Ok(Some(r#"["demo-1"]"#))),
            (
                Some(r#"["demo-2"]"#),
                "demo-1",
                true,
                Ok(Some(r#"["demo-1","demo-2"]"#)),
            ),
            (
                Some(r#"["demo-1"]"#),
                "demo-1",
                true,
                Ok(Some(r#"["demo-1"]"#)),
            ),
            (
                Some(r#"["demo-1","demo-2"]"#),
                "demo-1",
                false,
                Ok(Some(r#"["demo-2"]"#)),
            ),
            (Some(r#"["demo-1"]"#), "demo-1", false, Ok(None)),
            (None, "demo-1", false, Ok(None)),
            (Some("demo-1"), "demo-1", true, Err(())),
        ];
        for (current, instance, on, want) in cases {
            let got = fenced(*current, instance, *on);
            match want {
                Ok(w) => assert_eq!(got.ok().flatten().as_deref(), *w, "{current:?} {on}"),
                Err(()) => assert!(got.is_err(), "{current:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn only_a_known_unfenced_replica_can_be_promoted_when_no_handoff_runs() {
        let rc = cluster(&[], instances());
        assert_eq!(promotable(&rc, "demo-1"), Ok(()));
        assert!(promotable(&rc, "demo-0").unwrap_err().contains("already"));
        assert!(
            promotable(&rc, "demo-9")
                .unwrap_err()
                .contains("not an instance")
        );
        let fenced = cluster(
            &[(names::ANN_FENCED_INSTANCES, r#"["demo-1"]"#)],
            instances(),
        );
        assert!(
            promotable(&fenced, "demo-1")
                .unwrap_err()
                .contains("fenced")
        );
        let mut s = instances();
        s.target_primary = "demo-2".into();
        let moving = cluster(&[], s);
        assert!(
            promotable(&moving, "demo-1")
                .unwrap_err()
                .contains("under way")
        );
    }

    #[test]
    fn the_status_report_shows_each_instance_role_offset_lag_and_link() {
        let mut s = instances();
        s.instances_status.insert(
            "demo-2".into(),
            InstanceStatus {
                role: "slave".into(),
                master_link_status: "down".into(),
                link_down_since_seconds: 42,
                ..Default::default()
            },
        );
        let rc = cluster(&[(names::ANN_FENCED_INSTANCES, r#"["demo-2"]"#)], s);
        let out = status_report(&rc, &[]);
        assert!(out.contains("Primary:"), "{out}");
        assert!(out.contains("Fenced:"), "{out}");
        let rows: Vec<Vec<&str>> = out
            .lines()
            .skip_while(|l| !l.starts_with("INSTANCE"))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            vec![
                vec![
                    "INSTANCE", "ROLE", "READY", "OFFSET", "LAG", "LINK", "FENCED"
                ],
                vec!["demo-0", "primary", "true", "1000", "-", "-", "no"],
                vec!["demo-1", "replica", "true", "990", "10", "up", "no"],
                vec!["demo-2", "replica", "false", "0", "0", "down", "42s", "yes"],
            ]
        );
    }

    #[test]
    fn a_backup_needs_exactly_one_destination() {
        let s3 = BackupDestination {
            s3: Some(S3Destination {
                bucket: "bk".into(),
                ..Default::default()
            }),
            azure: None,
        };
        let b = backup("demo", "b1", BackupTarget::Primary, BackupMethod::Aof, s3).expect("ok");
        assert_eq!(b.spec.cluster_name, "demo");
        assert_eq!(
            b.labels().get(names::LABEL_CLUSTER).map(String::as_str),
            Some("demo")
        );
        assert!(
            backup(
                "demo",
                "b1",
                BackupTarget::Primary,
                BackupMethod::Rdb,
                BackupDestination::default()
            )
            .is_err()
        );
    }

    #[test]
    fn cli_reads_the_password_inside_the_pod_and_quotes_arguments() {
        let argv = cli_argv("ns", "demo-1", "demo-auth", &["get".into(), "it's".into()]);
        assert_eq!(
            &argv[..8],
            ["exec", "-it", "-n", "ns", "demo-1", "-c", "redis", "--"]
        );
        assert_eq!(
            argv[10],
            r#"REDISCLI_AUTH="$(cat /projected/demo-auth/password)" exec redis-cli -s /controller/redis.sock 'get' 'it'\''s'"#
        );
        assert!(!argv.iter().any(|a| a.contains("pw")));
    }
}
