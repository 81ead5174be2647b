//! `ensure_toolboxes`: one pod per named toolbox (reference §4.2).
//!
//! Contract:
//! - The whole list is validated first: a duplicate or integer name (it would collide with an
//!   agent slot's pod) is an invalid spec. Nothing is created or deleted then; the Ready
//!   condition says why (reason `InvalidSpec`), a Warning Event is published once, and the
//!   set waits for a spec change. (Upstream only logs a reconcile error.)
//! - Per toolbox: terminal or drifted → deleted (rebuilt on the next pass, no back-off);
//!   missing → created, restoring from `:hibernate` when a CocoonHibernation says so. A pod
//!   of that name that is not this set's toolbox is a name collision, reported the same way.
//! - Toolbox pods no longer in the spec are deleted.

use std::collections::BTreeSet;

use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::{Created, Pass};
use super::{Error, agents};
use crate::crd::ToolboxSpec;
use crate::names::{self, Role};
use crate::pods::{build, drift, state};

/// Converges the toolbox pods; returns whether anything was written.
pub async fn ensure_toolboxes(pass: &mut Pass<'_>) -> Result<bool, Error> {
    let toolboxes = pass.set.spec.toolboxes.clone().unwrap_or_default();
    validate(&toolboxes)?;
    let mut changed = false;
    for tb in &toolboxes {
        changed |= ensure_one(pass, tb).await?;
    }
    let wanted: BTreeSet<&str> = toolboxes.iter().map(|t| t.name.as_str()).collect();
    let extras: Vec<String> = pass
        .pods
        .toolboxes
        .iter()
        .filter(|(name, _)| !wanted.contains(name.as_str()))
        .map(|(_, p)| p.name_any())
        .collect();
    for pod in &extras {
        pass.delete_pod(pod).await?;
    }
    Ok(changed || !extras.is_empty())
}

/// Rejects toolbox lists no pod layout can satisfy.
pub fn validate(toolboxes: &[ToolboxSpec]) -> Result<(), Error> {
    let mut seen = BTreeSet::new();
    for tb in toolboxes {
        if names::is_integer_name(&tb.name) {
            return Err(Error::InvalidSpec(format!(
                "toolbox name {:?} must not be an integer (it would collide with an agent slot)",
                tb.name
            )));
        }
        if !seen.insert(tb.name.as_str()) {
            return Err(Error::InvalidSpec(format!(
                "duplicate toolbox name {:?}",
                tb.name
            )));
        }
    }
    Ok(())
}

async fn ensure_one(pass: &mut Pass<'_>, tb: &ToolboxSpec) -> Result<bool, Error> {
    let pod_name = names::toolbox_pod_name(&pass.name(), &tb.name);
    if let Some(other) = pass.pods.all.iter().find(|p| p.name_any() == pod_name) {
        let role = state::label(other, names::LABEL_ROLE).and_then(Role::parse);
        if role != Some(Role::Toolbox) {
            return Err(collision(&pod_name));
        }
    }
    if let Some(pod) = pass.pods.toolboxes.get(&tb.name) {
        if state::is_terminal(pod) || drift::toolbox_drifted(&pass.set, tb, pod) {
            pass.delete_pod(&pod.name_any()).await?;
            return Ok(true);
        }
        return Ok(false);
    }
    let mut pod = build::toolbox_pod(&pass.set, tb);
    if agents::restore_wanted(pass, &pod).await? {
        build::mark_restore(&mut pod);
    }
    if pass.create_pod(&pod).await? == Created::AlreadyExists {
        // Our cache may lag our own create; anything else under that name is in the way.
        let ours = pass.live_pod(&pod_name).await?.is_some_and(|p| {
            p.owner_references().iter().any(|o| {
                o.controller == Some(true) && Some(&o.uid) == pass.set.metadata.uid.as_ref()
            })
        });
        if !ours {
            return Err(collision(&pod_name));
        }
    }
    Ok(true)
}

fn collision(pod: &str) -> Error {
    Error::NameCollision(format!("pod {pod} exists and is not this set's toolbox"))
}

/// Reports an invalid toolbox list in status and an Event; waits for a spec change.
pub async fn report_invalid(pass: &Pass<'_>, message: String) -> Result<Outcome, Error> {
    let already = pass
        .set
        .status
        .as_ref()
        .and_then(|s| kit::conditions::get(&s.conditions, "Ready"))
        .is_some_and(|c| c.reason == "InvalidSpec" && c.message == message);
    if !already {
        pass.event(true, "InvalidSpec", message.clone()).await;
    }
    pass.write_status_noted(None, Some(("InvalidSpec", message)))
        .await?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tb(name: &str) -> ToolboxSpec {
        serde_json::from_value(serde_json::json!({ "name": name })).expect("toolbox")
    }

    #[test]
    fn duplicate_and_integer_names_are_invalid() {
        assert!(validate(&[tb("db"), tb("cache")]).is_ok());
        let dup = validate(&[tb("db"), tb("db")]).unwrap_err();
        assert_eq!(
            dup.to_string(),
            r#"invalid spec: duplicate toolbox name "db""#
        );
        let int = validate(&[tb("7")]).unwrap_err();
        assert!(int.to_string().contains("must not be an integer"), "{int}");
        assert!(validate(&[tb("db-0")]).is_ok());
    }
}
