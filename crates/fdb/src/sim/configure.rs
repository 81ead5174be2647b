//! `configure [new] <words>` back into a [`DatabaseConfiguration`]: the inverse of
//! [`DatabaseConfiguration::configuration_string`], so the fake records exactly the string the
//! admin client sent (`parse(c.configuration_string()).configuration_string()` is the same
//! string; tested below).

use crate::crd::{DatabaseConfiguration, Region, STORAGE_ENGINES};

const REDUNDANCY_MODES: [&str; 4] = ["single", "double", "triple", "three_data_hall"];

/// Parses the words after `configure`: whether `new` was given, and the configuration.
pub fn parse(words: &[String]) -> Result<(bool, DatabaseConfiguration), String> {
    let mut new = false;
    let mut c = DatabaseConfiguration::default();
    for word in words {
        let word = word.as_str();
        if word == "new" {
            new = true;
        } else if REDUNDANCY_MODES.contains(&word) {
            c.redundancy_mode = word.to_owned();
        } else if STORAGE_ENGINES.contains(&word) {
            c.storage_engine = word.to_owned();
        } else if let Some((key, value)) = word.split_once(":=") {
            let n = number(key, value)?;
            match key {
                "log_spill" => c.version_flags.log_spill = n,
                "log_version" => c.version_flags.log_version = n,
                _ => return Err(format!("Unknown option `{key}'")),
            }
        } else if let Some((key, value)) = word.split_once('=') {
            set(&mut c, key, value)?;
        } else {
            return Err(format!("Unknown option `{word}'"));
        }
    }
    Ok((new, c))
}

fn number(key: &str, value: &str) -> Result<i64, String> {
    value
        .parse()
        .map_err(|_| format!("Invalid value `{value}' for option `{key}'"))
}

fn set(c: &mut DatabaseConfiguration, key: &str, value: &str) -> Result<(), String> {
    let counts = &mut c.role_counts;
    match key {
        "usable_regions" => c.usable_regions = number(key, value)?,
        "logs" => counts.logs = number(key, value)?,
        "resolvers" => counts.resolvers = number(key, value)?,
        "log_routers" => counts.log_routers = number(key, value)?,
        "remote_logs" => counts.remote_logs = number(key, value)?,
        "proxies" => counts.proxies = number(key, value)?,
        "commit_proxies" => counts.commit_proxies = number(key, value)?,
        "grv_proxies" => counts.grv_proxies = number(key, value)?,
        "regions" => c.regions = regions(value)?,
        "storage_migration_type" => c.storage_migration_type = Some(value.to_owned()),
        "perpetual_storage_wiggle" => c.perpetual_storage_wiggle = Some(number(key, value)?),
        "perpetual_storage_wiggle_locality" => {
            c.perpetual_storage_wiggle_locality = Some(value.to_owned());
        }
        "perpetual_storage_wiggle_engine" => {
            c.perpetual_storage_wiggle_engine = Some(value.to_owned());
        }
        _ => return Err(format!("Unknown option `{key}'")),
    }
    Ok(())
}

fn regions(value: &str) -> Result<Vec<Region>, String> {
    if value == "[]" {
        return Ok(Vec::new());
    }
    serde_json::from_str(&js_unescape(value)?).map_err(|e| format!("Invalid regions: {e}"))
}

// Undoes the JavaScript-style escaping the admin client applies to the regions' JSON.
fn js_unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(c @ ('\\' | '\'' | '"')) => out.push(c),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("bad escape \\u{hex}"))?;
                out.push(code);
            }
            other => return Err(format!("bad escape \\{}", other.unwrap_or(' '))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::DataCenter;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    fn round_trip(c: &DatabaseConfiguration) {
        let sent = c.configuration_string().unwrap();
        let (new, parsed) = parse(&words(&format!("new {sent}"))).unwrap();
        assert!(new);
        assert_eq!(parsed.configuration_string().unwrap(), sent);
    }

    #[test]
    fn what_the_client_sends_is_what_the_fake_records() {
        round_trip(&DatabaseConfiguration::desired(
            &DatabaseConfiguration::default(),
        ));
        let mut c = DatabaseConfiguration::desired(&DatabaseConfiguration {
            redundancy_mode: "triple".into(),
            storage_engine: "ssd-redwood-1".into(),
            ..Default::default()
        });
        c.role_counts.commit_proxies = 4;
        c.role_counts.grv_proxies = 2;
        c.version_flags.log_spill = 2;
        c.storage_migration_type = Some("gradual".into());
        c.perpetual_storage_wiggle = Some(1);
        c.perpetual_storage_wiggle_locality = Some("zoneid:z1".into());
        c.usable_regions = 2;
        c.regions = vec![Region {
            data_centers: vec![
                DataCenter {
                    id: "dc<1>".into(),
                    priority: 1,
                    satellite: 0,
                },
                DataCenter {
                    id: "dc2".into(),
                    priority: 0,
                    satellite: 1,
                },
            ],
            satellite_logs: 3,
            satellite_redundancy_mode: "one_satellite_double".into(),
        }];
        round_trip(&c);
    }

    #[test]
    fn unknown_words_are_refused_by_name() {
        assert_eq!(
            parse(&words("double bogus")).unwrap_err(),
            "Unknown option `bogus'"
        );
        assert!(parse(&words("logs=many")).unwrap_err().contains("logs"));
        assert!(!parse(&words("double ssd-2")).unwrap().0, "no `new'");
    }
}
