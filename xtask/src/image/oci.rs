//! The OCI image of one static binary, and the OCI image-layout archive that carries it.
//!
//! Contract (pure: bytes in, bytes out, no IO):
//! - [`assemble`] makes the three blobs of a one-layer image: a gzip'd tar layer holding only
//!   `/<name>` (mode 0755, owner 0:0, mtime 0), an image config for linux/amd64 with
//!   `User` [`USER`], `Entrypoint ["/<name>"]`, the given labels, `rootfs.diff_ids` = the
//!   sha256 of the uncompressed layer and one history entry, and an OCI image manifest
//!   pointing at both.
//! - Nothing depends on the clock or the machine: the same binary, name and labels give the
//!   same bytes, digests included (JSON keys sorted, gzip header without time or name).
//! - [`layout_archive`] is an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`)
//!   as a tar file, the `oci-archive:` format of skopeo and podman. Its index names the one
//!   manifest with `org.opencontainers.image.ref.name` (podman load uses it) and
//!   `io.containerd.image.name` (docker and containerd do) set to the full reference.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// An OCI image manifest.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image config.
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// A gzip-compressed tar layer.
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The index of an image layout.
pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The user the image runs as: the conventional "nonroot" uid/gid of distroless images.
pub const USER: &str = "65532:65532";
/// Annotation podman (and the image-spec) read for an image's name in a layout.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Annotation docker and containerd read for an image's name in a layout.
pub const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// One content-addressed blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// Its media type in a descriptor.
    pub media_type: &'static str,
    /// `sha256:<hex>` of `bytes`.
    pub digest: String,
    /// The content.
    pub bytes: Vec<u8>,
}

impl Blob {
    fn new(media_type: &'static str, bytes: Vec<u8>) -> Self {
        Self {
            media_type,
            digest: digest(&bytes),
            bytes,
        }
    }

    /// The OCI descriptor of this blob.
    pub fn descriptor(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest, "size": self.bytes.len()})
    }

    /// The hex part of the digest (the file name under `blobs/sha256/`).
    pub fn hex(&self) -> &str {
        self.digest.trim_start_matches("sha256:")
    }
}

/// What goes into an image.
#[derive(Debug, Clone)]
pub struct Recipe<'a> {
    /// File name of the binary at the image root, and the entrypoint `/<name>`.
    pub name: &'a str,
    /// The binary.
    pub binary: &'a [u8],
    /// The image config's labels.
    pub labels: BTreeMap<String, String>,
    /// How the layer came to be, for the config's history.
    pub created_by: String,
}

/// The blobs of a one-layer image.
#[derive(Debug, Clone)]
pub struct Image {
    /// The gzip'd tar layer.
    pub layer: Blob,
    /// The image config.
    pub config: Blob,
    /// The image manifest.
    pub manifest: Blob,
}

impl Image {
    /// Compressed layer + config + manifest bytes: what a registry stores for this image.
    pub fn size(&self) -> usize {
        self.layer.bytes.len() + self.config.bytes.len() + self.manifest.bytes.len()
    }
}

/// Builds the layer, config and manifest of `recipe`.
pub fn assemble(recipe: &Recipe) -> anyhow::Result<Image> {
    let tar = layer_tar(recipe.name, recipe.binary)?;
    let diff_id = digest(&tar);
    let layer = Blob::new(LAYER_TYPE, gzip(&tar)?);
    let config = Blob::new(CONFIG_TYPE, to_json(&config_json(recipe, &diff_id)));
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config.descriptor(),
        "layers": [layer.descriptor()],
    });
    let manifest = Blob::new(MANIFEST_TYPE, to_json(&manifest));
    Ok(Image {
        layer,
        config,
        manifest,
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn to_json(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a JSON value serializes")
}

fn config_json(recipe: &Recipe, diff_id: &str) -> Value {
    json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": [format!("/{}", recipe.name)],
            "Labels": recipe.labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": recipe.created_by}],
    })
}

/// A header for an entry owned by 0:0 with mtime 0 (tar's own defaults are the same, but
/// spelled out: they are what makes the bytes reproducible).
fn header(path: &str, size: usize, mode: u32, kind: tar::EntryType) -> anyhow::Result<tar::Header> {
    let mut h = tar::Header::new_ustar();
    h.set_path(path)?;
    h.set_size(size as u64);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(kind);
    h.set_cksum();
    Ok(h)
}

/// The uncompressed layer: the one file `name`.
fn layer_tar(name: &str, binary: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.append(
        &header(name, binary.len(), 0o755, tar::EntryType::Regular)?,
        binary,
    )?;
    Ok(tar.into_inner()?)
}

fn gzip(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    // GzBuilder writes mtime 0 and no file name unless asked: nothing machine-specific.
    let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes)?;
    Ok(gz.finish()?)
}

/// The `index.json` of a layout holding `image` under the name `reference`.
pub fn index_json(image: &Image, reference: &str) -> Vec<u8> {
    let mut manifest = image.manifest.descriptor();
    manifest["annotations"] = json!({REF_NAME: reference, CONTAINERD_NAME: reference});
    to_json(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [manifest],
    }))
}

/// The OCI image layout of `image`, named `reference`, as a tar file (entries sorted by path).
pub fn layout_archive(image: &Image, reference: &str) -> anyhow::Result<Vec<u8>> {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    files.insert(
        "oci-layout".into(),
        to_json(&json!({"imageLayoutVersion": "1.0.0"})),
    );
    files.insert("index.json".into(), index_json(image, reference));
    for blob in [&image.layer, &image.config, &image.manifest] {
        files.insert(format!("blobs/sha256/{}", blob.hex()), blob.bytes.clone());
    }
    let mut tar = tar::Builder::new(Vec::new());
    for dir in ["blobs/", "blobs/sha256/"] {
        tar.append(&header(dir, 0, 0o755, tar::EntryType::Directory)?, &[][..])?;
    }
    for (path, bytes) in &files {
        let h = header(path, bytes.len(), 0o644, tar::EntryType::Regular)?;
        tar.append(&h, bytes.as_slice())?;
    }
    Ok(tar.into_inner()?)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn recipe(binary: &[u8]) -> Recipe<'_> {
        let labels = BTreeMap::from([(
            "org.opencontainers.image.version".to_string(),
            "9.9.9".to_string(),
        )]);
        Recipe {
            name: "demo-operator",
            binary,
            labels,
            created_by: "test".into(),
        }
    }

    /// `(path, mode, uid, gid, mtime, content)` of every entry of a tar file.
    type Entry = (String, u32, u64, u64, u64, Vec<u8>);

    fn entries(tar: &[u8]) -> Vec<Entry> {
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let h = e.header().clone();
                let mut content = Vec::new();
                e.read_to_end(&mut content).unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let (mode, uid, gid) = (h.mode().unwrap(), h.uid().unwrap(), h.gid().unwrap());
                (path, mode, uid, gid, h.mtime().unwrap(), content)
            })
            .collect()
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    fn json_of(blob: &Blob) -> Value {
        serde_json::from_slice(&blob.bytes).unwrap()
    }

    #[test]
    fn the_layer_holds_only_the_binary_owned_by_root_executable_at_epoch() {
        let image = assemble(&recipe(b"\x7fELF pretend")).unwrap();
        let tar = gunzip(&image.layer.bytes);
        let diff_ids = json!([digest(&tar)]);
        assert_eq!(json_of(&image.config)["rootfs"]["diff_ids"], diff_ids);
        let expected = (
            "demo-operator".into(),
            0o755,
            0,
            0,
            0,
            b"\x7fELF pretend".to_vec(),
        );
        assert_eq!(entries(&tar), vec![expected]);
    }

    #[test]
    fn the_config_runs_the_binary_as_nonroot_on_linux_amd64() {
        let image = assemble(&recipe(b"bin")).unwrap();
        let config = json_of(&image.config);
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["os"], "linux");
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["Entrypoint"], json!(["/demo-operator"]));
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.version"],
            "9.9.9"
        );
        assert_eq!(config["rootfs"]["type"], "layers");
        assert_eq!(config["history"], json!([{"created_by": "test"}]));
    }

    #[test]
    fn the_manifest_describes_config_and_layer() {
        let image = assemble(&recipe(b"bin")).unwrap();
        let manifest = json_of(&image.manifest);
        assert_eq!(manifest["schemaVersion"], 2);
        assert_eq!(manifest["mediaType"], MANIFEST_TYPE);
        assert_eq!(manifest["config"], image.config.descriptor());
        assert_eq!(manifest["layers"], json!([image.layer.descriptor()]));
        assert_eq!(image.layer.digest, digest(&image.layer.bytes));
        assert_eq!(image.manifest.digest, digest(&image.manifest.bytes));
    }

    #[test]
    fn the_same_binary_gives_the_same_bytes_and_another_binary_other_digests() {
        let (a, b) = (
            assemble(&recipe(b"one")).unwrap(),
            assemble(&recipe(b"one")).unwrap(),
        );
        assert_eq!(a.layer, b.layer);
        assert_eq!(a.manifest, b.manifest);
        let r = "example.org/x:1";
        assert_eq!(
            layout_archive(&a, r).unwrap(),
            layout_archive(&b, r).unwrap()
        );
        let c = assemble(&recipe(b"two")).unwrap();
        assert_ne!(a.layer.digest, c.layer.digest);
        assert_ne!(a.manifest.digest, c.manifest.digest);
    }

    #[test]
    fn the_archive_is_an_image_layout_naming_its_one_manifest() {
        let image = assemble(&recipe(b"bin")).unwrap();
        let tar = layout_archive(&image, "ghcr.io/flotilla/demo-operator:9.9.9").unwrap();
        let entries = entries(&tar);
        let paths: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        let mut blobs = [&image.layer, &image.config, &image.manifest].map(|b| b.hex().to_string());
        blobs.sort();
        let expected: Vec<String> = ["blobs/", "blobs/sha256/"]
            .iter()
            .map(|s| s.to_string())
            .chain(blobs.iter().map(|h| format!("blobs/sha256/{h}")))
            .chain(["index.json".into(), "oci-layout".into()])
            .collect();
        assert_eq!(paths, expected);
        let file = |p: &str| entries.iter().find(|e| e.0 == p).unwrap().5.clone();
        let layout: Value = serde_json::from_slice(&file("oci-layout")).unwrap();
        assert_eq!(layout, json!({"imageLayoutVersion": "1.0.0"}));
        let index: Value = serde_json::from_slice(&file("index.json")).unwrap();
        let entry = &index["manifests"][0];
        assert_eq!(index["manifests"].as_array().unwrap().len(), 1);
        assert_eq!(entry["digest"], image.manifest.digest);
        assert_eq!(entry["size"], image.manifest.bytes.len());
        let name = "ghcr.io/flotilla/demo-operator:9.9.9";
        assert_eq!(entry["annotations"][REF_NAME], name);
        assert_eq!(entry["annotations"][CONTAINERD_NAME], name);
        for blob in [&image.layer, &image.config, &image.manifest] {
            assert_eq!(file(&format!("blobs/sha256/{}", blob.hex())), blob.bytes);
        }
        assert!(entries.iter().all(|e| e.2 == 0 && e.3 == 0 && e.4 == 0));
    }
}
