//! The database's keys as fdbcli's `get`/`getrange`/`set`/`clear`/`clearrange` see them.
//!
//! Contract: the records the operator keeps under its lock prefix (`<prefix>/global`,
//! `<prefix>/denyList/<id>`, `<prefix>/upgrades/<version>/<id>`, `<prefix>/maintenance/<id>`)
//! are the fake database's own lock, deny list, pending upgrades and maintenance list, so the
//! real lock client (over fdbcli) and [`crate::admin::fake::FakeLockClient`] see one state;
//! `\xff/coordinators` is the connection string (read-only). Any other key is kept as plain
//! bytes beside the fake. A range read synthesises the record keys from the prefix its begin
//! key names (`<prefix>/denyList/`, `<prefix>/upgrades/<version>/`, `<prefix>/maintenance`),
//! which are the ranges the admin client reads.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::admin::fake::FakeDatabase;
use crate::admin::keys::{KeyValue, pack_lock, unpack_lock};
use crate::admin::lock::LockRecord;
use crate::admin::{AdminClient, AdminError, LockClient};
use crate::crd::LockDenyListEntry;

/// The coordinators key.
pub const COORDINATORS_KEY: &[u8] = b"\xff/coordinators";

/// One database's keys: the fake plus the bytes of every other key.
#[derive(Clone, Default)]
pub struct Keys {
    /// The fake database.
    pub fake: FakeDatabase,
    other: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>>,
}

#[derive(Debug, PartialEq)]
enum Record {
    Coordinators,
    Lock,
    Deny(String),
    Upgrade(String, String),
    Maintenance(String),
    Other,
}

fn after<'a>(key: &'a str, marker: &str) -> Option<&'a str> {
    key.find(marker).map(|i| &key[i + marker.len()..])
}

fn classify(key: &[u8]) -> Record {
    if key == COORDINATORS_KEY {
        return Record::Coordinators;
    }
    if !key.starts_with(b"\xff\x02") {
        return Record::Other;
    }
    let text = String::from_utf8_lossy(key);
    if text.ends_with("/global") {
        return Record::Lock;
    }
    if let Some(id) = after(&text, "/denyList/").filter(|id| !id.is_empty()) {
        return Record::Deny(id.to_owned());
    }
    if let Some((v, id)) = after(&text, "/upgrades/").and_then(|r| r.split_once('/'))
        && !id.is_empty()
    {
        return Record::Upgrade(v.to_owned(), id.to_owned());
    }
    if let Some(id) = after(&text, "/maintenance/").filter(|id| !id.is_empty()) {
        return Record::Maintenance(id.to_owned());
    }
    Record::Other
}

fn with(prefix: &[u8], rest: &str) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(rest.as_bytes());
    k
}

fn strip<'a>(key: &'a [u8], suffix: &str) -> Option<&'a [u8]> {
    key.strip_suffix(suffix.as_bytes())
}

fn refused(what: &str) -> AdminError {
    AdminError::Command {
        binary: "fdbcli".into(),
        code: Some(1),
        output: format!("ERROR: {what}"),
    }
}

impl Keys {
    /// The keys of `fake`.
    pub fn new(fake: FakeDatabase) -> Self {
        Keys {
            fake,
            other: Arc::default(),
        }
    }

    /// Whether both are the same database.
    pub fn same(&self, other: &Keys) -> bool {
        Arc::ptr_eq(&self.other, &other.other)
    }

    fn lock_client(&self) -> impl LockClient + use<> {
        self.fake.lock_client("fdb-sim", 0)
    }

    fn others(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.other.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, AdminError> {
        Ok(match classify(key) {
            Record::Coordinators => {
                let cs = self.fake.connection_string();
                (!cs.is_empty()).then(|| cs.into_bytes())
            }
            Record::Lock => self
                .fake
                .lock_record()
                .map(|r| pack_lock(&r.owner, r.start, r.end)),
            Record::Deny(id) => self
                .lock_client()
                .get_deny_list()
                .await?
                .contains(&id)
                .then(|| id.into_bytes()),
            Record::Upgrade(version, id) => self
                .lock_client()
                .get_pending_upgrades(&version)
                .await?
                .contains(&id)
                .then(|| id.into_bytes()),
            Record::Maintenance(id) => self
                .fake
                .get_processes_under_maintenance()
                .await?
                .get(&id)
                .map(|ts| ts.to_le_bytes().to_vec()),
            Record::Other => self.others().get(key).cloned(),
        })
    }

    /// The pairs in `[begin, end)`, at most `limit`, in key order.
    pub async fn range(
        &self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, AdminError> {
        let mut pairs: BTreeMap<Vec<u8>, Vec<u8>> = self
            .others()
            .range(begin.to_vec()..end.to_vec())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if classify(begin) == Record::Lock
            && let Some(value) = self.get(begin).await?
        {
            pairs.insert(begin.to_vec(), value);
        }
        if let Some(prefix) = strip(begin, "/denyList/") {
            for id in self.lock_client().get_deny_list().await? {
                pairs.insert(with(prefix, &format!("/denyList/{id}")), id.into_bytes());
            }
        }
        if let Some(prefix) = strip(begin, "/maintenance") {
            for (id, ts) in self.fake.get_processes_under_maintenance().await? {
                let key = with(prefix, &format!("/maintenance/{id}"));
                pairs.insert(key, ts.to_le_bytes().to_vec());
            }
        }
        if let Record::Upgrade(version, _) = classify(&with(begin, "x")) {
            let prefix = &begin[..begin.len() - format!("/upgrades/{version}/").len()];
            for id in self.lock_client().get_pending_upgrades(&version).await? {
                let key = with(prefix, &format!("/upgrades/{version}/{id}"));
                pairs.insert(key, id.into_bytes());
            }
        }
        Ok(pairs
            .into_iter()
            .filter(|(k, _)| k.as_slice() >= begin && k.as_slice() < end)
            .take(limit)
            .collect())
    }

    /// Writes `value` at `key`.
    pub async fn set(&self, key: &[u8], value: &[u8]) -> Result<(), AdminError> {
        match classify(key) {
            Record::Coordinators => Err(refused(
                "the simulator changes coordinators with `coordinators' only",
            )),
            Record::Lock => {
                let (owner, start, end) = unpack_lock(value).ok_or_else(|| {
                    refused("the lock record must be a (owner, start, end) tuple")
                })?;
                self.fake
                    .set_lock_record(Some(LockRecord { owner, start, end }));
                Ok(())
            }
            Record::Deny(id) => self.deny(id, false).await,
            Record::Upgrade(version, id) => {
                self.lock_client()
                    .add_pending_upgrades(&version, &[id])
                    .await
            }
            Record::Maintenance(id) => {
                let ts = <[u8; 8]>::try_from(value)
                    .map(i64::from_le_bytes)
                    .map_err(|_| refused("a maintenance timestamp is 8 bytes"))?;
                self.fake.set_processes_under_maintenance(&[id], ts).await
            }
            Record::Other => {
                self.others().insert(key.to_vec(), value.to_vec());
                Ok(())
            }
        }
    }

    async fn deny(&self, id: String, allow: bool) -> Result<(), AdminError> {
        self.lock_client()
            .update_deny_list(&[LockDenyListEntry { id, allow }])
            .await
    }

    /// Clears `key`.
    pub async fn clear(&self, key: &[u8]) -> Result<(), AdminError> {
        match classify(key) {
            Record::Coordinators => Err(refused("the coordinators key cannot be cleared")),
            Record::Lock => {
                self.fake.set_lock_record(None);
                Ok(())
            }
            Record::Deny(id) => self.deny(id, true).await,
            Record::Upgrade(..) => Err(refused(
                "the simulator clears pending upgrades all at once (clearrange <prefix>/upgrades/)",
            )),
            Record::Maintenance(id) => self.fake.remove_processes_under_maintenance(&[id]).await,
            Record::Other => {
                self.others().remove(key);
                Ok(())
            }
        }
    }

    /// Clears `[begin, end)`.
    pub async fn clear_range(&self, begin: &[u8], end: &[u8]) -> Result<(), AdminError> {
        if strip(begin, "/upgrades/").is_some() && begin.starts_with(b"\xff\x02") {
            self.lock_client().clear_pending_upgrades().await?;
        }
        for (key, _) in self.range(begin, end, usize::MAX).await? {
            self.clear(&key).await?;
        }
        let mut others = self.others();
        let doomed: Vec<Vec<u8>> = others
            .range(begin.to_vec()..end.to_vec())
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            others.remove(&k);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_recognised_under_any_prefix() {
        let p = "\u{ff}\u{2}/org.foundationdb.kubernetes-operator";
        let k = |s: &str| crate::admin::keys::key_bytes(&format!("{p}{s}"));
        assert_eq!(classify(&k("/global")), Record::Lock);
        assert_eq!(classify(&k("/denyList/dc2")), Record::Deny("dc2".into()));
        assert_eq!(
            classify(&k("/upgrades/7.3.63/storage-1")),
            Record::Upgrade("7.3.63".into(), "storage-1".into())
        );
        assert_eq!(
            classify(&k("/maintenance/log-2")),
            Record::Maintenance("log-2".into())
        );
        assert_eq!(classify(COORDINATORS_KEY), Record::Coordinators);
        assert_eq!(
            classify(b"user/global"),
            Record::Other,
            "user keys are plain"
        );
        assert_eq!(classify(&k("/denyList/")), Record::Other);
    }

    #[tokio::test]
    async fn plain_keys_round_trip_and_clear_by_range() {
        let keys = Keys::new(FakeDatabase::new());
        keys.set(b"a", b"1").await.unwrap();
        keys.set(b"b", b"2").await.unwrap();
        assert_eq!(keys.get(b"a").await.unwrap(), Some(b"1".to_vec()));
        assert_eq!(keys.range(b"a", b"c", 10).await.unwrap().len(), 2);
        assert_eq!(keys.range(b"a", b"c", 1).await.unwrap().len(), 1);
        keys.clear_range(b"a", b"b").await.unwrap();
        assert_eq!(keys.get(b"a").await.unwrap(), None);
        assert_eq!(keys.get(b"b").await.unwrap(), Some(b"2".to_vec()));
        assert!(keys.set(COORDINATORS_KEY, b"x").await.is_err());
    }
}
