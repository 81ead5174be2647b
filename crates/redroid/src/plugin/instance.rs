//! `kubectl redroid instance …`: read instances, set or clear their temporary overrides, and reach
//! their Android over ADB.
//!
//! Contract: `suspend`/`wake` merge-patch only `status.suspended`/`status.woken` (never the spec,
//! so GitOps tools see no drift); `resume`/`unwake` set them to null. `port-forward` and `adb`
//! go through `pods/portforward` to the pod the instance currently runs (see [`super::portforward`]).
//! `logs` reads only the instance's own pod.

use std::io::Write;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams};

use super::duration::{age_since, parse_duration};
use super::error::PluginError;
use super::kubeconfig::Session;
use super::portforward::{self, InstanceResolver, PodDialer, PodResolver, Retry};
use super::{adb, describe_conditions, write_out};
use crate::crd::{RedroidInstance, TemporaryOverride};
use crate::names;
use kit::plugin::table::{Describe, Table, or_none};

const KIND: &str = "redroidinstance";
/// Field manager of the plugin's status patches.
pub const FIELD_MANAGER: &str = "kubectl-redroid";

/// `instance` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum InstanceCommand {
    /// List instances.
    #[command(visible_aliases = ["ls", "get"])]
    List {
        /// List instances of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Show an instance in detail.
    Describe {
        /// Instance name.
        name: String,
    },
    /// Stop an instance temporarily (sets status.suspended; spec is untouched).
    Suspend {
        /// Instance name.
        name: String,
        #[command(flatten)]
        over: OverrideArgs,
    },
    /// Clear a temporary suspend (status.suspended).
    Resume {
        /// Instance name.
        name: String,
    },
    /// Run an instance temporarily, even if spec.suspend is true (sets status.woken).
    Wake {
        /// Instance name.
        name: String,
        #[command(flatten)]
        over: OverrideArgs,
    },
    /// Clear a temporary wake (status.woken).
    Unwake {
        /// Instance name.
        name: String,
    },
    /// Forward a local port to the instance's ADB port, following it across pod restarts.
    PortForward {
        /// Instance name.
        name: String,
        #[command(flatten)]
        local: LocalArgs,
    },
    /// Run adb against the instance: `adb <name> -- shell getprop`.
    Adb {
        /// Instance name.
        name: String,
        /// Arguments passed to `adb -s 127.0.0.1:<port>`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print the logs of the instance's pod.
    Logs {
        /// Instance name.
        name: String,
        /// Keep streaming new lines.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the last N lines.
        #[arg(long, value_name = "N")]
        tail: Option<i64>,
        /// Container (default: redroid).
        #[arg(short = 'c', long)]
        container: Option<String>,
        /// The previous (crashed) run of the container.
        #[arg(long)]
        previous: bool,
    },
}

/// Flags of `suspend` and `wake`.
#[derive(clap::Args, Debug)]
pub struct OverrideArgs {
    /// How long, e.g. 30m, 2h, 1h30m (default: until cleared).
    #[arg(long = "for", visible_alias = "duration", value_name = "DURATION")]
    pub for_: Option<String>,
    /// Why, for people reading the status.
    #[arg(long)]
    pub reason: Option<String>,
    /// Who, recorded in the override.
    #[arg(long, default_value = "manual")]
    pub actor: String,
}

/// Flags of `port-forward`.
#[derive(clap::Args, Debug)]
pub struct LocalArgs {
    /// Local port (default: the instance's adbPort; 0 picks a free one).
    #[arg(long, value_name = "N")]
    pub local_port: Option<u16>,
    /// Local address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
}

/// Runs one `instance` subcommand.
pub async fn run(
    cmd: InstanceCommand,
    s: &Session,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    match cmd {
        InstanceCommand::List { all_namespaces } => list(s, all_namespaces, out).await,
        InstanceCommand::Describe { name } => describe(s, &name, out).await,
        InstanceCommand::Suspend { name, over } => {
            set_override(s, &name, "suspended", Some(&over), out).await
        }
        InstanceCommand::Resume { name } => set_override(s, &name, "suspended", None, out).await,
        InstanceCommand::Wake { name, over } => {
            set_override(s, &name, "woken", Some(&over), out).await
        }
        InstanceCommand::Unwake { name } => set_override(s, &name, "woken", None, out).await,
        InstanceCommand::PortForward { name, local } => port_forward(s, &name, &local, out).await,
        InstanceCommand::Adb { name, args } => adb::run(s, &name, &args).await,
        InstanceCommand::Logs {
            name,
            follow,
            tail,
            container,
            previous,
        } => {
            let params = LogParams {
                follow,
                tail_lines: tail,
                container,
                previous,
                ..Default::default()
            };
            logs(s, &name, params, out).await
        }
    }
}

/// Fetches an instance, with a not-found error naming it.
pub async fn get(s: &Session, name: &str) -> Result<RedroidInstance, PluginError> {
    super::kubeconfig::get(s, KIND, name).await
}

async fn list(s: &Session, all: bool, out: &mut impl Write) -> Result<(), PluginError> {
    let items: Vec<RedroidInstance> =
        super::kubeconfig::list_sorted(s, "redroidinstances", all).await?;
    write_out(out, &list_table(&items, all, &s.namespace))
}

/// The `instance list` output for these instances.
pub fn list_table(items: &[RedroidInstance], all: bool, namespace: &str) -> String {
    if items.is_empty() {
        return kit::plugin::table::no_resources(all, namespace);
    }
    let mut header = vec![
        "NAME",
        "INDEX",
        "PHASE",
        "ADB ADDRESS",
        "SUSPEND",
        "SUSPENDED",
        "WOKEN",
        "AGE",
    ];
    if all {
        header.insert(0, "NAMESPACE");
    }
    let mut table = Table::new(header);
    for i in items {
        let status = i.status.clone().unwrap_or_default();
        let mut row = vec![
            i.metadata.name.clone().unwrap_or_default(),
            i.spec.index.to_string(),
            status
                .phase
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "<unknown>".into()),
            or_none(status.adb_address.as_deref()),
            i.spec.suspend.to_string(),
            override_cell(status.suspended.as_ref()),
            override_cell(status.woken.as_ref()),
            age_since(i.metadata.creation_timestamp.as_ref()),
        ];
        if all {
            row.insert(0, i.metadata.namespace.clone().unwrap_or_default());
        }
        table.row(row);
    }
    table.render()
}

fn override_cell(o: Option<&TemporaryOverride>) -> String {
    match o {
        None => "<none>".into(),
        Some(o) => o
            .actor
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "yes".into()),
    }
}

async fn describe(s: &Session, name: &str, out: &mut impl Write) -> Result<(), PluginError> {
    let instance = get(s, name).await?;
    write_out(out, &describe_text(&instance))
}

/// The `instance describe` output.
pub fn describe_text(i: &RedroidInstance) -> String {
    let status = i.status.clone().unwrap_or_default();
    let mut d = Describe::new();
    d.field("Name", i.metadata.name.clone().unwrap_or_default())
        .field(
            "Namespace",
            i.metadata.namespace.clone().unwrap_or_default(),
        )
        .field("Age", age_since(i.metadata.creation_timestamp.as_ref()))
        .field("Index", i.spec.index.to_string())
        .field("Image", i.spec.image.clone())
        .field("Base Mode", i.spec.base_mode.to_string())
        .field("GPU Mode", i.spec.gpu_mode.as_str())
        .field("Spec Suspend", i.spec.suspend.to_string())
        .field(
            "Phase",
            status.phase.map(|p| p.as_str()).unwrap_or("<unknown>"),
        )
        .field("Pod", or_none(status.pod_name.as_deref()))
        .field("ADB Address", or_none(status.adb_address.as_deref()));
    for (label, o) in [("Suspended", &status.suspended), ("Woken", &status.woken)] {
        describe_override(&mut d, label, o.as_ref());
    }
    describe_conditions(&mut d, &status.conditions);
    d.render()
}

fn describe_override(d: &mut Describe, label: &str, o: Option<&TemporaryOverride>) {
    let Some(o) = o else {
        d.field(label, "<none>");
        return;
    };
    d.field(label, "");
    d.nested("Actor", or_none(o.actor.as_deref()));
    d.nested("Reason", or_none(o.reason.as_deref()));
    d.nested(
        "Until",
        o.until
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_else(|| "<until cleared>".into()),
    );
}

/// The status merge patch setting (`over` given) or clearing `field` (`suspended`/`woken`).
pub fn override_patch(
    field: &str,
    over: Option<&OverrideArgs>,
    now: jiff::Timestamp,
) -> Result<serde_json::Value, PluginError> {
    let Some(over) = over else {
        return Ok(serde_json::json!({ "status": { field: null } }));
    };
    let until = match over.for_.as_deref() {
        None => None,
        Some(text) => {
            let d = parse_duration(text)?;
            let too_large = || PluginError::InvalidDuration {
                input: text.to_string(),
                reason: "the duration is too large",
            };
            let span = jiff::SignedDuration::try_from(d).map_err(|_| too_large())?;
            Some(Time(now.checked_add(span).map_err(|_| too_large())?))
        }
    };
    let value = TemporaryOverride {
        reason: over.reason.clone(),
        until,
        actor: Some(over.actor.clone()),
    };
    Ok(serde_json::json!({ "status": { field: value } }))
}

async fn set_override(
    s: &Session,
    name: &str,
    field: &str,
    over: Option<&OverrideArgs>,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let patch = override_patch(field, over, jiff::Timestamp::now())?;
    let api: Api<RedroidInstance> = Api::namespaced(s.client.clone(), &s.namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch_status(name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| PluginError::from_kube(KIND, name, &s.namespace, "patch status of", e))?;
    let what = match (field, over) {
        ("suspended", Some(_)) => "suspended",
        ("suspended", None) => "resumed",
        (_, Some(_)) => "woken",
        _ => "unwoken",
    };
    let until = patch["status"][field]["until"]
        .as_str()
        .map(|u| format!(" until {u}"))
        .unwrap_or_default();
    write_out(out, &format!("{KIND}/{name} {what}{until}\n"))
}

async fn port_forward(
    s: &Session,
    name: &str,
    local: &LocalArgs,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let resolver = Arc::new(InstanceResolver::new(s, name));
    let first = resolver.resolve().await?;
    let listener =
        portforward::listen(&local.address, local.local_port.unwrap_or(first.port)).await?;
    let bound = listener
        .local_addr()
        .map_err(|e| PluginError::io("read the local address", e))?;
    write_out(
        out,
        &format!(
            "Forwarding from {bound} -> {} (instance {name}, now pod {})\n",
            first.port, first.pod
        ),
    )?;
    out.flush()
        .map_err(|e| PluginError::io("write output", e))?;
    let serve = portforward::serve(
        listener,
        resolver,
        Arc::new(PodDialer::new(s)),
        Retry::default(),
    );
    tokio::select! {
        r = serve => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

async fn logs(
    s: &Session,
    name: &str,
    mut params: LogParams,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let instance = get(s, name).await?;
    let pods_api: Api<Pod> = Api::namespaced(s.client.clone(), &s.namespace);
    let lp = ListParams::default().labels(&super::logs::instance_pod_selector(name));
    let pods = pods_api
        .list(&lp)
        .await
        .map_err(|e| PluginError::Api {
            action: format!("list pods of {KIND} {name:?}"),
            source: e,
        })?
        .items;
    let status = instance.status.unwrap_or_default();
    let Some(pod) = super::logs::pick_instance_pod(&pods, status.pod_name.as_deref()) else {
        let phase = status.phase.map(|p| p.as_str()).unwrap_or("unknown");
        return Err(PluginError::NoPod {
            name: name.into(),
            namespace: s.namespace.clone(),
            detail: format!("phase: {phase}"),
        });
    };
    if params.container.is_none()
        && super::logs::containers_in_order(pod)
            .iter()
            .any(|c| c == names::REDROID_CONTAINER)
    {
        params.container = Some(names::REDROID_CONTAINER.into());
    }
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    super::logs::copy_logs(&pods_api, &pod_name, &params, out).await
}
