//! ServiceAccount tokens for projected volumes, from the TokenRequest API, bound to the pod
//! (so they stop working once the pod is gone), as the kubelet's token manager gets them.
//!
//! Contract: one token per (audience, expirationSeconds) of the pod; a token is requested
//! again once 80 % of its lifetime has passed ([`Cache::next_refresh`] says when), and the
//! volumes holding it are rewritten in place.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount, ServiceAccountTokenProjection};
use kube::api::{Api, PostParams};

use super::projection::Tokens;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    audience: Option<String>,
    seconds: i64,
}

impl Key {
    fn of(p: &ServiceAccountTokenProjection) -> Self {
        Self {
            audience: p.audience.clone().filter(|a| !a.is_empty()),
            // The API's default and minimum.
            seconds: p.expiration_seconds.unwrap_or(3600).max(600),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    token: String,
    refresh_at: Instant,
}

/// The tokens of one pod.
#[derive(Debug, Default)]
pub struct Cache {
    entries: HashMap<Key, Entry>,
}

impl Cache {
    /// Requests every token that is missing or due; true when any token changed.
    pub async fn refresh(
        &mut self,
        client: &kube::Client,
        pod: &Pod,
        projections: &[ServiceAccountTokenProjection],
    ) -> Result<bool, String> {
        let mut changed = false;
        let now = Instant::now();
        for p in projections {
            let key = Key::of(p);
            if self.entries.get(&key).is_some_and(|e| e.refresh_at > now) {
                continue;
            }
            let token = request(client, pod, &key).await?;
            let refresh_at = now + Duration::from_secs(key.seconds as u64 * 8 / 10);
            self.entries.insert(key, Entry { token, refresh_at });
            changed = true;
        }
        Ok(changed)
    }

    /// When the next token is due for a refresh.
    pub fn next_refresh(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.refresh_at).min()
    }
}

impl Tokens for Cache {
    fn token(&self, projection: &ServiceAccountTokenProjection) -> Option<String> {
        self.entries
            .get(&Key::of(projection))
            .map(|e| e.token.clone())
    }
}

async fn request(client: &kube::Client, pod: &Pod, key: &Key) -> Result<String, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: key.audience.clone().map(|a| vec![a]),
            expiration_seconds: Some(key.seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let issued = api
        .create_token_request(&sa, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("failed to fetch token for serviceaccount {ns}/{sa}: {e}"))?;
    issued
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("the TokenRequest for {ns}/{sa} returned no token"))
}
