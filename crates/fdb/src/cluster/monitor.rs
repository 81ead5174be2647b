//! The unified image's annotation protocol (reference §8, §9), as pure functions.
//!
//! Contract:
//! - `fdb-kubernetes-monitor` in each pod reads its monitor configuration
//!   (`fdbmonitor-conf-<class>-json` from the config map) and publishes two annotations on its
//!   own pod: [`LAUNCHER_ENVIRONMENT_KEY`] (the substitutions it uses, JSON map) and
//!   [`LAUNCHER_CONFIGURATION_KEY`] (the configuration it has loaded, JSON). The operator
//!   never talks to the pod; it reads these annotations and pokes the monitor by setting
//!   [`OUTDATED_CONFIG_MAP_KEY`] (which makes the kubelet resync the mounted config map).
//! - [`configuration_current`]: the pod's loaded configuration deep-equals the desired one.
//! - [`command_line`] renders a configuration's fdbserver command line with a pod's
//!   substitutions: `<binaryPath> <arg> <arg> …`, arguments in order. UpdateStatus compares
//!   each process's command line with the one rendered from the *desired* configuration
//!   (IncorrectCommandLine); the fake database renders the pod's *loaded* configuration when a
//!   process starts. A loaded configuration does not restart fdbserver: only a `kill` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// Pod annotation written by the monitor: the substitutions (environment) it uses.
pub const LAUNCHER_ENVIRONMENT_KEY: &str = "foundationdb.org/launcher-environment";
/// Pod annotation written by the monitor: the configuration it has loaded.
pub const LAUNCHER_CONFIGURATION_KEY: &str = "foundationdb.org/launcher-current-configuration";
/// Pod annotation written by the operator: when it saw the pod's config outdated (Unix s).
pub const OUTDATED_CONFIG_MAP_KEY: &str = "foundationdb.org/outdated-config-map-seen";

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    pod.metadata.annotations.as_ref()?.get(key)
}

/// The substitutions the pod's monitor published, if it did.
pub fn substitutions(pod: &Pod) -> Option<BTreeMap<String, String>> {
    serde_json::from_str(annotation(pod, LAUNCHER_ENVIRONMENT_KEY)?).ok()
}

/// The configuration the pod's monitor has loaded, if it said.
pub fn loaded_configuration(pod: &Pod) -> Option<Value> {
    serde_json::from_str(annotation(pod, LAUNCHER_CONFIGURATION_KEY)?).ok()
}

/// The pod's monitor has loaded exactly `desired` (JSON text from the config map).
pub fn configuration_current(pod: &Pod, desired: &str) -> bool {
    let Ok(desired) = serde_json::from_str::<Value>(desired) else {
        return false;
    };
    loaded_configuration(pod).is_some_and(|loaded| loaded == desired)
}

fn argument(arg: &Value, env: &BTreeMap<String, String>, process: u32) -> Option<String> {
    match arg.get("type").and_then(Value::as_str).unwrap_or("Literal") {
        "Literal" => Some(arg.get("value")?.as_str()?.to_owned()),
        "Environment" => env.get(arg.get("source")?.as_str()?).cloned(),
        "ProcessNumber" => {
            let offset = arg.get("offset").and_then(Value::as_i64).unwrap_or(0);
            let multiplier = arg.get("multiplier").and_then(Value::as_i64).unwrap_or(1);
            Some((offset + multiplier * i64::from(process)).to_string())
        }
        "Concatenate" => arg
            .get("values")?
            .as_array()?
            .iter()
            .map(|v| argument(v, env, process))
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.concat()),
        _ => None,
    }
}

/// fdbserver's command line for process `process` (1-based) of a pod running `conf` with
/// `env`; `None` when an argument cannot be rendered (a substitution is missing).
pub fn command_line(conf: &Value, env: &BTreeMap<String, String>, process: u32) -> Option<String> {
    let binary = conf
        .get("binaryPath")
        .and_then(Value::as_str)
        .unwrap_or("fdbserver");
    let mut words = vec![binary.to_owned()];
    for arg in conf.get("arguments")?.as_array()? {
        words.push(argument(arg, env, process)?);
    }
    Some(words.join(" "))
}

/// The configuration says fdbserver should run (a connection string exists).
pub fn runs_servers(conf: &Value) -> bool {
    conf.get("runServers").and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("FDB_PUBLIC_IP".to_owned(), "127.1.0.7".to_owned()),
            ("FDB_INSTANCE_ID".to_owned(), "storage-3".to_owned()),
        ])
    }

    #[test]
    fn arguments_render_with_the_pods_substitutions() {
        let conf = json!({"binaryPath": "fdbserver", "arguments": [
            {"value": "--class=storage"},
            {"type": "Concatenate", "values": [
                {"value": "--public_address=["}, {"type": "Environment", "source": "FDB_PUBLIC_IP"},
                {"value": "]:"}, {"type": "ProcessNumber", "offset": 4499, "multiplier": 2}]},
            {"type": "Concatenate", "values": [
                {"value": "--locality_instance_id="}, {"type": "Environment", "source": "FDB_INSTANCE_ID"}]},
        ]});
        assert_eq!(
            command_line(&conf, &env(), 1).as_deref(),
            Some(
                "fdbserver --class=storage --public_address=[127.1.0.7]:4501 --locality_instance_id=storage-3"
            )
        );
        let missing = json!({"arguments": [{"type": "Environment", "source": "FDB_ZONE_ID"}]});
        assert_eq!(command_line(&missing, &env(), 1), None);
    }

    #[test]
    fn a_loaded_configuration_is_current_only_when_it_deep_equals_the_desired_one() {
        let mut pod = Pod::default();
        assert!(!configuration_current(&pod, r#"{"a":1}"#));
        pod.metadata.annotations = Some(BTreeMap::from([(
            LAUNCHER_CONFIGURATION_KEY.to_owned(),
            r#"{ "b": [1, 2], "a": 1 }"#.to_owned(),
        )]));
        assert!(configuration_current(&pod, r#"{"a":1,"b":[1,2]}"#));
        assert!(!configuration_current(&pod, r#"{"a":1,"b":[2,1]}"#));
    }
}
