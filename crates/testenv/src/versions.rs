//! The pinned upstream versions, read from `upstream/versions.env` (the one place that pins them).

/// Upstream component versions of the local control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// k8s.io/kubernetes tag (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl).
    pub kubernetes: String,
    /// go.etcd.io/etcd/server/v3 tag.
    pub etcd: String,
    /// sigs.k8s.io/kwok tag (kwok, kwokctl).
    pub kwok: String,
}

const VERSIONS_ENV: &str = include_str!("../upstream/versions.env");

impl Versions {
    /// The versions this crate was built with.
    pub fn pinned() -> Self {
        Self::parse(VERSIONS_ENV).expect("upstream/versions.env pins KUBERNETES, ETCD and KWOK")
    }

    fn parse(text: &str) -> Option<Self> {
        let get = |key: &str| {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.starts_with('#'))
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().to_string())
        };
        Some(Self {
            kubernetes: get("KUBERNETES")?,
            etcd: get("ETCD")?,
            kwok: get("KWOK")?,
        })
    }

    /// The Kubernetes minor version, e.g. `36` for `v1.36.5`.
    pub fn kubernetes_minor(&self) -> Option<u32> {
        self.kubernetes
            .strip_prefix("v1.")?
            .split('.')
            .next()?
            .parse()
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_versions_parse_and_match_the_k8s_openapi_feature() {
        let v = Versions::pinned();
        assert!(v.kubernetes.starts_with("v1."), "{v:?}");
        assert!(v.etcd.starts_with("v3.6."), "etcd 3.6.x is required: {v:?}");
        assert!(v.kwok.starts_with("v0."), "{v:?}");
        // The workspace pins k8s-openapi with feature v1_36: keep the server at the same minor.
        assert_eq!(
            v.kubernetes_minor(),
            Some(36),
            "update the k8s-openapi feature with the server"
        );
    }

    #[test]
    fn comments_and_whitespace_are_ignored() {
        let v = Versions::parse("# KUBERNETES=v0\nKUBERNETES= v1.2.3 \nETCD=v3.6.1\nKWOK=v0.1.0\n")
            .unwrap();
        assert_eq!(v.kubernetes, "v1.2.3");
        assert_eq!(v.kubernetes_minor(), Some(2));
        assert!(Versions::parse("ETCD=v3").is_none());
    }
}
