//! Discovery of the resources an API server serves.
//!
//! Contract: [`served`] uses aggregated discovery (two requests, `/api` and `/apis`; served
//! by Kubernetes 1.30 and later, beta since 1.26) and falls back to the per-group walk (one
//! request per group version) only on a server that does not serve it: an answer that is not
//! the aggregated document, or 404/406. A transient failure (a 429 or 5xx, a reset
//! connection) is returned as it is, for the caller to retry: falling back then would turn
//! one fault into tens of requests, each another chance to fail.

use kube::Client;
use kube::discovery::Discovery;

/// See the module docs.
pub async fn served(client: &Client) -> Result<Discovery, kube::Error> {
    match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => Ok(d),
        Err(e) if not_served(&e) => Discovery::new(client.clone()).run().await,
        Err(e) => Err(e),
    }
}

fn not_served(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404 || s.code == 406,
        kube::Error::SerdeError(_) | kube::Error::Discovery(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::not_served;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure("", "").with_code(code).boxed())
    }

    #[test]
    fn only_a_server_without_aggregated_discovery_falls_back() {
        assert!(not_served(&api(404)));
        assert!(not_served(&api(406)));
        let not_json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        assert!(not_served(&kube::Error::SerdeError(not_json)));
        for transient in [429, 500, 503] {
            assert!(!not_served(&api(transient)), "{transient}");
        }
    }
}
