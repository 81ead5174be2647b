//! Pure: which `status.suspended` / `status.woken` overrides a task must set or clear on
//! instances, and the status patches that do it.
//!
//! Contract:
//! - An override is set only where the task holds the instance and no override of that kind
//!   is present (another actor's override is left alone; the task just waits on it).
//! - An override is cleared only when its actor is this task (`task/<name>`) and the task no
//!   longer holds the instance that way, so a person's or another task's override survives.
//! - Every patch carries the instance's observed `resourceVersion`: if the instance changed
//!   meanwhile the write fails with a conflict and the next pass decides again.

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde_json::{Value, json};

use super::build::Hold;
use crate::crd::{RedroidInstance, TemporaryOverride};
use crate::names;

/// One override write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The instance.
    pub instance: String,
    /// Which override.
    pub kind: Hold,
    /// Set (true) or clear (false).
    pub set: bool,
    /// The instance's observed resourceVersion (optimistic concurrency).
    pub resource_version: Option<String>,
}

impl Change {
    /// The Event reason for this change.
    pub fn event_reason(&self) -> &'static str {
        match (self.kind, self.set) {
            (Hold::Suspend, true) => "SuspendedInstance",
            (Hold::Wake, true) => "WokenInstance",
            (Hold::Suspend, false) => "ClearedSuspendedInstance",
            (Hold::Wake, false) => "ClearedWokenInstance",
        }
    }

    /// The merge patch of the instance's status subresource.
    pub fn patch(&self, task: &str) -> Value {
        let field = field(self.kind);
        let value = if self.set {
            serde_json::to_value(desired(self.kind, task)).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        json!({
            "metadata": {"resourceVersion": self.resource_version},
            "status": {field: value},
        })
    }
}

fn field(kind: Hold) -> &'static str {
    match kind {
        Hold::Suspend => "suspended",
        Hold::Wake => "woken",
    }
}

/// The override a task sets (no `until`: it lasts until the Job finishes or the task goes).
pub fn desired(kind: Hold, task: &str) -> TemporaryOverride {
    let reason = match kind {
        Hold::Suspend => format!("reserved for one-shot task {task}"),
        Hold::Wake => format!("on-demand wake for one-shot task {task}"),
    };
    TemporaryOverride {
        reason: Some(reason),
        until: None,
        actor: Some(names::task_actor(task)),
    }
}

/// The writes that make `instances` carry exactly the overrides in `holds` as far as this
/// task is concerned.
pub fn changes(
    task: &str,
    holds: &BTreeMap<String, Hold>,
    instances: &[RedroidInstance],
) -> Vec<Change> {
    let actor = names::task_actor(task);
    let mut out = Vec::new();
    for inst in instances {
        let name = inst.name_any();
        let status = inst.status.clone().unwrap_or_default();
        for (kind, current) in [
            (Hold::Suspend, status.suspended),
            (Hold::Wake, status.woken),
        ] {
            let wanted = holds.get(&name) == Some(&kind);
            let ours = current
                .as_ref()
                .is_some_and(|o| o.actor.as_deref() == Some(actor.as_str()));
            let set = match (wanted, current.is_some(), ours) {
                (true, false, _) => true,
                (false, true, true) => false,
                _ => continue,
            };
            out.push(Change {
                instance: name.clone(),
                kind,
                set,
                resource_version: inst.resource_version(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::validate::tests::instance;

    fn with(
        mut i: RedroidInstance,
        suspended: Option<&str>,
        woken: Option<&str>,
    ) -> RedroidInstance {
        let o = |a: &str| TemporaryOverride {
            actor: Some(a.into()),
            ..TemporaryOverride::default()
        };
        let mut s = i.status.clone().unwrap_or_default();
        s.suspended = suspended.map(o);
        s.woken = woken.map(o);
        i.status = Some(s);
        i
    }

    #[test]
    fn sets_only_where_absent_and_clears_only_its_own() {
        let holds = BTreeMap::from([
            ("a".to_string(), Hold::Suspend),
            ("b".to_string(), Hold::Suspend),
        ]);
        let insts = [
            with(instance("a", 0), None, None),
            with(instance("b", 1), Some("manual"), None),
            with(instance("c", 2), Some("task/t"), Some("manual")),
            with(instance("d", 3), Some("task/other"), Some("task/t")),
        ];
        let got: Vec<(String, Hold, bool)> = changes("t", &holds, &insts)
            .into_iter()
            .map(|c| (c.instance, c.kind, c.set))
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), Hold::Suspend, true),
                ("c".to_string(), Hold::Suspend, false),
                ("d".to_string(), Hold::Wake, false),
            ]
        );
    }

    #[test]
    fn held_and_present_means_no_write() {
        let holds = BTreeMap::from([("a".to_string(), Hold::Wake)]);
        assert!(changes("t", &holds, &[with(instance("a", 0), None, Some("task/t"))]).is_empty());
    }

    #[test]
    fn patches_carry_actor_reason_and_resource_version() {
        let c = Change {
            instance: "a".into(),
            kind: Hold::Suspend,
            set: true,
            resource_version: Some("7".into()),
        };
        let p = c.patch("maa");
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["status"]["suspended"]["actor"], "task/maa");
        assert_eq!(
            p["status"]["suspended"]["reason"],
            "reserved for one-shot task maa"
        );
        let clear = Change {
            set: false,
            kind: Hold::Wake,
            ..c
        };
        assert_eq!(clear.patch("maa")["status"]["woken"], Value::Null);
        assert_eq!(clear.event_reason(), "ClearedWokenInstance");
    }
}
