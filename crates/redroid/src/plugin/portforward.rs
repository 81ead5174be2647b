//! Port-forwarding to the pod currently backing an instance, through the API server's
//! `pods/portforward` subresource (upstream used a non-existent `services/portforward`).
//!
//! Contract: every accepted local connection resolves the instance's pod afresh
//! (`status.podName`, phase Running) and dials it; when resolving or dialing fails the target is
//! re-resolved and dialed again, up to [`Retry::attempts`] times, so a forward keeps working
//! after the operator recreates the pod. The listener binds only the address asked for
//! (127.0.0.1 by default). [`PodResolver`] and [`Dialer`] are the seams the tests fake.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use super::error::PluginError;
use super::kubeconfig::Session;
use crate::crd::{InstancePhase, RedroidInstance};

/// A pod and the container port to reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Pod name.
    pub pod: String,
    /// Port inside the pod.
    pub port: u16,
}

/// Finds the pod currently backing the instance.
pub trait PodResolver: Send + Sync {
    /// The current target, or why there is none.
    fn resolve(&self) -> impl Future<Output = Result<Target, PluginError>> + Send;
}

/// Opens a byte stream to a port of a pod.
pub trait Dialer: Send + Sync {
    /// The stream type.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Connects to `target`.
    fn dial(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<Self::Stream, PluginError>> + Send;
}

/// How often and how patiently to re-resolve while a pod is being replaced.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    /// Resolve-and-dial attempts per connection.
    pub attempts: u32,
    /// Pause between attempts.
    pub pause: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 20,
            pause: Duration::from_millis(500),
        }
    }
}

/// The target of an instance according to its status: its pod while Running.
pub fn target_of(instance: &RedroidInstance) -> Result<Target, PluginError> {
    let no_pod = |detail: String| PluginError::NoPod {
        name: instance.metadata.name.clone().unwrap_or_default(),
        namespace: instance.metadata.namespace.clone().unwrap_or_default(),
        detail,
    };
    let status = instance
        .status
        .as_ref()
        .ok_or_else(|| no_pod("no status yet; is the operator running?".into()))?;
    let phase = status.phase.map(InstancePhase::as_str).unwrap_or("unknown");
    if status.phase != Some(InstancePhase::Running) {
        return Err(no_pod(format!("phase: {phase}")));
    }
    let pod = status
        .pod_name
        .clone()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| no_pod("status.podName is empty".into()))?;
    let port = u16::try_from(instance.spec.adb_port)
        .map_err(|_| no_pod(format!("invalid adbPort {}", instance.spec.adb_port)))?;
    Ok(Target { pod, port })
}

/// Resolves, dials, and on failure re-resolves and dials again.
pub async fn connect<R: PodResolver, D: Dialer>(
    resolver: &R,
    dialer: &D,
    retry: Retry,
) -> Result<(Target, D::Stream), PluginError> {
    let mut last = None;
    for attempt in 0..retry.attempts.max(1) {
        if attempt > 0 {
            tokio::time::sleep(retry.pause).await;
        }
        let target = match resolver.resolve().await {
            Ok(t) => t,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        match dialer.dial(&target).await {
            Ok(stream) => return Ok((target, stream)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(PluginError::Forward {
        pod: String::new(),
        namespace: String::new(),
        reason: "no attempt".into(),
    }))
}

/// Resolves an instance's pod from the API server.
pub struct InstanceResolver {
    api: Api<RedroidInstance>,
    name: String,
    namespace: String,
}

impl InstanceResolver {
    /// A resolver for `name` in the session's namespace.
    pub fn new(session: &Session, name: &str) -> Self {
        InstanceResolver {
            api: Api::namespaced(session.client.clone(), &session.namespace),
            name: name.to_string(),
            namespace: session.namespace.clone(),
        }
    }
}

impl PodResolver for InstanceResolver {
    async fn resolve(&self) -> Result<Target, PluginError> {
        let instance = self.api.get(&self.name).await.map_err(|e| {
            PluginError::from_kube("redroidinstance", &self.name, &self.namespace, "get", e)
        })?;
        target_of(&instance)
    }
}

/// Dials pods through `pods/portforward` (websocket).
pub struct PodDialer {
    api: Api<Pod>,
    namespace: String,
}

impl PodDialer {
    /// A dialer for pods of the session's namespace.
    pub fn new(session: &Session) -> Self {
        PodDialer {
            api: Api::namespaced(session.client.clone(), &session.namespace),
            namespace: session.namespace.clone(),
        }
    }
}

impl Dialer for PodDialer {
    type Stream = tokio::io::DuplexStream;

    async fn dial(&self, target: &Target) -> Result<Self::Stream, PluginError> {
        let fail = |reason: String| PluginError::Forward {
            pod: target.pod.clone(),
            namespace: self.namespace.clone(),
            reason,
        };
        let mut forwarder = self
            .api
            .portforward(&target.pod, &[target.port])
            .await
            .map_err(|e| fail(e.to_string()))?;
        let stream = forwarder
            .take_stream(target.port)
            .ok_or_else(|| fail("no stream for the port".into()))?;
        if let Some(errors) = forwarder.take_error(target.port) {
            let pod = target.pod.clone();
            tokio::spawn(async move {
                if let Some(message) = errors.await {
                    eprintln!("port-forward to pod {pod:?}: {message}");
                }
            });
        }
        Ok(stream)
    }
}

/// Binds the local listener (port 0 picks a free one).
pub async fn listen(address: &str, port: u16) -> Result<TcpListener, PluginError> {
    TcpListener::bind((address, port))
        .await
        .map_err(|e| PluginError::io(format!("listen on {address}:{port}"), e))
}

/// Accepts connections forever, forwarding each to the instance's current pod.
pub async fn serve<R, D>(
    listener: TcpListener,
    resolver: Arc<R>,
    dialer: Arc<D>,
    retry: Retry,
) -> Result<(), PluginError>
where
    R: PodResolver + 'static,
    D: Dialer + 'static,
{
    loop {
        let (socket, peer) = listener
            .accept()
            .await
            .map_err(|e| PluginError::io("accept a local connection", e))?;
        let (resolver, dialer) = (resolver.clone(), dialer.clone());
        tokio::spawn(async move {
            if let Err(e) = forward_one(socket, peer, &*resolver, &*dialer, retry).await {
                eprintln!("error: {e}");
            }
        });
    }
}

async fn forward_one<R: PodResolver, D: Dialer>(
    mut socket: TcpStream,
    peer: SocketAddr,
    resolver: &R,
    dialer: &D,
    retry: Retry,
) -> Result<(), PluginError> {
    let (target, mut upstream) = connect(resolver, dialer, retry).await?;
    eprintln!(
        "Handling connection from {peer} to pod {}:{}",
        target.pod, target.port
    );
    // A reset by either side just ends this connection; the next one re-resolves.
    let _ = tokio::io::copy_bidirectional(&mut socket, &mut upstream).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn instance(phase: Option<InstancePhase>, pod: Option<&str>) -> RedroidInstance {
        let mut i: RedroidInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "redroid.isning.moe/v1alpha1", "kind": "RedroidInstance",
            "metadata": {"name": "android-0", "namespace": "games"},
            "spec": {"index": 0, "adbPort": 5556}
        }))
        .unwrap();
        if phase.is_some() || pod.is_some() {
            i.status = Some(crate::crd::RedroidInstanceStatus {
                phase,
                pod_name: pod.map(Into::into),
                ..Default::default()
            });
        }
        i
    }

    /// Hands out the targets in order, repeating the last one.
    struct Script(Mutex<VecDeque<Result<Target, String>>>);

    impl Script {
        fn new(steps: Vec<Result<&str, &str>>) -> Self {
            let steps = steps.into_iter().map(|s| {
                s.map(|p| Target {
                    pod: p.into(),
                    port: 5555,
                })
                .map_err(String::from)
            });
            Script(Mutex::new(steps.collect()))
        }
    }

    impl PodResolver for Script {
        async fn resolve(&self) -> Result<Target, PluginError> {
            let mut q = self.0.lock().unwrap();
            let step = if q.len() > 1 {
                q.pop_front().unwrap()
            } else {
                q[0].clone()
            };
            step.map_err(|detail| PluginError::NoPod {
                name: "android-0".into(),
                namespace: "games".into(),
                detail,
            })
        }
    }

    /// Refuses pods named `dead-*`; otherwise echoes everything back, prefixed by the pod name.
    #[derive(Default)]
    struct EchoDialer(Mutex<Vec<String>>);

    impl Dialer for EchoDialer {
        type Stream = tokio::io::DuplexStream;
        async fn dial(&self, target: &Target) -> Result<Self::Stream, PluginError> {
            self.0.lock().unwrap().push(target.pod.clone());
            if target.pod.starts_with("dead") {
                return Err(PluginError::Forward {
                    pod: target.pod.clone(),
                    namespace: "games".into(),
                    reason: "gone".into(),
                });
            }
            let (near, mut far) = tokio::io::duplex(1024);
            let pod = target.pod.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = far.read(&mut buf).await {
                    if n == 0
                        || far.write_all(format!("{pod}:").as_bytes()).await.is_err()
                        || far.write_all(&buf[..n]).await.is_err()
                    {
                        break;
                    }
                }
            });
            Ok(near)
        }
    }

    const FAST: Retry = Retry {
        attempts: 5,
        pause: Duration::ZERO,
    };

    #[test]
    fn a_running_instance_targets_its_pod_and_adb_port() {
        let t = target_of(&instance(
            Some(InstancePhase::Running),
            Some("android-0-pod-abcde"),
        ))
        .unwrap();
        assert_eq!(
            t,
            Target {
                pod: "android-0-pod-abcde".into(),
                port: 5556
            }
        );
    }

    #[test]
    fn a_stopped_or_unreconciled_instance_has_no_target() {
        let stopped = target_of(&instance(Some(InstancePhase::Stopped), None))
            .unwrap_err()
            .to_string();
        assert_eq!(
            stopped,
            r#"redroidinstance "android-0" in namespace "games" has no running pod (phase: Stopped)"#
        );
        let fresh = target_of(&instance(None, None)).unwrap_err().to_string();
        assert!(fresh.contains("no status yet"), "{fresh}");
        let no_name = target_of(&instance(Some(InstancePhase::Running), None))
            .unwrap_err()
            .to_string();
        assert!(no_name.contains("podName"), "{no_name}");
    }

    #[tokio::test]
    async fn a_failed_dial_re_resolves_to_the_new_pod() {
        let resolver = Script::new(vec![Ok("dead-old"), Err("phase: Pending"), Ok("pod-new")]);
        let dialer = EchoDialer::default();
        let (target, _stream) = connect(&resolver, &dialer, FAST).await.unwrap();
        assert_eq!(target.pod, "pod-new");
        assert_eq!(*dialer.0.lock().unwrap(), vec!["dead-old", "pod-new"]);
    }

    #[tokio::test]
    async fn gives_up_with_the_last_reason_after_the_attempts() {
        let resolver = Script::new(vec![Err("phase: Stopped")]);
        let err = connect(&resolver, &EchoDialer::default(), FAST)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("has no running pod (phase: Stopped)"),
            "{err}"
        );
    }

    async fn round_trip(addr: SocketAddr, msg: &str) -> String {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(msg.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 64];
        let mut got = String::new();
        while !got.ends_with(msg) {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed after {got:?}");
            got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        }
        got
    }

    #[tokio::test]
    async fn each_connection_follows_the_instance_to_its_current_pod() {
        let listener = listen("127.0.0.1", 0).await.unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_loopback());
        let resolver = Arc::new(Script::new(vec![Ok("pod-a"), Ok("pod-b")]));
        let server = tokio::spawn(serve(
            listener,
            resolver,
            Arc::new(EchoDialer::default()),
            FAST,
        ));
        assert_eq!(round_trip(addr, "hello").await, "pod-a:hello");
        assert_eq!(round_trip(addr, "again").await, "pod-b:again");
        server.abort();
    }
}
