//! `analyze --analyze-status`: upstream's findings in the machine-readable status.
//!
//! Contract of [`analyze_status`]: every message of every process (in process-ID order) is
//! an issue, one `✖` line each, naming the process' `instance_id`, its address without flags,
//! the message's name, type and time; with auto-fix, each such process whose address is an IP
//! is to be restarted (one `kill` per process, as upstream), the others are skipped with a
//! note. Processes without messages are not mentioned.

use jiff::Timestamp;

use crate::admin::status::{FdbStatus, LOCALITY_INSTANCE_ID};
use crate::crd::ProcessAddress;

/// What the status showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusFindings {
    /// The `✖` lines.
    pub lines: Vec<String>,
    /// Notes for processes auto-fix cannot restart.
    pub notes: Vec<String>,
    /// With auto-fix: the addresses (without flags) to restart, one after the other.
    pub restart: Vec<String>,
}

impl StatusFindings {
    /// Whether anything is wrong.
    pub fn found_issues(&self) -> bool {
        !self.lines.is_empty()
    }
}

/// The findings in `status` (see the module docs).
pub fn analyze_status(status: &FdbStatus, auto_fix: bool) -> StatusFindings {
    let mut f = StatusFindings::default();
    for p in status.cluster.processes.values() {
        if p.messages.is_empty() {
            continue;
        }
        let id = p
            .locality
            .get(LOCALITY_INSTANCE_ID)
            .cloned()
            .unwrap_or_default();
        let parsed = ProcessAddress::parse(&p.address).ok();
        let address = parsed
            .as_ref()
            .map_or_else(|| p.address.clone(), ProcessAddress::without_flags);
        for m in &p.messages {
            let time = Timestamp::from_second(m.time as i64).unwrap_or(Timestamp::UNIX_EPOCH);
            f.lines.push(format!(
                "Process: {id} with address: {address} error: {} type: {}, time: {time}",
                m.name, m.kind
            ));
        }
        if !auto_fix {
            continue;
        }
        if parsed.as_ref().and_then(ProcessAddress::ip).is_none() {
            f.notes.push(format!(
                "Skipping auto-fix for process {id}: address {address:?} is not a valid IP"
            ));
            continue;
        }
        f.restart.push(address);
    }
    f
}

/// The `fdbcli --exec` command upstream restarts one process with (`kill` first fills
/// fdbcli's list of known processes).
pub fn kill_command(address: &str) -> String {
    format!("kill; kill {address}; sleep 5; status")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(processes: serde_json::Value) -> FdbStatus {
        serde_json::from_value(json!({"cluster": {"processes": processes}})).expect("status")
    }

    #[test]
    fn every_message_is_an_issue_and_auto_fix_restarts_ip_processes() {
        let s = status(json!({
            "b": {"address": "10.1.0.2:4501:tls", "locality": {"instance_id": "storage-2"},
                  "messages": [{"name": "io_timeout", "type": "error", "time": 1_700_000_000.5},
                               {"name": "file_open_error", "type": "warn", "time": 1_700_000_060.0}]},
            "a": {"address": "10.1.0.1:4501", "locality": {"instance_id": "storage-1"}},
            "c": {"address": "c1-log-1.c1.ns.svc.cluster.local:4501",
                  "locality": {"instance_id": "log-1"},
                  "messages": [{"name": "io_error", "type": "error", "time": 1_700_000_120.0}]},
        }));
        let quiet = analyze_status(&s, false);
        assert_eq!(
            quiet.lines,
            [
                "Process: storage-2 with address: 10.1.0.2:4501 error: io_timeout type: error, time: 2023-11-14T22:13:20Z",
                "Process: storage-2 with address: 10.1.0.2:4501 error: file_open_error type: warn, time: 2023-11-14T22:14:20Z",
                "Process: log-1 with address: c1-log-1.c1.ns.svc.cluster.local:4501 error: io_error type: error, time: 2023-11-14T22:15:20Z",
            ]
        );
        assert!(quiet.found_issues());
        assert!(quiet.restart.is_empty() && quiet.notes.is_empty());

        let fix = analyze_status(&s, true);
        assert_eq!(fix.lines, quiet.lines);
        assert_eq!(fix.restart, ["10.1.0.2:4501"]);
        assert_eq!(
            fix.notes,
            [
                "Skipping auto-fix for process log-1: address \"c1-log-1.c1.ns.svc.cluster.local:4501\" is not a valid IP"
            ]
        );
    }

    #[test]
    fn a_status_without_messages_has_no_issue() {
        let s = status(json!({"a": {"address": "10.1.0.1:4501", "messages": []}}));
        assert_eq!(analyze_status(&s, true), StatusFindings::default());
        assert!(!StatusFindings::default().found_issues());
    }

    #[test]
    fn the_kill_command_is_upstreams() {
        assert_eq!(
            kill_command("10.1.0.2:4501"),
            "kill; kill 10.1.0.2:4501; sleep 5; status"
        );
    }
}
