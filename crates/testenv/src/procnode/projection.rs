//! The files of Secret, ConfigMap, downwardAPI and projected volumes, computed from the
//! objects they name, as the kubelet's volume plugins lay them out.
//!
//! Contract:
//! - [`render`] returns the payload of one volume (path → contents and mode), `Ok(None)` for
//!   volume kinds that are plain directories (emptyDir, PVC, hostPath), or the kubelet's
//!   error text when a non-optional source is missing (the pod then waits in
//!   `ContainerCreating` and is retried).
//! - `items` pick and rename keys; without them every key is a file. Modes: the item's `mode`,
//!   else the volume's `defaultMode`, else 0644.
//! - ServiceAccount tokens come from [`Tokens`]; the caller requests and refreshes them.
//! - Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, KeyToPath, ServiceAccountTokenProjection, Volume,
};

use super::atomic::File;
use super::envvars::{self, Objects, PodContext};

/// The kubelet's default file mode for these volumes.
pub const DEFAULT_MODE: u32 = 0o644;

/// Issued ServiceAccount tokens, by the projection asking for them.
pub trait Tokens {
    /// The current token for `projection` (None when it could not be issued).
    fn token(&self, projection: &ServiceAccountTokenProjection) -> Option<String>;
}

/// Every ServiceAccount token projection of the pod's volumes.
pub fn token_projections(volumes: &[Volume]) -> Vec<ServiceAccountTokenProjection> {
    volumes
        .iter()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.clone())
        .collect()
}

/// The payload of `volume`, if it is an atomically written kind.
pub fn render(
    volume: &Volume,
    ctx: &PodContext<'_>,
    objects: &dyn Objects,
    tokens: &dyn Tokens,
) -> Result<Option<BTreeMap<String, File>>, String> {
    let mode = |m: Option<i32>, default: Option<i32>| {
        m.or(default)
            .map(|m| m as u32 & 0o7777)
            .unwrap_or(DEFAULT_MODE)
    };
    let mut out = BTreeMap::new();
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        secret_files(
            &mut out,
            objects,
            &name,
            s.items.as_deref(),
            s.optional,
            s.default_mode,
            ctx,
        )?;
    } else if let Some(c) = &volume.config_map {
        config_map_files(
            &mut out,
            objects,
            &c.name,
            c.items.as_deref(),
            c.optional,
            c.default_mode,
            ctx,
        )?;
    } else if let Some(d) = &volume.downward_api {
        downward_files(
            &mut out,
            d.items.as_deref().unwrap_or_default(),
            d.default_mode,
            ctx,
        )?;
    } else if let Some(p) = &volume.projected {
        for source in p.sources.iter().flatten() {
            if let Some(s) = &source.secret {
                secret_files(
                    &mut out,
                    objects,
                    &s.name,
                    s.items.as_deref(),
                    s.optional,
                    p.default_mode,
                    ctx,
                )?;
            }
            if let Some(c) = &source.config_map {
                config_map_files(
                    &mut out,
                    objects,
                    &c.name,
                    c.items.as_deref(),
                    c.optional,
                    p.default_mode,
                    ctx,
                )?;
            }
            if let Some(d) = &source.downward_api {
                downward_files(
                    &mut out,
                    d.items.as_deref().unwrap_or_default(),
                    p.default_mode,
                    ctx,
                )?;
            }
            if let Some(t) = &source.service_account_token {
                let token = tokens.token(t).ok_or_else(|| {
                    format!(
                        "failed to fetch token for the ServiceAccount of pod {}",
                        pod_name(ctx)
                    )
                })?;
                out.insert(
                    t.path.clone(),
                    File {
                        data: token.into_bytes(),
                        mode: mode(None, p.default_mode),
                    },
                );
            }
            if source.cluster_trust_bundle.is_some() || source.pod_certificate.is_some() {
                return Err("clusterTrustBundle and podCertificate projections are not supported on process-backed nodes".into());
            }
        }
    } else {
        return Ok(None);
    }
    Ok(Some(out))
}

fn pod_name(ctx: &PodContext<'_>) -> String {
    format!(
        "{}/{}",
        ctx.pod.metadata.namespace.as_deref().unwrap_or_default(),
        ctx.pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn pick(
    out: &mut BTreeMap<String, File>,
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
    default_mode: Option<i32>,
    missing_key: impl Fn(&str) -> String,
) -> Result<(), String> {
    let mode = |m: Option<i32>| {
        m.or(default_mode)
            .map(|m| m as u32 & 0o7777)
            .unwrap_or(DEFAULT_MODE)
    };
    match items {
        None => {
            for (k, v) in data {
                out.insert(
                    k,
                    File {
                        data: v,
                        mode: mode(None),
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => {
                        out.insert(
                            item.path.clone(),
                            File {
                                data: v.clone(),
                                mode: mode(item.mode),
                            },
                        );
                    }
                    None if optional => {}
                    None => return Err(missing_key(&item.key)),
                }
            }
        }
    }
    Ok(())
}

fn secret_files(
    out: &mut BTreeMap<String, File>,
    objects: &dyn Objects,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: Option<bool>,
    default_mode: Option<i32>,
    ctx: &PodContext<'_>,
) -> Result<(), String> {
    let optional = optional == Some(true);
    let Some(secret) = objects.secret(name) else {
        return if optional {
            Ok(())
        } else {
            Err(format!("secret \"{name}\" not found"))
        };
    };
    let data = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let ns = ctx.pod.metadata.namespace.clone().unwrap_or_default();
    pick(out, data, items, optional, default_mode, |k| {
        format!("couldn't find key {k} in Secret {ns}/{name}")
    })
}

fn config_map_files(
    out: &mut BTreeMap<String, File>,
    objects: &dyn Objects,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: Option<bool>,
    default_mode: Option<i32>,
    ctx: &PodContext<'_>,
) -> Result<(), String> {
    let optional = optional == Some(true);
    let Some(cm) = objects.config_map(name) else {
        return if optional {
            Ok(())
        } else {
            Err(format!("configmap \"{name}\" not found"))
        };
    };
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    data.extend(
        cm.binary_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone())),
    );
    let ns = ctx.pod.metadata.namespace.clone().unwrap_or_default();
    pick(out, data, items, optional, default_mode, |k| {
        format!("couldn't find key {k} in ConfigMap {ns}/{name}")
    })
}

fn downward_files(
    out: &mut BTreeMap<String, File>,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    ctx: &PodContext<'_>,
) -> Result<(), String> {
    let first = ctx
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .cloned()
        .unwrap_or_default();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            envvars::field_value(f, ctx)?
        } else if let Some(r) = &item.resource_field_ref {
            envvars::resource_value(r, &first, ctx)?
        } else {
            String::new()
        };
        let mode = item
            .mode
            .or(default_mode)
            .map(|m| m as u32 & 0o7777)
            .unwrap_or(DEFAULT_MODE);
        out.insert(
            item.path.clone(),
            File {
                data: value.into_bytes(),
                mode,
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
    use serde_json::json;

    use super::*;

    struct Fake(
        HashMap<String, Arc<ConfigMap>>,
        HashMap<String, Arc<Secret>>,
    );
    impl Objects for Fake {
        fn config_map(&self, name: &str) -> Option<Arc<ConfigMap>> {
            self.0.get(name).cloned()
        }
        fn secret(&self, name: &str) -> Option<Arc<Secret>> {
            self.1.get(name).cloned()
        }
    }
    struct FixedToken;
    impl Tokens for FixedToken {
        fn token(&self, p: &ServiceAccountTokenProjection) -> Option<String> {
            Some(format!(
                "token-for-{}",
                p.audience.as_deref().unwrap_or("api")
            ))
        }
    }

    fn objects() -> Fake {
        let ca: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA"}}),
        )
        .expect("cm");
        let s: Secret = serde_json::from_value(
            json!({"metadata": {"name": "tls"}, "data": {"tls.crt": "Q1JU", "tls.key": "S0VZ"}}),
        )
        .expect("secret");
        Fake(
            HashMap::from([("kube-root-ca.crt".into(), Arc::new(ca))]),
            HashMap::from([("tls".into(), Arc::new(s))]),
        )
    }

    type Files = BTreeMap<String, (String, u32)>;

    fn render_json(volume: serde_json::Value) -> Result<Option<Files>, String> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"b": "2", "a": "1"}},
            "spec": {"containers": [{"name": "c"}]},
        }))
        .expect("pod");
        let ctx = PodContext {
            pod: &pod,
            pod_ip: "127.2.0.2",
            host_ip: "127.2.255.254",
            node_cpu: 2.0,
            node_memory: 1.0,
        };
        let volume: Volume = serde_json::from_value(volume).expect("volume");
        render(&volume, &ctx, &objects(), &FixedToken).map(|o| {
            o.map(|m| {
                m.into_iter()
                    .map(|(k, f)| (k, (String::from_utf8(f.data).expect("utf8"), f.mode)))
                    .collect()
            })
        })
    }

    #[test]
    fn the_service_account_volume_is_laid_out_like_the_kubelets() {
        // What the ServiceAccount admission plugin injects as kube-api-access-*.
        let files = render_json(json!({"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}}))
        .expect("renders")
        .expect("a payload");
        assert_eq!(files["token"], ("token-for-api".into(), 0o644));
        assert_eq!(files["ca.crt"], ("CA".into(), 0o644));
        assert_eq!(files["namespace"], ("ns".into(), 0o644));
    }

    #[test]
    fn items_modes_and_optional_sources() {
        let f = render_json(json!({"name": "v", "secret": {"secretName": "tls", "defaultMode": 0o400,
            "items": [{"key": "tls.crt", "path": "certs/server.crt", "mode": 0o444}, {"key": "tls.key", "path": "server.key"}]}}))
            .expect("renders").expect("payload");
        assert_eq!(f["certs/server.crt"], ("CRT".into(), 0o444));
        assert_eq!(f["server.key"], ("KEY".into(), 0o400));

        let f = render_json(json!({"name": "v", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}))
            .expect("renders").expect("payload");
        assert_eq!(f["labels"].0, "a=\"1\"\nb=\"2\"");

        let missing = render_json(json!({"name": "v", "secret": {"secretName": "nope"}}));
        assert_eq!(missing, Err("secret \"nope\" not found".into()));
        let optional =
            render_json(json!({"name": "v", "secret": {"secretName": "nope", "optional": true}}));
        assert_eq!(optional, Ok(Some(BTreeMap::new())));
        let key = render_json(
            json!({"name": "v", "configMap": {"name": "kube-root-ca.crt", "items": [{"key": "x", "path": "x"}]}}),
        );
        assert_eq!(
            key,
            Err("couldn't find key x in ConfigMap ns/kube-root-ca.crt".into())
        );
        assert_eq!(render_json(json!({"name": "v", "emptyDir": {}})), Ok(None));
    }
}
