//! The database configuration (`spec.databaseConfiguration`, `status.databaseConfiguration`),
//! with FoundationDB's own JSON names, and the pure logic upstream keeps beside it: role-count
//! defaults, normalisation for comparing spec and live configuration, and the text of a
//! `configure` command.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::is_zero;

/// The storage engines the schema accepts.
pub const STORAGE_ENGINES: [&str; 13] = [
    "ssd",
    "ssd-1",
    "ssd-2",
    "memory",
    "memory-1",
    "memory-2",
    "ssd-redwood-1-experimental",
    "ssd-redwood-1",
    "ssd-rocksdb-experimental",
    "ssd-rocksdb-v1",
    "ssd-sharded-rocksdb",
    "memory-radixtree-beta",
    "custom",
];

/// `single`: no fault tolerance.
pub const REDUNDANCY_SINGLE: &str = "single";
/// `double` (the default).
pub const REDUNDANCY_DOUBLE: &str = "double";
/// `triple`.
pub const REDUNDANCY_TRIPLE: &str = "triple";
/// `three_data_hall`.
pub const REDUNDANCY_THREE_DATA_HALL: &str = "three_data_hall";

/// The configuration of the database, as `configure` sets it and `status json` reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DatabaseConfiguration {
    /// The replication mode: `single`, `double` (default), `triple` or `three_data_hall`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(
        length(max = 100),
        extend("enum" = ["single", "double", "triple", "three_data_hall"])
    )]
    pub redundancy_mode: String,

    /// The storage engine. Default `ssd-2` (`ssd` means `ssd-2`, `memory` means `memory-2`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 100), extend("enum" = STORAGE_ENGINES, "default" = "ssd-2"))]
    pub storage_engine: String,

    /// How many regions store data; below 1 means 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usable_regions: i64,

    /// The regions the database can replicate in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<Region>,

    /// The excluded servers (status only; ignored when comparing configurations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024))]
    pub excluded_servers: Vec<ExcludedServers>,

    /// Role counts.
    #[serde(flatten)]
    pub role_counts: RoleCounts,

    /// Internal version flags.
    #[serde(flatten)]
    pub version_flags: VersionFlags,

    /// The storage migration type: `disabled`, `aggressive` or `gradual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 100),
        extend("enum" = ["", "disabled", "aggressive", "gradual"])
    )]
    pub storage_migration_type: Option<String>,

    /// The perpetual storage wiggle speed; 0 disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perpetual_storage_wiggle: Option<i64>,

    /// The locality the wiggle is restricted to: `<key>:<value>`, or `0` for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([\w.-]+:[\w.-]+|0)$"))]
    pub perpetual_storage_wiggle_locality: Option<String>,

    /// The storage engine the wiggle migrates to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), extend("enum" = [
        "", "ssd", "ssd-1", "ssd-2", "memory", "memory-1", "memory-2", "ssd-redwood-1-experimental",
        "ssd-redwood-1", "ssd-rocksdb-experimental", "ssd-rocksdb-v1", "ssd-sharded-rocksdb",
        "memory-radixtree-beta", "custom", "none",
    ]))]
    pub perpetual_storage_wiggle_engine: Option<String>,
}

/// How many processes the database recruits for each role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RoleCounts {
    /// Storage servers (not sent to FoundationDB).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub storage: i64,
    /// Log servers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub logs: i64,
    /// Proxies (when GRV and commit proxies are not configured separately).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub proxies: i64,
    /// Commit proxies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commit_proxies: i64,
    /// GRV proxies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grv_proxies: i64,
    /// Resolvers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resolvers: i64,
    /// Log routers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_routers: i64,
    /// Remote logs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remote_logs: i64,
}

/// Internal flags for testing new database features.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct VersionFlags {
    /// `log_spill`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_spill: i64,
    /// `log_version`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_version: i64,
}

/// One region.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Region {
    /// The data centers of the region.
    #[serde(rename = "datacenters", default, skip_serializing_if = "Vec::is_empty")]
    pub data_centers: Vec<DataCenter>,
    /// Satellite logs to recruit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub satellite_logs: i64,
    /// Replication of the satellite logs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 100))]
    pub satellite_redundancy_mode: String,
}

/// One data center of a region.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DataCenter {
    /// The data center's ID (the `dcid` locality).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Higher is preferred.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// 1 for a satellite, 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 1))]
    pub satellite: i64,
}

/// An excluded server, by address or locality.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct ExcludedServers {
    /// The excluded address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 48))]
    pub address: String,
    /// The excluded locality (`locality_instance_id:<id>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 200))]
    pub locality: String,
}

impl ExcludedServers {
    /// The exclusion in the string form `exclude` takes.
    pub fn as_exclusion(&self) -> &str {
        if self.address.is_empty() {
            &self.locality
        } else {
            &self.address
        }
    }
}

/// Replicas that may be lost at full replication: 0/1/2/2 for single/double/triple/
/// three_data_hall (unset means double).
pub fn desired_fault_tolerance(mode: &str) -> i64 {
    match mode {
        REDUNDANCY_SINGLE => 0,
        REDUNDANCY_DOUBLE | "" => 1,
        REDUNDANCY_TRIPLE | REDUNDANCY_THREE_DATA_HALL => 2,
        _ => 0,
    }
}

/// Fault domains the database needs to function: 1/2/3/3.
pub fn minimum_fault_domains(mode: &str) -> i64 {
    match mode {
        REDUNDANCY_SINGLE => 1,
        REDUNDANCY_DOUBLE | "" => 2,
        REDUNDANCY_TRIPLE | REDUNDANCY_THREE_DATA_HALL => 3,
        _ => 1,
    }
}

impl DatabaseConfiguration {
    /// Whether GRV or commit proxies are configured (then `proxies` is not used).
    pub fn separated_proxies(&self) -> bool {
        self.role_counts.grv_proxies > 0 || self.role_counts.commit_proxies > 0
    }

    /// The role counts with upstream's defaults for every 0: storage 2F+1, logs 3 (4 for
    /// three_data_hall), proxies 3 (or GRV 1 / commit 2 when either is set), resolvers 1,
    /// remote logs and log routers = logs with more than one usable region, else -1.
    pub fn role_counts_with_defaults(&self, fault_tolerance: i64) -> RoleCounts {
        let mut c = self.role_counts.clone();
        if c.storage == 0 {
            c.storage = 2 * fault_tolerance + 1;
        }
        if c.logs == 0 {
            c.logs = if self.redundancy_mode == REDUNDANCY_THREE_DATA_HALL {
                4
            } else {
                3
            };
        }
        if self.separated_proxies() {
            c.proxies = 0;
        } else {
            c.grv_proxies = 0;
            c.commit_proxies = 0;
        }
        if c.commit_proxies == 0 && c.grv_proxies == 0 && c.proxies == 0 {
            c.proxies = 3;
        } else if c.proxies == 0 {
            if c.grv_proxies == 0 {
                c.grv_proxies = 1;
            }
            if c.commit_proxies == 0 {
                c.commit_proxies = 2;
            }
        }
        if c.resolvers == 0 {
            c.resolvers = 1;
        }
        let multi = self.usable_regions > 1;
        if c.remote_logs == 0 {
            c.remote_logs = if multi { c.logs } else { -1 };
        }
        if c.log_routers == 0 {
            c.log_routers = if multi { c.logs } else { -1 };
        }
        c
    }

    /// Normalises `self` (a spec or a live configuration) for comparison against `spec`:
    /// -1 for unset remote logs and log routers, at least one usable region, default mode
    /// and engine, the unused proxy style zeroed, regions and their data centers sorted, and
    /// every knob the spec leaves unset cleared (excluded servers always).
    pub fn normalized(&self, spec: &DatabaseConfiguration) -> DatabaseConfiguration {
        let mut r = self.clone();
        if r.role_counts.remote_logs == 0 {
            r.role_counts.remote_logs = -1;
        }
        if r.role_counts.log_routers == 0 {
            r.role_counts.log_routers = -1;
        }
        if r.usable_regions < 1 {
            r.usable_regions = 1;
        }
        if r.redundancy_mode.is_empty() {
            r.redundancy_mode = REDUNDANCY_DOUBLE.into();
        }
        if r.storage_engine.is_empty() {
            r.storage_engine = "ssd-2".into();
        }
        for region in &mut r.regions {
            region.data_centers.sort_by(|a, b| {
                a.satellite
                    .cmp(&b.satellite)
                    .then(b.priority.cmp(&a.priority))
                    .then(a.id.cmp(&b.id))
            });
        }
        r.regions.sort_by(|a, b| {
            let (ai, ap) = main_data_center(a);
            let (bi, bp) = main_data_center(b);
            bp.cmp(&ap).then(ai.cmp(bi))
        });
        r.clear_unset_knobs(spec);
        r
    }

    fn clear_unset_knobs(&mut self, spec: &DatabaseConfiguration) {
        self.excluded_servers.clear();
        if spec.version_flags.log_version == 0 {
            self.version_flags.log_version = 0;
        }
        if spec.version_flags.log_spill == 0 {
            self.version_flags.log_spill = 0;
        }
        if spec.storage_migration_type.is_none() {
            self.storage_migration_type = None;
        }
        if spec.perpetual_storage_wiggle_locality.is_none() {
            self.perpetual_storage_wiggle_locality = None;
        }
        if spec.perpetual_storage_wiggle_engine.is_none() {
            self.perpetual_storage_wiggle_engine = None;
        }
        if spec.perpetual_storage_wiggle.is_none() {
            self.perpetual_storage_wiggle = None;
        }
        if spec.separated_proxies() {
            self.role_counts.proxies = 0;
        } else {
            self.role_counts.commit_proxies = 0;
            self.role_counts.grv_proxies = 0;
        }
    }

    /// The configuration the cluster spec asks for: the normalised spec with defaulted role
    /// counts, storage 0 (never sent), `ssd` → `ssd-2`, `memory` → `memory-2`.
    pub fn desired(spec: &DatabaseConfiguration) -> DatabaseConfiguration {
        let mut c = spec.normalized(spec);
        c.role_counts =
            spec.role_counts_with_defaults(desired_fault_tolerance(&spec.redundancy_mode));
        c.role_counts.storage = 0;
        match c.storage_engine.as_str() {
            "ssd" => c.storage_engine = "ssd-2".into(),
            "memory" => c.storage_engine = "memory-2".into(),
            _ => {}
        }
        c
    }

    /// The arguments of `configure` for this configuration, exactly as upstream builds them:
    /// `<mode> <engine> usable_regions=N logs=N resolvers=N log_routers=N remote_logs=N`, the
    /// proxies, non-zero version flags as ` name:=N`, ` regions=<JSON>` and the optional
    /// storage-migration and wiggle settings.
    pub fn configuration_string(&self) -> Result<String, ConfigurationError> {
        for s in [&self.redundancy_mode, &self.storage_engine] {
            check_text(s)?;
        }
        let counts = self.role_counts_with_defaults(desired_fault_tolerance(&self.redundancy_mode));
        let c = &self.role_counts;
        let mut out = format!(
            "{} {} usable_regions={} logs={} resolvers={} log_routers={} remote_logs={}",
            self.redundancy_mode,
            self.storage_engine,
            self.usable_regions,
            c.logs,
            c.resolvers,
            c.log_routers,
            c.remote_logs
        );
        if self.separated_proxies() {
            out.push_str(&format!(
                " commit_proxies={} grv_proxies={}",
                counts.commit_proxies, counts.grv_proxies
            ));
        } else {
            out.push_str(&format!(" proxies={}", counts.proxies));
        }
        for (flag, value) in [
            ("log_spill", self.version_flags.log_spill),
            ("log_version", self.version_flags.log_version),
        ] {
            if value != 0 {
                out.push_str(&format!(" {flag}:={value}"));
            }
        }
        let regions = if self.regions.is_empty() {
            "[]".to_owned()
        } else {
            js_escape(
                &serde_json::to_string(&self.regions).map_err(|_| ConfigurationError::Regions)?,
            )
        };
        out.push_str(&format!(" regions={regions}"));
        if let Some(t) = &self.storage_migration_type {
            check_text(t)?;
            out.push_str(&format!(" storage_migration_type={t}"));
        }
        if let Some(w) = self.perpetual_storage_wiggle {
            out.push_str(&format!(" perpetual_storage_wiggle={w}"));
        }
        if let Some(l) = &self.perpetual_storage_wiggle_locality {
            check_text(l)?;
            out.push_str(&format!(" perpetual_storage_wiggle_locality={l}"));
        }
        if let Some(e) = &self.perpetual_storage_wiggle_engine {
            check_text(e)?;
            out.push_str(&format!(" perpetual_storage_wiggle_engine={e}"));
        }
        Ok(out)
    }

    /// Number of distinct data-center IDs in the regions.
    pub fn unique_data_centers(&self) -> usize {
        let mut ids: Vec<&str> = self
            .regions
            .iter()
            .flat_map(|r| r.data_centers.iter().map(|d| d.id.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// Fills in FoundationDB's defaults a live configuration may omit (`remote_logs`,
    /// `log_routers` as -1).
    pub fn fill_in_defaults_from_status(&self) -> DatabaseConfiguration {
        let mut r = self.clone();
        if r.role_counts.remote_logs == 0 {
            r.role_counts.remote_logs = -1;
        }
        if r.role_counts.log_routers == 0 {
            r.role_counts.log_routers = -1;
        }
        r
    }
}

/// A configuration that cannot be turned into a `configure` command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigurationError {
    /// A value holds `;`, CR or LF, which would split the command.
    #[error("configuration value {0:?} contains a forbidden character (';', CR or LF)")]
    ForbiddenCharacter(String),
    /// The regions could not be rendered.
    #[error("regions could not be rendered as JSON")]
    Regions,
}

fn check_text(s: &str) -> Result<(), ConfigurationError> {
    if s.contains([';', '\r', '\n']) {
        return Err(ConfigurationError::ForbiddenCharacter(s.to_owned()));
    }
    Ok(())
}

fn main_data_center(region: &Region) -> (&str, i64) {
    region
        .data_centers
        .iter()
        .find(|d| d.satellite == 0)
        .map_or(("", -1), |d| (d.id.as_str(), d.priority))
}

// Go's text/template JSEscapeString, as upstream applies it to the regions JSON.
fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '\'' => out.push_str(r"\'"),
            '"' => out.push_str(r#"\""#),
            '<' => out.push_str(r"\u003C"),
            '>' => out.push_str(r"\u003E"),
            '&' => out.push_str(r"\u0026"),
            '=' => out.push_str(r"\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!(r"\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: &str) -> DatabaseConfiguration {
        DatabaseConfiguration {
            redundancy_mode: mode.into(),
            ..Default::default()
        }
    }

    #[test]
    fn role_count_defaults_follow_the_redundancy_mode() {
        let c = spec("").role_counts_with_defaults(1);
        assert_eq!(
            (
                c.storage,
                c.logs,
                c.proxies,
                c.resolvers,
                c.log_routers,
                c.remote_logs
            ),
            (3, 3, 3, 1, -1, -1)
        );
        let c = spec(REDUNDANCY_THREE_DATA_HALL).role_counts_with_defaults(2);
        assert_eq!((c.storage, c.logs), (5, 4));
        let mut s = spec("double");
        s.role_counts.grv_proxies = 2;
        let c = s.role_counts_with_defaults(1);
        assert_eq!((c.proxies, c.grv_proxies, c.commit_proxies), (0, 2, 2));
        s.usable_regions = 2;
        let c = s.role_counts_with_defaults(1);
        assert_eq!((c.remote_logs, c.log_routers), (3, 3));
    }

    #[test]
    fn the_configure_string_of_an_empty_spec_is_upstreams() {
        let desired = DatabaseConfiguration::desired(&DatabaseConfiguration::default());
        assert_eq!(
            desired.configuration_string().unwrap(),
            "double ssd-2 usable_regions=1 logs=3 resolvers=1 log_routers=-1 remote_logs=-1 proxies=3 regions=[]"
        );
    }

    #[test]
    fn the_configure_string_carries_flags_regions_and_wiggle() {
        let mut s = spec("triple");
        s.storage_engine = "ssd".into();
        s.role_counts.commit_proxies = 4;
        s.version_flags.log_spill = 2;
        s.perpetual_storage_wiggle = Some(1);
        s.storage_migration_type = Some("gradual".into());
        s.regions = vec![Region {
            data_centers: vec![DataCenter {
                id: "dc1".into(),
                priority: 1,
                satellite: 0,
            }],
            ..Default::default()
        }];
        let desired = DatabaseConfiguration::desired(&s);
        assert_eq!(
            desired.configuration_string().unwrap(),
            r#"triple ssd-2 usable_regions=1 logs=3 resolvers=1 log_routers=-1 remote_logs=-1 commit_proxies=4 grv_proxies=1 log_spill:=2 regions=[{\"datacenters\":[{\"id\":\"dc1\",\"priority\":1}]}] storage_migration_type=gradual perpetual_storage_wiggle=1"#
        );
    }

    #[test]
    fn forbidden_characters_are_refused() {
        let mut s = DatabaseConfiguration::desired(&spec("double"));
        s.perpetual_storage_wiggle_locality = Some("a:b;rm".into());
        assert!(matches!(
            s.configuration_string(),
            Err(ConfigurationError::ForbiddenCharacter(_))
        ));
    }

    #[test]
    fn a_live_configuration_normalises_to_the_desired_one() {
        // What `status json` reports after `configure new` of an empty spec: FDB's own
        // defaults for knobs the spec never set, plus exclusions.
        let live = DatabaseConfiguration {
            redundancy_mode: "double".into(),
            storage_engine: "ssd-2".into(),
            usable_regions: 1,
            role_counts: RoleCounts {
                logs: 3,
                proxies: 3,
                grv_proxies: 1,
                commit_proxies: 2,
                resolvers: 1,
                log_routers: -1,
                remote_logs: -1,
                ..Default::default()
            },
            version_flags: VersionFlags {
                log_spill: 2,
                log_version: 0,
            },
            excluded_servers: vec![ExcludedServers {
                address: "1.2.3.4".into(),
                ..Default::default()
            }],
            storage_migration_type: Some("disabled".into()),
            perpetual_storage_wiggle: Some(0),
            perpetual_storage_wiggle_locality: Some("0".into()),
            perpetual_storage_wiggle_engine: Some("none".into()),
            ..Default::default()
        };
        let spec = DatabaseConfiguration::default();
        assert_eq!(
            live.normalized(&spec),
            DatabaseConfiguration::desired(&spec)
        );
    }

    #[test]
    fn regions_sort_by_main_priority_then_id() {
        let dc = |id: &str, priority: i64, satellite: i64| DataCenter {
            id: id.into(),
            priority,
            satellite,
        };
        let c = DatabaseConfiguration {
            regions: vec![
                Region {
                    data_centers: vec![dc("s1", 1, 1), dc("b", 0, 0)],
                    ..Default::default()
                },
                Region {
                    data_centers: vec![dc("a", 1, 0)],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let n = c.normalized(&c);
        assert_eq!(n.regions[0].data_centers[0].id, "a");
        assert_eq!(n.regions[1].data_centers[0].id, "b");
        assert_eq!(n.regions[1].data_centers[1].id, "s1");
    }

    #[test]
    fn js_escape_matches_go() {
        assert_eq!(
            js_escape(r#"{"a":"<&>'="}"#),
            r#"{\"a\":\"\u003C\u0026\u003E\'\u003D\"}"#
        );
    }
}
