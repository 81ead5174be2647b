//! Which fault a request gets: a pure function of the seed, the request's sequence number and
//! what kind of request it is.
//!
//! Contract:
//! - [`Plan::decide`] is deterministic: the same seed, sequence number and request class give
//!   the same [`Fault`], so a failing run is replayed with its seed (requests are numbered in
//!   arrival order, which concurrency can permute; the fault log names each request so a replay
//!   can be compared).
//! - Rates are probabilities per request, checked in a fixed order; their sum is capped at 1.
//!   Write-only faults (409 Conflict, a reset after the write was applied) are never given to
//!   reads; watch faults only to watches; a watch never gets a plain error status (kube's
//!   watcher would treat it like any failed request, which the other faults already cover).
//! - A watch resumed from a resourceVersion may get `Gone` (410, "too old resource version"),
//!   as the API server answers once its watch cache has moved on.

use std::time::Duration;

/// What a request is, as far as faults go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// GET or LIST.
    Read,
    /// POST, PUT, PATCH or DELETE.
    Write,
    /// A watch started from scratch (no resourceVersion, or "0").
    Watch,
    /// A watch resumed from a resourceVersion.
    WatchResume,
}

/// The fault given to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded untouched.
    None,
    /// Forwarded after this delay.
    Latency(Duration),
    /// Answered 409 Conflict without forwarding (writes).
    Conflict,
    /// Answered 429 Too Many Requests with `Retry-After` seconds, without forwarding.
    Throttle(u64),
    /// Answered 500 Internal Server Error without forwarding.
    ServerError,
    /// Answered 503 Service Unavailable without forwarding.
    Unavailable,
    /// The connection is reset before the request is forwarded.
    ResetBefore,
    /// Forwarded, applied by the API server, then the connection is reset before the client
    /// gets the answer (writes).
    ResetAfter,
    /// A watch forwarded and cut after this long.
    CutWatch(Duration),
    /// A resumed watch answered with a 410 Gone ERROR event.
    Gone,
}

impl Fault {
    /// A short stable name, for counts and the log.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Latency(_) => "latency",
            Fault::Conflict => "conflict_409",
            Fault::Throttle(_) => "throttle_429",
            Fault::ServerError => "error_500",
            Fault::Unavailable => "unavailable_503",
            Fault::ResetBefore => "reset_before_write",
            Fault::ResetAfter => "reset_after_write",
            Fault::CutWatch(_) => "watch_cut",
            Fault::Gone => "watch_gone_410",
        }
    }
}

/// Probabilities per request of each fault.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    /// 409 Conflict on a write.
    pub conflict: f64,
    /// 429 on any non-watch request.
    pub throttle: f64,
    /// 500 on any non-watch request.
    pub server_error: f64,
    /// 503 on any non-watch request.
    pub unavailable: f64,
    /// Reset before forwarding, any non-watch request.
    pub reset_before: f64,
    /// Reset after the API server applied a write.
    pub reset_after: f64,
    /// Added latency on any non-watch request, up to `max_latency`.
    pub latency: f64,
    /// Upper bound of added latency.
    pub max_latency: Duration,
    /// A watch is cut, after between 0.2 s and `max_watch_life`.
    pub watch_cut: f64,
    /// Upper bound of a cut watch's life.
    pub max_watch_life: Duration,
    /// A resumed watch gets 410 Gone.
    pub watch_gone: f64,
}

impl Rates {
    /// No faults at all: the proxy forwards everything.
    pub fn none() -> Self {
        Self {
            conflict: 0.0,
            throttle: 0.0,
            server_error: 0.0,
            unavailable: 0.0,
            reset_before: 0.0,
            reset_after: 0.0,
            latency: 0.0,
            max_latency: Duration::ZERO,
            watch_cut: 0.0,
            max_watch_life: Duration::from_secs(5),
            watch_gone: 0.0,
        }
    }

    /// The soak's default mix: about one request in six is disturbed.
    pub fn soak() -> Self {
        Self {
            conflict: 0.04,
            throttle: 0.02,
            server_error: 0.02,
            unavailable: 0.02,
            reset_before: 0.02,
            reset_after: 0.03,
            latency: 0.05,
            max_latency: Duration::from_millis(400),
            watch_cut: 0.3,
            max_watch_life: Duration::from_secs(8),
            watch_gone: 0.3,
        }
    }
}

/// A seeded fault plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The seed every decision derives from.
    pub seed: u64,
    /// The rates.
    pub rates: Rates,
}

/// The seed of stream `k` of a run seeded `seed` (a run with several proxies or processes
/// gives each its own): stream 0 is `seed` itself, the others are mixed from it, so the
/// streams are independent of each other but replay from the one seed.
pub fn derive_seed(seed: u64, k: usize) -> u64 {
    if k == 0 {
        return seed;
    }
    let mut rng = SplitMix(seed ^ (k as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    rng.next()
}

impl Plan {
    /// The plan of the `k`-th proxy of a run: the same rates, seed [`derive_seed`]`(seed, k)`.
    #[must_use]
    pub fn derived(&self, k: usize) -> Self {
        Self {
            seed: derive_seed(self.seed, k),
            rates: self.rates.clone(),
        }
    }

    /// The fault for request number `n` of class `class`.
    pub fn decide(&self, n: u64, class: Class) -> Fault {
        let mut rng = SplitMix(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let roll = rng.unit();
        let extra = rng.unit();
        let r = &self.rates;
        let table: &[(f64, Fault)] = match class {
            Class::Write => &[
                (r.conflict, Fault::Conflict),
                (r.throttle, Fault::Throttle(1)),
                (r.server_error, Fault::ServerError),
                (r.unavailable, Fault::Unavailable),
                (r.reset_before, Fault::ResetBefore),
                (r.reset_after, Fault::ResetAfter),
                (r.latency, Fault::Latency(Duration::ZERO)),
            ],
            Class::Read => &[
                (r.throttle, Fault::Throttle(1)),
                (r.server_error, Fault::ServerError),
                (r.unavailable, Fault::Unavailable),
                (r.reset_before, Fault::ResetBefore),
                (r.latency, Fault::Latency(Duration::ZERO)),
            ],
            Class::Watch => &[(r.watch_cut, Fault::CutWatch(Duration::ZERO))],
            Class::WatchResume => &[
                (r.watch_gone, Fault::Gone),
                (r.watch_cut, Fault::CutWatch(Duration::ZERO)),
            ],
        };
        let mut edge = 0.0;
        for (rate, fault) in table {
            edge += rate.max(0.0);
            if roll < edge.min(1.0) {
                return match fault {
                    Fault::Latency(_) => Fault::Latency(r.max_latency.mul_f64(extra)),
                    Fault::CutWatch(_) => {
                        let min = Duration::from_millis(200);
                        let span = r.max_watch_life.saturating_sub(min);
                        Fault::CutWatch(min + span.mul_f64(extra))
                    }
                    other => *other,
                };
            }
        }
        Fault::None
    }
}

/// splitmix64: a tiny, well-mixed generator; good enough to spread faults, and ours.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The class of a request from its method and query.
pub fn classify(method: &http::Method, query: Option<&str>) -> Class {
    let params: Vec<(&str, &str)> = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let param = |k: &str| params.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    if param("watch").is_some_and(|v| v == "true" || v == "1") {
        return match param("resourceVersion") {
            Some(rv) if !rv.is_empty() && rv != "0" => Class::WatchResume,
            _ => Class::Watch,
        };
    }
    match *method {
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS => Class::Read,
        _ => Class::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(plan: &Plan, class: Class, n: u64) -> std::collections::BTreeMap<&'static str, u64> {
        let mut m = std::collections::BTreeMap::new();
        for i in 0..n {
            *m.entry(plan.decide(i, class).name()).or_default() += 1;
        }
        m
    }

    #[test]
    fn decisions_replay_from_the_seed() {
        let plan = Plan {
            seed: 42,
            rates: Rates::soak(),
        };
        let a: Vec<Fault> = (0..500).map(|i| plan.decide(i, Class::Write)).collect();
        let b: Vec<Fault> = (0..500).map(|i| plan.decide(i, Class::Write)).collect();
        assert_eq!(a, b);
        let other = Plan { seed: 43, ..plan };
        let c: Vec<Fault> = (0..500).map(|i| other.decide(i, Class::Write)).collect();
        assert_ne!(a, c, "another seed, another run");
    }

    #[test]
    fn rates_are_respected_roughly_and_faults_fit_the_class() {
        let plan = Plan {
            seed: 7,
            rates: Rates::soak(),
        };
        let writes = counts(&plan, Class::Write, 20_000);
        let conflict = writes["conflict_409"] as f64 / 20_000.0;
        assert!((0.03..0.05).contains(&conflict), "{writes:?}");
        let reads = counts(&plan, Class::Read, 20_000);
        assert!(!reads.contains_key("conflict_409") && !reads.contains_key("reset_after_write"));
        let watches = counts(&plan, Class::Watch, 2_000);
        assert_eq!(
            watches.keys().copied().collect::<Vec<_>>(),
            ["none", "watch_cut"]
        );
        let resumes = counts(&plan, Class::WatchResume, 2_000);
        assert!(resumes.contains_key("watch_gone_410"));
    }

    #[test]
    fn no_rates_no_faults() {
        let plan = Plan {
            seed: 1,
            rates: Rates::none(),
        };
        for class in [Class::Read, Class::Write, Class::Watch, Class::WatchResume] {
            assert!((0..1000).all(|i| plan.decide(i, class) == Fault::None));
        }
    }

    #[test]
    fn bounded_latency_and_watch_life() {
        let plan = Plan {
            seed: 3,
            rates: Rates::soak(),
        };
        for i in 0..5000 {
            if let Fault::Latency(d) = plan.decide(i, Class::Read) {
                assert!(d <= Duration::from_millis(400));
            }
            if let Fault::CutWatch(d) = plan.decide(i, Class::Watch) {
                assert!(d >= Duration::from_millis(200) && d <= Duration::from_secs(8));
            }
        }
    }

    #[test]
    fn requests_are_classified_like_the_api_server_sees_them() {
        let get = http::Method::GET;
        assert_eq!(classify(&get, None), Class::Read);
        assert_eq!(classify(&get, Some("labelSelector=a%3Db")), Class::Read);
        assert_eq!(classify(&http::Method::PATCH, None), Class::Write);
        assert_eq!(classify(&http::Method::DELETE, None), Class::Write);
        assert_eq!(
            classify(&get, Some("watch=true&resourceVersion=0")),
            Class::Watch
        );
        assert_eq!(
            classify(
                &get,
                Some("allowWatchBookmarks=true&resourceVersion=1234&watch=true")
            ),
            Class::WatchResume
        );
    }
}
