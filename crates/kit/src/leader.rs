//! Leader election on a `coordination.k8s.io/v1` Lease, in the manner of client-go.
//!
//! Contract:
//! - At most one contender considers itself leader at a time, provided clocks agree to within
//!   `lease_duration - renew_deadline`: a holder that cannot renew within `renew_deadline`
//!   steps down before its lease (`renewTime + leaseDurationSeconds`) expires for others.
//! - Writes are optimistic: every update is a replace carrying the `resourceVersion` that was
//!   read, so of two racing contenders one gets 409 Conflict and stays a follower.
//! - Another contender takes over once the holder releases (graceful shutdown clears
//!   `holderIdentity`, so the next retry acquires at once) or once the lease expires.
//! - [`LeaderElector::subscribe`] reports leadership; it turns `false` *before* the lease is
//!   released, so observers never see two leaders. [`LeaderElector::run`] returns
//!   [`LeaderError::Lost`] when leadership is lost: the caller must stop reconciling, and the
//!   simplest correct reaction (as in controller-runtime) is to exit the process.
//! - [`decide`] is the whole decision, pure over `(lease, now, identity)`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{Api, Client, api::PostParams};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

/// Where and how to contend for leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Lease object name.
    pub name: String,
    /// Lease object namespace.
    pub namespace: String,
    /// This contender's identity, written to `holderIdentity`; unique per replica.
    pub identity: String,
    /// How long others wait after the last renewal before taking over (default 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before stepping down (default 10 s).
    pub renew_deadline: Duration,
    /// Pause between attempts, both to acquire and to renew (default 2 s).
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults and [`default_identity`].
    pub fn new(name: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Checks the timing invariants that make "one leader at a time" hold.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let invalid = |why: &str| Err(LeaderError::InvalidConfig(why.to_owned()));
        if self.name.is_empty() || self.namespace.is_empty() || self.identity.is_empty() {
            return invalid("lease name, namespace and identity must be non-empty");
        }
        if self.lease_duration.as_secs() < 1 || self.lease_duration.subsec_nanos() != 0 {
            return invalid("lease_duration must be a whole number of seconds, at least 1");
        }
        if self.renew_deadline >= self.lease_duration {
            return invalid("renew_deadline must be shorter than lease_duration");
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return invalid("retry_period must be non-zero and shorter than renew_deadline");
        }
        Ok(())
    }
}

/// `POD_NAME` when set (the downward API), else the hostname plus a random suffix, so two
/// processes on one host never share an identity.
pub fn default_identity() -> String {
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    format!("{host}_{:016x}", random_u64())
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS; mixing in pid and time keeps values distinct even
    // where the seed is reused within one process.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_i128(Timestamp::now().as_nanosecond());
    h.finish()
}

/// Why election stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Leadership was held and then lost; reconciling must stop.
    #[error("lost leadership of lease {namespace}/{name} (identity {identity})")]
    Lost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Our identity.
        identity: String,
    },
    /// The configuration cannot guarantee a single leader.
    #[error("invalid leader election config: {0}")]
    InvalidConfig(String),
    /// The election task failed unexpectedly (panicked).
    #[error("leader election task failed: {0}")]
    Task(String),
}

/// What to do with the Lease as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it, holding it.
    Create,
    /// We hold it: write a fresh `renewTime`.
    Renew,
    /// Nobody holds it, or the holder's lease expired: take it over.
    Acquire,
    /// Another holder's lease is valid until `expires`.
    Follow {
        /// The current holder.
        holder: String,
        /// When its lease runs out unless renewed.
        expires: Timestamp,
    },
}

/// When the holder's lease runs out: `renewTime` (else `acquireTime`) plus the duration.
/// `None` means it is not held in any meaningful way (client-go treats it the same).
pub fn expiry(spec: &LeaseSpec) -> Option<Timestamp> {
    let MicroTime(base) = spec
        .renew_time
        .clone()
        .or_else(|| spec.acquire_time.clone())?;
    let secs = spec.lease_duration_seconds.filter(|s| *s > 0)?;
    Some(
        base.checked_add(SignedDuration::from_secs(i64::from(secs)))
            .unwrap_or(Timestamp::MAX),
    )
}

/// The pure election decision for contender `me` at `now`.
pub fn decide(lease: Option<&Lease>, now: Timestamp, me: &str) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let Some(spec) = lease.spec.as_ref() else {
        return Decision::Acquire;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() {
        return Decision::Acquire;
    }
    if holder == me {
        return Decision::Renew;
    }
    match expiry(spec) {
        Some(expires) if expires >= now => Decision::Follow {
            holder: holder.to_owned(),
            expires,
        },
        _ => Decision::Acquire,
    }
}

/// The spec to write for `decision`, or `None` when following.
pub fn claim(
    old: Option<&LeaseSpec>,
    decision: &Decision,
    now: Timestamp,
    me: &str,
    duration: Duration,
) -> Option<LeaseSpec> {
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    let stamp = Some(MicroTime(now));
    let old = old.cloned().unwrap_or_default();
    let fresh = LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(seconds),
        acquire_time: stamp.clone(),
        renew_time: stamp.clone(),
        ..old.clone()
    };
    match decision {
        Decision::Follow { .. } => None,
        Decision::Create => Some(LeaseSpec {
            lease_transitions: Some(0),
            ..fresh
        }),
        Decision::Renew => Some(LeaseSpec {
            acquire_time: old.acquire_time.or(stamp),
            ..fresh
        }),
        Decision::Acquire => {
            let transitions = old.lease_transitions.unwrap_or(0);
            let changed = old.holder_identity.as_deref() != Some(me);
            let transitions = if changed {
                transitions.saturating_add(1)
            } else {
                transitions
            };
            Some(LeaseSpec {
                lease_transitions: Some(transitions),
                ..fresh
            })
        }
    }
}

/// The spec that gives the lease up so the next contender acquires at once (as client-go's
/// `ReleaseOnCancel`: no holder, a one-second duration).
pub fn released(old: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        acquire_time: Some(MicroTime(now)),
        ..old.clone()
    }
}

/// The result of one acquire-or-renew round trip.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Leading,
    Following(String),
    /// Lost an optimistic-concurrency race or hit an API error; try again.
    Retry(String),
}

/// Contends for one Lease; see the module docs for the guarantees.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    leading: watch::Sender<bool>,
}

impl LeaderElector {
    /// An elector for `config`, not yet contending.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            leading: watch::Sender::new(false),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// `true` while this contender leads.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Contends until `shutdown` (then releases the lease if held and returns `Ok`) or until
    /// leadership is lost (returns [`LeaderError::Lost`]).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), LeaderError> {
        self.config.validate()?;
        let cfg = &self.config;
        let mut renewed_at: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let budget = renewed_at.map_or(cfg.renew_deadline, |t| {
                (t + cfg.renew_deadline).saturating_duration_since(started)
            });
            let attempt = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                r = tokio::time::timeout(budget, self.try_acquire_or_renew()) => {
                    r.unwrap_or_else(|_| Attempt::Retry("timed out".into()))
                }
            };
            renewed_at = self.observe(attempt, renewed_at, started)?;
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(cfg.retry_period) => {}
            }
        }
        // Step down before releasing, so no observer ever sees two leaders. Release even if
        // not known to lead: a write that landed as shutdown interrupted it may have won.
        self.leading.send_replace(false);
        self.release().await;
        Ok(())
    }

    /// Applies one attempt's outcome; returns the new last-renewal time (`None`: following).
    fn observe(
        &self,
        attempt: Attempt,
        renewed_at: Option<Instant>,
        started: Instant,
    ) -> Result<Option<Instant>, LeaderError> {
        let cfg = &self.config;
        match (attempt, renewed_at) {
            (Attempt::Leading, was) => {
                if was.is_none() {
                    tracing::info!(lease = %cfg.name, identity = %cfg.identity, "acquired leadership");
                    self.leading.send_replace(true);
                }
                Ok(Some(started))
            }
            (Attempt::Following(holder), None) => {
                tracing::debug!(lease = %cfg.name, %holder, "following");
                Ok(None)
            }
            (Attempt::Retry(why), Some(t)) if t.elapsed() < cfg.renew_deadline => {
                tracing::warn!(lease = %cfg.name, %why, "lease renewal failed, retrying");
                Ok(Some(t))
            }
            (Attempt::Retry(why), None) => {
                tracing::debug!(lease = %cfg.name, %why, "could not acquire lease");
                Ok(None)
            }
            (Attempt::Following(_) | Attempt::Retry(_), Some(_)) => {
                self.leading.send_replace(false);
                tracing::error!(lease = %cfg.name, identity = %cfg.identity, "lost leadership");
                Err(LeaderError::Lost {
                    namespace: cfg.namespace.clone(),
                    name: cfg.name.clone(),
                    identity: cfg.identity.clone(),
                })
            }
        }
    }

    async fn try_acquire_or_renew(&self) -> Attempt {
        let cfg = &self.config;
        let current = match self.api.get_opt(&cfg.name).await {
            Ok(l) => l,
            Err(e) => return Attempt::Retry(format!("get lease: {e}")),
        };
        let now = Timestamp::now();
        let decision = decide(current.as_ref(), now, &cfg.identity);
        let old_spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let Some(spec) = claim(old_spec, &decision, now, &cfg.identity, cfg.lease_duration) else {
            return match decision {
                Decision::Follow { holder, .. } => Attempt::Following(holder),
                _ => Attempt::Retry("nothing to write".into()),
            };
        };
        let pp = PostParams::default();
        let written = match current {
            None => self.api.create(&pp, &self.new_lease(spec)).await,
            Some(mut lease) => {
                // The read resourceVersion stays in metadata: replace is a compare-and-swap.
                lease.spec = Some(spec);
                self.api.replace(&cfg.name, &pp, &lease).await
            }
        };
        match written {
            Ok(_) => Attempt::Leading,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Attempt::Retry("lost the race (409)".into())
            }
            Err(e) => Attempt::Retry(format!("write lease: {e}")),
        }
    }

    fn new_lease(&self, spec: LeaseSpec) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        }
    }

    /// Gives the lease up if we still hold it; failures only delay the successor to expiry.
    async fn release(&self) {
        let cfg = &self.config;
        let attempt = async {
            let mut lease = self.api.get(&cfg.name).await?;
            let Some(spec) = lease.spec.as_ref() else {
                return Ok(false);
            };
            if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(released(spec, Timestamp::now()));
            self.api
                .replace(&cfg.name, &PostParams::default(), &lease)
                .await?;
            Ok::<_, kube::Error>(true)
        };
        match tokio::time::timeout(cfg.renew_deadline, attempt).await {
            Ok(Ok(true)) => tracing::info!(lease = %cfg.name, "released leadership"),
            Ok(Ok(false)) => {
                tracing::debug!(lease = %cfg.name, "lease no longer ours, nothing to release")
            }
            Ok(Err(e)) => tracing::warn!(lease = %cfg.name, error = %e, "releasing lease failed"),
            Err(_) => tracing::warn!(lease = %cfg.name, "releasing lease timed out"),
        }
    }
}

/// Runs `work` only while `elector` leads.
///
/// Waits for leadership (returning `Ok(None)` if `shutdown` comes first), then runs
/// `work(token)`. The token is cancelled on shutdown, so the work can drain gracefully while
/// the lease is still renewed; the lease is released only after the work has returned. If
/// leadership is lost, the work future is dropped at once (kube-runtime's spawned reconciles
/// are aborted with it), the token is cancelled, and [`LeaderError::Lost`] is returned.
pub async fn run_while_leading<F, Fut, T>(
    elector: LeaderElector,
    shutdown: CancellationToken,
    work: F,
) -> Result<Option<T>, LeaderError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = T>,
{
    let mut leading = elector.subscribe();
    let stop_election = CancellationToken::new();
    let mut election = tokio::spawn(elector.run(stop_election.clone()));
    let joined = |r: Result<Result<(), LeaderError>, tokio::task::JoinError>| {
        r.unwrap_or_else(|e| Err(LeaderError::Task(e.to_string())))
    };
    // `Some(false)`: the watch closed, so the election task has ended.
    let became_leader = tokio::select! {
        () = shutdown.cancelled() => None,
        r = &mut election => return joined(r).map(|()| None),
        r = leading.wait_for(|l| *l) => Some(r.is_ok()),
    };
    if became_leader != Some(true) {
        stop_election.cancel();
        return joined(election.await).map(|()| None);
    }
    let work_token = shutdown.child_token();
    let outcome = tokio::select! {
        out = work(work_token.clone()) => out,
        r = &mut election => {
            work_token.cancel();
            joined(r)?;
            // `run` returns Ok only once `stop_election` is cancelled, which has not happened.
            return Err(LeaderError::Task("election ended while leading".into()));
        }
    };
    stop_election.cancel();
    joined(election.await)?;
    Ok(Some(outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "me";

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn lease(holder: Option<&str>, renewed: &str, secs: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(ts(renewed))),
                lease_duration_seconds: Some(secs),
                lease_transitions: Some(4),
                acquire_time: Some(MicroTime(ts("2025-01-01T00:00:00Z"))),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn missing_lease_is_created() {
        assert_eq!(
            decide(None, ts("2025-01-01T00:00:00Z"), ME),
            Decision::Create
        );
    }

    #[test]
    fn own_lease_is_renewed_even_if_expired() {
        let l = lease(Some(ME), "2025-01-01T00:00:00Z", 15);
        assert_eq!(
            decide(Some(&l), ts("2025-01-01T01:00:00Z"), ME),
            Decision::Renew
        );
    }

    #[test]
    fn others_valid_lease_is_followed_until_expiry() {
        let l = lease(Some("other"), "2025-01-01T00:00:00Z", 15);
        let expected = Decision::Follow {
            holder: "other".into(),
            expires: ts("2025-01-01T00:00:15Z"),
        };
        assert_eq!(decide(Some(&l), ts("2025-01-01T00:00:14Z"), ME), expected);
        assert_eq!(decide(Some(&l), ts("2025-01-01T00:00:15Z"), ME), expected);
        assert_eq!(
            decide(Some(&l), ts("2025-01-01T00:00:15.001Z"), ME),
            Decision::Acquire
        );
    }

    #[test]
    fn released_or_malformed_lease_is_acquired_at_once() {
        let now = ts("2025-01-01T00:00:01Z");
        for holder in [None, Some("")] {
            let l = lease(holder, "2025-01-01T00:00:00Z", 15);
            assert_eq!(decide(Some(&l), now, ME), Decision::Acquire);
        }
        let no_spec = Lease {
            metadata: ObjectMeta::default(),
            spec: None,
        };
        assert_eq!(decide(Some(&no_spec), now, ME), Decision::Acquire);
        let mut no_duration = lease(Some("other"), "2025-01-01T00:00:00Z", 15);
        if let Some(s) = no_duration.spec.as_mut() {
            s.lease_duration_seconds = None;
        }
        assert_eq!(decide(Some(&no_duration), now, ME), Decision::Acquire);
    }

    #[test]
    fn release_then_decide_lets_the_next_contender_in() {
        let held = lease(Some("other"), "2025-01-01T00:00:00Z", 15);
        let now = ts("2025-01-01T00:00:01Z");
        let spec = held.spec.as_ref().map(|s| released(s, now));
        let after = Lease {
            metadata: ObjectMeta::default(),
            spec,
        };
        assert_eq!(decide(Some(&after), now, ME), Decision::Acquire);
        assert_eq!(after.spec.and_then(|s| s.lease_transitions), Some(4));
    }

    #[test]
    fn claims_write_holder_times_and_transitions() {
        let now = ts("2025-01-01T00:01:00Z");
        let d = Duration::from_secs(15);
        let created = claim(None, &Decision::Create, now, ME, d).expect("create");
        assert_eq!(created.holder_identity.as_deref(), Some(ME));
        assert_eq!(
            (created.lease_duration_seconds, created.lease_transitions),
            (Some(15), Some(0))
        );
        assert_eq!(created.renew_time, Some(MicroTime(now)));

        let mine = lease(Some(ME), "2025-01-01T00:00:30Z", 15).spec;
        let renewed = claim(mine.as_ref(), &Decision::Renew, now, ME, d).expect("renew");
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
        assert_eq!(
            renewed.acquire_time,
            Some(MicroTime(ts("2025-01-01T00:00:00Z")))
        );
        assert_eq!(renewed.lease_transitions, Some(4));

        let theirs = lease(Some("other"), "2025-01-01T00:00:00Z", 15).spec;
        let taken = claim(theirs.as_ref(), &Decision::Acquire, now, ME, d).expect("acquire");
        assert_eq!(taken.holder_identity.as_deref(), Some(ME));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_transitions, Some(5));

        let follow = Decision::Follow {
            holder: "other".into(),
            expires: now,
        };
        assert_eq!(claim(theirs.as_ref(), &follow, now, ME, d), None);
    }

    #[test]
    fn config_defaults_match_client_go_and_are_valid() {
        let c = LeaseConfig::new("op-lock", "ops");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn unsafe_timings_are_rejected() {
        let base = LeaseConfig::new("op-lock", "ops");
        let bad = [
            LeaseConfig {
                renew_deadline: Duration::from_secs(15),
                ..base.clone()
            },
            LeaseConfig {
                retry_period: Duration::from_secs(10),
                ..base.clone()
            },
            LeaseConfig {
                retry_period: Duration::ZERO,
                ..base.clone()
            },
            LeaseConfig {
                lease_duration: Duration::from_millis(15_500),
                ..base.clone()
            },
            LeaseConfig {
                identity: String::new(),
                ..base.clone()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.validate(), Err(LeaderError::InvalidConfig(_))),
                "{c:?}"
            );
        }
    }

    #[test]
    fn default_identities_are_unique_per_call() {
        // POD_NAME is not set under `cargo test`; if it is, identities come from it.
        if std::env::var_os("POD_NAME").is_none() {
            let (a, b) = (default_identity(), default_identity());
            assert_ne!(a, b);
            assert!(a.contains('_'));
        }
    }
}
