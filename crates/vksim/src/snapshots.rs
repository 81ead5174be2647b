//! The simulated VM snapshots in the registry: repository naming (`[<prefix>/]<vm>`), push,
//! pull and delete of `:hibernate` / `:latest`, counted. Push, pull and probe go through the
//! test registry's helpers (`testenv::registry`); delete resolves the tag to its digest and
//! deletes by digest. Credentials may ride in the URL (`http://user:pass@host:port`).

use std::sync::Arc;

use crate::error::SimError;
use crate::stats::{Counter, Counters};

/// Manifest media types accepted when probing a tag for its digest.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.oci.image.index.v1+json";

/// The registry as the simulated nodes see it.
#[derive(Clone)]
pub(crate) struct Snapshots {
    base: String,
    basic: Option<(String, String)>,
    prefix: Option<String>,
    http: reqwest::Client,
    counters: Arc<Counters>,
}

impl Snapshots {
    /// Parses `url` (`http[s]://[user:pass@]host[:port][/]`).
    pub(crate) fn new(
        url: &str,
        prefix: Option<String>,
        counters: Arc<Counters>,
    ) -> Result<Self, SimError> {
        let mut parsed = reqwest::Url::parse(url)
            .map_err(|e| SimError::Config(format!("registry url {url:?}: {e}")))?;
        let basic = (!parsed.username().is_empty()).then(|| {
            let password = parsed.password().unwrap_or_default().to_owned();
            (parsed.username().to_owned(), password)
        });
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        let prefix = prefix
            .map(|p| p.trim_matches('/').to_owned())
            .filter(|p| !p.is_empty());
        Ok(Snapshots {
            base: parsed.as_str().trim_end_matches('/').to_owned(),
            basic,
            prefix,
            http: reqwest::Client::new(),
            counters,
        })
    }

    /// The repository of `vm`.
    pub(crate) fn repo(&self, vm: &str) -> String {
        match &self.prefix {
            Some(p) => format!("{p}/{vm}"),
            None => vm.to_owned(),
        }
    }

    fn basic(&self) -> Option<(&str, &str)> {
        self.basic.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// Pushes `payload` as `<repo>:<tag>`.
    pub(crate) async fn push(
        &self,
        vm: &str,
        tag: &'static str,
        payload: &[u8],
    ) -> Result<(), SimError> {
        let repo = self.repo(vm);
        testenv::registry::push_tag(&self.base, self.basic(), &repo, tag, payload)
            .await
            .map_err(|source| registry_error("push", &repo, tag, source))?;
        self.counters.bump(Counter::Pushed);
        Ok(())
    }

    /// Pulls `<repo>:<tag>`; `None` when the tag does not exist.
    pub(crate) async fn pull(
        &self,
        vm: &str,
        tag: &'static str,
    ) -> Result<Option<Vec<u8>>, SimError> {
        let repo = self.repo(vm);
        self.counters.bump(Counter::Pulled);
        testenv::registry::pull_tag(&self.base, self.basic(), &repo, tag)
            .await
            .map_err(|source| registry_error("pull", &repo, tag, source))
    }

    /// Makes `<repo>:<tag>` absent: `HEAD` the tag for its digest, then `DELETE` the manifest
    /// by digest (the form every OCI registry supports; distribution 2.x refuses tags here).
    pub(crate) async fn delete(&self, vm: &str, tag: &'static str) -> Result<(), SimError> {
        let repo = self.repo(vm);
        let fail = |e: anyhow::Error| registry_error("delete", &repo, tag, e);
        let manifests = format!("{}/v2/{repo}/manifests", self.base);
        let head = self
            .request(reqwest::Method::HEAD, &format!("{manifests}/{tag}"))
            .header(reqwest::header::ACCEPT, MANIFEST_TYPES)
            .send()
            .await
            .map_err(|e| fail(e.into()))?;
        let digest = match head.status() {
            reqwest::StatusCode::NOT_FOUND => return Ok(()),
            s if s.is_success() => head.headers().get("docker-content-digest").cloned(),
            s => return Err(fail(anyhow::anyhow!("HEAD {manifests}/{tag}: {s}"))),
        };
        let digest = digest
            .and_then(|d| d.to_str().ok().map(str::to_owned))
            .ok_or_else(|| fail(anyhow::anyhow!("HEAD {manifests}/{tag}: no digest")))?;
        let url = format!("{manifests}/{digest}");
        let resp = self.request(reqwest::Method::DELETE, &url).send().await;
        let status = resp.map_err(|e| fail(e.into()))?.status();
        if !status.is_success() && status != reqwest::StatusCode::NOT_FOUND {
            return Err(fail(anyhow::anyhow!("DELETE {url}: {status}")));
        }
        self.counters.bump(Counter::TagDeleted);
        Ok(())
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match self.basic() {
            Some((user, password)) => req.basic_auth(user, Some(password)),
            None => req,
        }
    }
}

fn registry_error(op: &'static str, repo: &str, tag: &'static str, e: anyhow::Error) -> SimError {
    SimError::Registry {
        op,
        repo: repo.to_owned(),
        tag,
        source: e,
    }
}

/// Bytes standing in for a VM snapshot: they name the VM, the tag and a sequence number, so a
/// test can tell one round's snapshot from the next.
pub(crate) fn payload(vm: &str, tag: &str, sequence: u64) -> Vec<u8> {
    format!("vksim snapshot vm={vm} tag={tag} seq={sequence}\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_prefixes_and_credentials() {
        let c = Arc::new(Counters::default());
        let s = Snapshots::new(
            "http://u:p@127.0.0.1:5000/",
            Some("/cocoon/".into()),
            c.clone(),
        )
        .expect("valid url");
        assert_eq!(s.base, "http://127.0.0.1:5000");
        assert_eq!(s.basic(), Some(("u", "p")));
        assert_eq!(s.repo("vk-a-b-0"), "cocoon/vk-a-b-0");
        let plain = Snapshots::new("http://127.0.0.1:5000", Some(String::new()), c.clone())
            .expect("valid url");
        assert_eq!(plain.basic(), None);
        assert_eq!(plain.repo("vk-a-b-0"), "vk-a-b-0");
        assert!(Snapshots::new("not a url", None, c).is_err());
        assert_eq!(
            payload("vm", "hibernate", 7),
            b"vksim snapshot vm=vm tag=hibernate seq=7\n"
        );
    }
}
