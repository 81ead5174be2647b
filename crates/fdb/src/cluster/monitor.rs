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
//!   substitutions as upstream's operator does (`GetStartCommandWithSubstitutions`):
//!   `<BINARY_DIR>/fdbserver <arg> <arg> …`, arguments in order. The monitor chooses the
//!   binary itself (the configuration has no binary path: `fdb-kubernetes-monitor`'s
//!   `BinaryPath` is `json:"-"`): `/usr/bin/fdbserver` when its image's version is protocol
//!   compatible with the configuration's, else `/var/fdb/shared-binaries/bin/<version>/fdbserver`,
//!   and publishes that directory as `BINARY_DIR` among its substitutions. UpdateStatus compares
//!   each process's command line with the one rendered from the *desired* configuration
//!   (IncorrectCommandLine); a pod whose monitor published no `BINARY_DIR` (or another
//!   substitution the arguments need) is not judged. A loaded configuration does not restart
//!   fdbserver: only a `kill` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// Pod annotation written by the monitor: the substitutions (environment) it uses.
pub const LAUNCHER_ENVIRONMENT_KEY: &str = "foundationdb.org/launcher-environment";
/// Pod annotation written by the monitor: the configuration it has loaded.
pub const LAUNCHER_CONFIGURATION_KEY: &str = "foundationdb.org/launcher-current-configuration";
/// The substitution the monitor publishes with the directory of the fdbserver it runs.
pub const BINARY_DIR_KEY: &str = "BINARY_DIR";
/// The unified image's own fdbserver (the monitor's `--fdbserver-path` default).
pub const IMAGE_FDBSERVER: &str = "/usr/bin/fdbserver";
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
            // The monitor's rule: a multiplier of 0 (or none) leaves the number as it is.
            let offset = arg.get("offset").and_then(Value::as_i64).unwrap_or(0);
            let multiplier = match arg.get("multiplier").and_then(Value::as_i64) {
                None | Some(0) => 1,
                Some(m) => m,
            };
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
/// `env`: `<BINARY_DIR>/fdbserver` and the rendered arguments; `None` when `BINARY_DIR` or a
/// substitution an argument needs is missing.
pub fn command_line(conf: &Value, env: &BTreeMap<String, String>, process: u32) -> Option<String> {
    let binary = format!("{}/fdbserver", env.get(BINARY_DIR_KEY)?);
    let mut words = vec![binary];
    for arg in conf.get("arguments")?.as_array()? {
        words.push(argument(arg, env, process)?);
    }
    Some(words.join(" "))
}

/// The environment variables `conf`'s arguments read (what the monitor publishes, besides
/// `BINARY_DIR`).
pub fn referenced_variables(conf: &Value) -> Vec<String> {
    fn walk(arg: &Value, out: &mut Vec<String>) {
        if let Some(source) = arg.get("source").and_then(Value::as_str) {
            out.push(source.to_owned());
        }
        for child in arg
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(child, out);
        }
    }
    let mut out = Vec::new();
    for arg in conf
        .get("arguments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        walk(arg, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// The configuration says fdbserver should run (`runServers` unset or true, as the monitor
/// reads it).
pub fn runs_servers(conf: &Value) -> bool {
    conf.get("runServers").and_then(Value::as_bool) != Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("FDB_PUBLIC_IP".to_owned(), "127.1.0.7".to_owned()),
            ("FDB_INSTANCE_ID".to_owned(), "storage-3".to_owned()),
            ("BINARY_DIR".to_owned(), "/usr/bin".to_owned()),
        ])
    }

    #[test]
    fn arguments_render_with_the_pods_substitutions() {
        // A binary path in the configuration is not the monitor's: it is ignored.
        let conf = json!({"binaryPath": "/elsewhere/fdbserver", "arguments": [
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
                "/usr/bin/fdbserver --class=storage --public_address=[127.1.0.7]:4501 --locality_instance_id=storage-3"
            )
        );
        assert_eq!(
            referenced_variables(&conf),
            vec!["FDB_INSTANCE_ID".to_owned(), "FDB_PUBLIC_IP".to_owned()]
        );
        let missing = json!({"arguments": [{"type": "Environment", "source": "FDB_ZONE_ID"}]});
        assert_eq!(command_line(&missing, &env(), 1), None);
        let mut no_dir = env();
        no_dir.remove("BINARY_DIR");
        assert_eq!(command_line(&conf, &no_dir, 1), None, "not judged");
        let zero =
            json!({"arguments": [{"type": "ProcessNumber", "offset": 4499, "multiplier": 0}]});
        assert_eq!(
            command_line(&zero, &env(), 2).as_deref(),
            Some("/usr/bin/fdbserver 4501"),
            "multiplier 0 counts as 1, as the monitor reads it"
        );
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
