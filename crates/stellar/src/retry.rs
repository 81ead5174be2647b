//! Retrying one request (or one small step) until it succeeds.
//!
//! Contract: [`until_ok`] runs the attempt until it returns `Ok`, waiting 200 ms after the
//! first failure and twice as long after each further one, up to 10 s; every failure is logged
//! (warn) with what was being done. It never gives up: the callers are start-up steps a
//! process cannot work without, where waiting is the only useful answer to a fault. A caller
//! that makes many requests retries each on its own, so a fault costs that request again, not
//! the requests that already succeeded.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// See the module docs; `what` names the step in the log ("creating namespace x").
pub async fn until_ok<T, E, F, Fut>(what: &str, attempt: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    retry_from(Duration::from_millis(200), what, attempt).await
}

async fn retry_from<T, E, F, Fut>(first: Duration, what: &str, mut attempt: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut delay = first;
    loop {
        match attempt().await {
            Ok(v) => return v,
            Err(e) => {
                tracing::warn!(error = %e, "{what}; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn retries_until_the_attempt_succeeds() {
        let tries = AtomicU32::new(0);
        let got = super::retry_from(Duration::from_millis(1), "counting", || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0..=2 => Err("not yet"),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(got, 3);
        assert_eq!(tries.load(Ordering::SeqCst), 4);
    }
}
