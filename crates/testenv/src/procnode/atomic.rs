//! The kubelet's atomic writer for Secret, ConfigMap, projected and downwardAPI volumes: a
//! running container sees either the old or the new set of files, never a mix.
//!
//! Layout of a volume directory (as the kubelet makes it):
//!
//! ```text
//! ..2026_11_22_16_47_03.123456789/   the current payload (real files)
//! ..data -> ..2026_11_22_16_47_03.123456789
//! token -> ..data/token               one symlink per top-level entry of the payload
//! ```
//!
//! Contract:
//! - [`write`] returns false and touches nothing when the payload equals what `..data` holds.
//! - Otherwise it writes a new timestamped directory, points `..data_tmp` at it and renames it
//!   over `..data` (one atomic step), adds missing user-visible symlinks, removes those no
//!   longer in the payload, and deletes the previous timestamped directory.
//! - Paths must be relative without `..` components; file modes and owners come from the
//!   payload.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path};

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Contents.
    pub data: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

/// Owner applied to everything written (the pod's fsGroup, or the user of a token file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owner {
    /// File owner.
    pub uid: Option<u32>,
    /// File group.
    pub gid: Option<u32>,
}

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// Makes `dir` hold exactly `payload`; true when something changed.
pub fn write(dir: &Path, payload: &BTreeMap<String, File>, owner: Owner) -> io::Result<bool> {
    for path in payload.keys() {
        validate(path)?;
    }
    fs::create_dir_all(dir)?;
    let current = fs::read_link(dir.join(DATA)).ok();
    if let Some(cur) = &current
        && same(&dir.join(cur), payload, owner)?
    {
        return Ok(false);
    }
    let stamp = jiff::Timestamp::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.%f")
        .to_string();
    let new = dir.join(&stamp);
    fs::create_dir(&new)?;
    chown(&new, owner)?;
    fs::set_permissions(&new, fs::Permissions::from_mode(0o755))?;
    for (path, file) in payload {
        let target = new.join(path);
        if let Some(parent) = target.parent()
            && parent != new
        {
            fs::create_dir_all(parent)?;
            chown(parent, owner)?;
        }
        fs::write(&target, &file.data)?;
        fs::set_permissions(&target, fs::Permissions::from_mode(file.mode))?;
        chown(&target, owner)?;
    }
    let tmp = dir.join(DATA_TMP);
    let _ = fs::remove_file(&tmp);
    symlink(&stamp, &tmp)?;
    fs::rename(&tmp, dir.join(DATA))?;
    let wanted: std::collections::BTreeSet<String> = payload.keys().map(|p| top(p)).collect();
    for name in &wanted {
        let link = dir.join(name);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA).join(name), &link)?;
        }
    }
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || wanted.contains(&name) {
            continue;
        }
        let _ = fs::remove_file(dir.join(&name));
    }
    if let Some(old) = current
        && old != Path::new(&stamp)
    {
        let _ = fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

fn top(path: &str) -> String {
    path.split('/').next().unwrap_or(path).to_string()
}

fn validate(path: &str) -> io::Result<()> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && !path.starts_with("..")
        && p.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid volume path {path:?}"),
        ))
    }
}

fn chown(path: &Path, owner: Owner) -> io::Result<()> {
    if owner.uid.is_some() || owner.gid.is_some() {
        std::os::unix::fs::chown(path, owner.uid, owner.gid)?;
    }
    Ok(())
}

/// Does `dir` hold exactly `payload` (contents, modes, owner)?
fn same(dir: &Path, payload: &BTreeMap<String, File>, owner: Owner) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    collect(dir, dir, &mut found)?;
    if found.len() != payload.len() {
        return Ok(false);
    }
    for rel in found {
        let Some(want) = payload.get(&rel) else {
            return Ok(false);
        };
        let path = dir.join(&rel);
        let meta = fs::metadata(&path)?;
        let owner_ok =
            owner.uid.is_none_or(|u| u == meta.uid()) && owner.gid.is_none_or(|g| g == meta.gid());
        if meta.permissions().mode() & 0o7777 != want.mode
            || !owner_ok
            || fs::read(&path)? != want.data
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(root, &path, out)?;
        } else {
            let rel = path.strip_prefix(root).map_err(io::Error::other)?;
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(items: &[(&str, &str, u32)]) -> BTreeMap<String, File> {
        items
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    File {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    fn tempdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("atomic-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn updates_swap_the_whole_payload_through_data() {
        let dir = tempdir("swap");
        let v1 = payload(&[("token", "t1", 0o644), ("conf/app.yaml", "a: 1", 0o600)]);
        assert!(write(&dir, &v1, Owner::default()).expect("first write"));
        assert_eq!(fs::read_to_string(dir.join("token")).expect("token"), "t1");
        assert_eq!(
            fs::read_to_string(dir.join("conf/app.yaml")).expect("nested"),
            "a: 1"
        );
        assert_eq!(
            fs::read_link(dir.join("token")).expect("link"),
            Path::new("..data/token")
        );
        let first = fs::read_link(dir.join(DATA)).expect("..data");

        // Same payload: nothing happens.
        assert!(!write(&dir, &v1, Owner::default()).expect("no-op"));
        assert_eq!(fs::read_link(dir.join(DATA)).expect("..data"), first);

        // New payload: new directory, old one gone, removed keys' links gone.
        let v2 = payload(&[("token", "t2", 0o644), ("extra", "x", 0o400)]);
        assert!(write(&dir, &v2, Owner::default()).expect("update"));
        let second = fs::read_link(dir.join(DATA)).expect("..data");
        assert_ne!(first, second);
        assert!(!dir.join(&first).exists(), "previous payload removed");
        assert_eq!(fs::read_to_string(dir.join("token")).expect("token"), "t2");
        assert!(
            fs::symlink_metadata(dir.join("conf")).is_err(),
            "conf link removed"
        );
        let mode = fs::metadata(dir.join("extra"))
            .expect("extra")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o400);

        // A mode change alone is a change.
        let v3 = payload(&[("token", "t2", 0o600), ("extra", "x", 0o400)]);
        assert!(write(&dir, &v3, Owner::default()).expect("mode change"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn paths_escaping_the_volume_are_refused() {
        let dir = tempdir("refuse");
        for bad in ["../x", "/etc/passwd", "a/../../b", "..data"] {
            assert!(
                write(&dir, &payload(&[(bad, "x", 0o644)]), Owner::default()).is_err(),
                "{bad}"
            );
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
