//! Fencing: whether the annotation `redis.io/fencedInstances` on the RedisCluster names this
//! pod.
//!
//! Contract (pure): the annotation is a JSON array of pod names; `"*"` fences every instance
//! (as CloudNativePG). An absent or empty annotation fences nobody. An annotation that is not
//! a JSON array of strings is [`Fencing::Unreadable`]: the instance manager then neither starts
//! redis-server nor stops a running one, and reports why — upstream read it as "not fenced",
//! which let a fenced primary start.

use std::collections::BTreeMap;

use crate::names::ANN_FENCED_INSTANCES;

/// What the fencing annotation says about one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fencing {
    /// Not listed.
    NotFenced,
    /// Listed by name or by `"*"`.
    Fenced,
    /// The annotation could not be read; the text says why.
    Unreadable(String),
}

/// Reads the annotation of `annotations` for `pod`.
pub fn fencing(annotations: Option<&BTreeMap<String, String>>, pod: &str) -> Fencing {
    let Some(raw) = annotations.and_then(|a| a.get(ANN_FENCED_INSTANCES)) else {
        return Fencing::NotFenced;
    };
    if raw.trim().is_empty() {
        return Fencing::NotFenced;
    }
    match serde_json::from_str::<Vec<String>>(raw) {
        Ok(pods) if pods.iter().any(|p| p == pod || p == "*") => Fencing::Fenced,
        Ok(_) => Fencing::NotFenced,
        Err(e) => Fencing::Unreadable(format!(
            "annotation {ANN_FENCED_INSTANCES} is not a JSON array of pod names ({e}): {raw:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(ANN_FENCED_INSTANCES.to_owned(), v.to_owned())])
    }

    #[test]
    fn the_annotation_fences_by_name_or_wildcard() {
        let table: &[(Option<&str>, Fencing)] = &[
            (None, Fencing::NotFenced),
            (Some(""), Fencing::NotFenced),
            (Some("[]"), Fencing::NotFenced),
            (Some(r#"["demo-1"]"#), Fencing::NotFenced),
            (Some(r#"["demo-0"]"#), Fencing::Fenced),
            (Some(r#"["demo-1","demo-0"]"#), Fencing::Fenced),
            (Some(r#"["*"]"#), Fencing::Fenced),
            (Some(r#"["demo-00"]"#), Fencing::NotFenced),
        ];
        for (value, want) in table {
            let a = value.map(ann);
            assert_eq!(&fencing(a.as_ref(), "demo-0"), want, "{value:?}");
        }
    }

    #[test]
    fn an_unreadable_annotation_is_neither_fenced_nor_free() {
        for bad in ["demo-0", r#"{"demo-0":true}"#, "[1]", r#"["demo-0""#] {
            assert!(
                matches!(fencing(Some(&ann(bad)), "demo-0"), Fencing::Unreadable(_)),
                "{bad}"
            );
        }
    }
}
