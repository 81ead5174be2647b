//! Flotilla shared toolkit.

/// The end of an operator binary's `main`: one-line errors, exit codes.
pub mod cli;
/// Pure upsert/reset/get helpers over `metav1.Condition` lists.
pub mod conditions;
/// Controller wrapper recording metrics and spans, and the `Operator::run` entry point.
pub mod controller;
/// CRD YAML generation into `deploy/<operator>/crds/` and the CI drift check.
pub mod crdgen;
/// CRD schemas with Kubernetes' own list/map markers and required fields on embedded types.
pub mod crdschema;
/// Reading the API server's errors (`AlreadyExists` is not any 409).
pub mod errors;
/// Events that never fail a reconcile, and namespace-scoped `Api`s.
pub mod events;
/// Adding and removing a finalizer with an optimistic write.
pub mod finalizers;
/// Common operator flags with environment-variable fallbacks.
pub mod flags;
/// Watches refused with 403 Forbidden: logged, held against readiness, re-checked.
pub mod forbidden;
/// HTTP /healthz, /readyz and /metrics endpoints.
pub mod health;
/// A reflector store with secondary indexes kept by the same watch events.
pub mod index;
/// Leader election on a coordination.k8s.io Lease; controllers run only while leading.
pub mod leader;
/// Prometheus registry with controller-runtime's metric names and labels.
pub mod metrics;
/// DNS-1123 label/subdomain validation and deterministic hashed sanitising.
pub mod names;
/// The ordered subreconciler pipeline: continue, requeue (stop or delayed), or error.
pub mod pipeline;
/// What kubectl plugins share: kubeconfig resolution and kubectl-style tables.
pub mod plugin;
/// Reconcile outcomes, error categories and per-object error backoff.
pub mod reconcile;
/// SIGTERM/SIGINT to a CancellationToken.
pub mod shutdown;
/// Status subresource writes made only when the status differs.
pub mod status;
/// Tracing setup: text or JSON, level from flag or RUST_LOG.
pub mod telemetry;
/// What a controller last wrote per object, for passes whose cache lags the write.
pub mod written;
