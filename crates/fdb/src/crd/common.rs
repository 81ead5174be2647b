//! Types shared by the three kinds: container overrides and image configs, the blob-store
//! configuration of backups and restores, custom parameters.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{FdbVersion, is_false};

/// Customization of one container (`foundationdb` or `foundationdb-kubernetes-sidecar`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverrides {
    /// Whether the sidecar gets a liveness probe (ignored on the main container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_liveness_probe: Option<bool>,
    /// Deprecated: whether the sidecar gets a readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_readiness_probe: Option<bool>,
    /// Whether processes listen with TLS.
    #[serde(rename = "enableTls", default, skip_serializing_if = "is_false")]
    pub enable_tls: bool,
    /// The rules for which peer certificates processes accept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 10000))]
    pub peer_verification_rules: String,
    /// How the container's image is chosen, first match by version wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub image_configs: Vec<ImageConfig>,
}

/// One rule for building an image reference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageConfig {
    /// The FoundationDB version this rule applies to; empty for every version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 20))]
    pub version: String,
    /// The image before the tag.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 200))]
    pub base_image: String,
    /// A full tag.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 100))]
    pub tag: String,
    /// A suffix added after the version to form the tag.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 50))]
    pub tag_suffix: String,
}

/// Builds the image for `version` from `configs` as upstream merges them: rules in list order,
/// skipping those for another version; the first rule setting a field wins. The result is
/// `<baseImage>:<tag>`, or `<baseImage>:<version><tagSuffix>` without a tag; `default_base`
/// stands in when no rule sets a base image.
pub fn select_image(configs: &[ImageConfig], default_base: &str, version: &str) -> String {
    let mut merged = ImageConfig::default();
    for c in configs
        .iter()
        .filter(|c| c.version.is_empty() || c.version == version)
    {
        if merged.base_image.is_empty() {
            merged.base_image = c.base_image.clone();
        }
        if merged.tag.is_empty() {
            merged.tag = c.tag.clone();
        }
        if merged.tag_suffix.is_empty() {
            merged.tag_suffix = c.tag_suffix.clone();
        }
    }
    if merged.base_image.is_empty() {
        merged.base_image = default_base.to_owned();
    }
    if merged.tag.is_empty() {
        return format!("{}:{version}{}", merged.base_image, merged.tag_suffix);
    }
    format!("{}:{}", merged.base_image, merged.tag)
}

/// Where a backup is written and a restore reads from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlobStoreConfiguration {
    /// The backup's name in the bucket; defaults to the resource's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub backup_name: String,
    /// `[<key>[:<secret>[:<token>]]@]<host>[:<port>]`; the port defaults to 443, or 80 with
    /// `secure_connection=0`.
    #[schemars(length(max = 100))]
    pub account_name: String,
    /// The bucket; defaults to `fdb-backups`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Extra URL parameters of the blob-store URL (`key=value`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = 1024)))]
    pub url_parameters: Vec<String>,
}

/// The bucket used when none is set.
pub const DEFAULT_BUCKET: &str = "fdb-backups";

impl BlobStoreConfiguration {
    /// The bucket, defaulted.
    pub fn bucket_name(&self) -> &str {
        if self.bucket.is_empty() {
            DEFAULT_BUCKET
        } else {
            &self.bucket
        }
    }

    /// The backup name, defaulted to `resource_name`.
    pub fn backup_name_or<'a>(&'a self, resource_name: &'a str) -> &'a str {
        if self.backup_name.is_empty() {
            resource_name
        } else {
            &self.backup_name
        }
    }

    /// The blob-store URL of backup `backup` in the bucket, as upstream builds it:
    /// `blobstore://<user>[:<secret>]@<host>:<port>/<backup>?bucket=<bucket>&<params>` with the
    /// query sorted by key (a later parameter replaces an earlier one with the same key) and the
    /// port defaulted to 443, or 80 when `sc` or `secure_connection` is `0`.
    pub fn url(&self, backup: &str) -> Result<String, BlobStoreError> {
        if self.account_name.is_empty() {
            return Err(BlobStoreError::MissingAccount);
        }
        let (credentials, host) = self
            .account_name
            .split_once('@')
            .ok_or(BlobStoreError::BadAccount)?;
        let user = match credentials.split_once(':') {
            Some((user, secret)) => {
                format!("{}:{}", escape(user, USERINFO), escape(secret, USERINFO))
            }
            None => escape(credentials, USERINFO),
        };
        let mut query = std::collections::BTreeMap::new();
        query.insert("bucket".to_owned(), self.bucket_name().to_owned());
        let mut port = 443;
        for p in &self.url_parameters {
            let parts: Vec<&str> = p.split('=').collect();
            if parts.len() < 2 {
                continue;
            }
            query.insert(parts[0].to_owned(), parts[1].to_owned());
            if (parts[0] == "sc" || parts[0] == "secure_connection") && parts[1] == "0" {
                port = 80;
            }
        }
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let host = if has_port {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
            .collect();
        let path = if backup.is_empty() {
            String::new()
        } else {
            format!("/{}", escape(backup, PATH))
        };
        Ok(format!(
            "blobstore://{user}@{host}{path}?{}",
            query.join("&")
        ))
    }
}

/// A blob-store configuration that yields no URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobStoreError {
    /// No account name.
    #[error("account configuration is missing for backup")]
    MissingAccount,
    /// The account name has no `@host`.
    #[error(
        "account must be in the format [<api_key>][:<secret>[:<security_token>]]@<hostname>[:<port>]"
    )]
    BadAccount,
}

// Characters Go's net/url leaves unescaped besides ASCII letters, digits and `-_.~`.
const USERINFO: &str = "$&+,;=";
const PATH: &str = "$&+,/:;=@";

fn escape(s: &str, keep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || keep.as_bytes().contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query_escape(s: &str) -> String {
    escape(s, "").replace("%20", "+")
}

/// Extra `--knob_…` style parameters; `locality_*` ones are not passed to backup tools.
pub fn backup_knobs(params: &[String]) -> Vec<String> {
    params
        .iter()
        .filter(|p| !p.starts_with("locality_"))
        .map(|p| format!("--{p}"))
        .collect()
}

/// Whether `version` parses and is new enough to run.
pub fn version_supported(version: &str) -> bool {
    FdbVersion::parse(version).is_ok_and(|v| v.is_supported())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_selection_prefers_version_specific_rules() {
        let configs = vec![
            ImageConfig {
                base_image: "registry/fdb".into(),
                tag_suffix: "-1".into(),
                ..Default::default()
            },
            ImageConfig {
                version: "7.1.57".into(),
                tag: "special".into(),
                ..Default::default()
            },
        ];
        assert_eq!(
            select_image(&configs, "x", "7.1.57"),
            "registry/fdb:special"
        );
        // Order matters: a general rule's tag suffix before a version's tag.
        assert_eq!(select_image(&configs, "x", "7.3.1"), "registry/fdb:7.3.1-1");
        assert_eq!(
            select_image(&[], "foundationdb/foundationdb", "7.1.57"),
            "foundationdb/foundationdb:7.1.57"
        );
    }

    #[test]
    fn backup_urls_default_port_bucket_and_name() {
        let mut b = BlobStoreConfiguration {
            account_name: "account@minio-service".into(),
            ..Default::default()
        };
        assert_eq!(
            b.url("mybackup").unwrap(),
            "blobstore://account@minio-service:443/mybackup?bucket=fdb-backups"
        );
        b.url_parameters = vec!["secure_connection=0".into(), "region=us east".into()];
        b.bucket = "b1".into();
        assert_eq!(
            b.url("n").unwrap(),
            "blobstore://account@minio-service:80/n?bucket=b1&region=us+east&secure_connection=0"
        );
        b.account_name = "key:se/cret@host:9000".into();
        assert_eq!(
            b.url("n").unwrap(),
            "blobstore://key:se%2Fcret@host:9000/n?bucket=b1&region=us+east&secure_connection=0"
        );
        b.account_name = "nohost".into();
        assert_eq!(b.url("n"), Err(BlobStoreError::BadAccount));
        b.account_name.clear();
        assert_eq!(b.url("n"), Err(BlobStoreError::MissingAccount));
    }
}
