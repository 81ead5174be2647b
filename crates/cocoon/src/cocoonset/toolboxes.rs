//! `ensure_toolboxes`: one pod per named toolbox (reference §4.2).
//!
//! Contract:
//! - The whole list is validated first: a duplicate or integer name (it would collide with an
//!   agent slot's pod) is an invalid spec. Nothing is created or deleted then; the Ready
//!   condition says why (reason `InvalidSpec`), a Warning Event is published once, and the
//!   set waits for a spec change. (Upstream only logs a reconcile error.)
//! - Per toolbox: terminal or drifted → deleted (rebuilt on the next pass, no back-off);
//!   missing → created, restoring from `:hibernate` when a CocoonHibernation says so.
//! - A pod under a toolbox's name that is not this set's toolbox (someone else's pod) is a
//!   name collision: that toolbox is skipped, the others are converged, and once nothing else
//!   changed the collision is reported like an invalid spec (Ready False, reason
//!   `NameCollision`, one Warning Event per change of the message, decided from the stored set
//!   when the cached copy does not show it yet). The foreign pod is not
//!   watched, so the set looks again every 30 s until its name is free.
//! - Toolbox pods no longer in the spec are deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use kit::reconcile::Outcome;
use kube::ResourceExt;

use super::pass::{Created, Pass};
use super::{Error, agents};
use crate::crd::ToolboxSpec;
use crate::names::{self, Role};
use crate::pods::{build, drift, state};

/// How often a set whose toolbox name is taken by a foreign pod looks again (that pod is not
/// watched).
pub const COLLISION_RECHECK: Duration = Duration::from_secs(30);

/// Converges the toolbox pods; returns whether anything was written. A name collision fails
/// with [`Error::NameCollision`] once the other toolboxes are converged and nothing changed.
pub async fn ensure_toolboxes(pass: &mut Pass<'_>) -> Result<bool, Error> {
    let toolboxes = pass.set.spec.toolboxes.clone().unwrap_or_default();
    validate(&toolboxes)?;
    let mut changed = false;
    let mut collisions = Vec::new();
    for tb in &toolboxes {
        match ensure_one(pass, tb).await {
            Err(Error::NameCollision(what)) => collisions.push(what),
            other => changed |= other?,
        }
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
    let changed = changed || !extras.is_empty();
    if !changed && !collisions.is_empty() {
        return Err(Error::NameCollision(collisions.join("; ")));
    }
    Ok(changed)
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
    Error::NameCollision(format!(
        "pod {pod} exists and is not this set's toolbox (rename or delete it)"
    ))
}

/// What a spec problem (an invalid spec, a toolbox name taken by a foreign pod) is reported
/// as: the Ready reason (also the Event reason) and when to look again. `None` for other
/// errors.
pub fn problem(err: &Error) -> Option<(&'static str, &str, Outcome)> {
    match err {
        // Only a spec change can help: the set's watch brings it.
        Error::InvalidSpec(msg) => Some(("InvalidSpec", msg, Outcome::Done)),
        // The foreign pod may go away; nothing watches it.
        Error::NameCollision(msg) => Some((
            "NameCollision",
            msg,
            Outcome::RequeueAfter(COLLISION_RECHECK),
        )),
        _ => None,
    }
}

/// Reports a spec problem ([`problem`]) in the Ready condition and, when the message is
/// new, a Warning Event; the pass then ends with the problem's outcome.
pub async fn report(pass: &Pass<'_>, err: Error) -> Result<Outcome, Error> {
    let Some((reason, message, outcome)) = problem(&err) else {
        return Err(err);
    };
    let said = |set: &crate::crd::CocoonSet| {
        set.status
            .as_ref()
            .and_then(|s| kit::conditions::get(&s.conditions, "Ready"))
            .is_some_and(|c| c.reason == reason && c.message == message)
    };
    // The cached copy can lag the previous pass's status write: before publishing, the stored
    // copy decides whether this problem is new (one Event per change of the message).
    let already = said(&pass.set) || pass.stored().await?.is_some_and(|s| said(&s));
    if !already {
        pass.event(true, reason, message.to_owned()).await;
    }
    pass.write_status_noted(None, Some((reason, message.to_owned())))
        .await?;
    Ok(outcome)
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

    #[test]
    fn problems_are_reported_with_their_reason_and_recheck() {
        let invalid = Error::InvalidSpec("duplicate toolbox name \"db\"".into());
        assert_eq!(
            problem(&invalid),
            Some((
                "InvalidSpec",
                "duplicate toolbox name \"db\"",
                Outcome::Done
            ))
        );
        let taken = collision("demo-db");
        let (reason, message, outcome) = problem(&taken).expect("a toolbox problem");
        assert_eq!(reason, "NameCollision");
        assert_eq!(
            message,
            "pod demo-db exists and is not this set's toolbox (rename or delete it)"
        );
        assert_eq!(outcome, Outcome::RequeueAfter(COLLISION_RECHECK));
        assert_eq!(problem(&Error::CacheNotReady), None);
    }
}
