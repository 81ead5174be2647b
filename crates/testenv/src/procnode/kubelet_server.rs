//! The nodes' kubelet endpoint, so `kubectl logs` works for pods on process-backed nodes.
//!
//! Contract:
//! - HTTPS on `<gateway>:10250` (the nodes' `daemonEndpoints`), with the plane's kubelet
//!   serving certificate; only clients with a certificate from the plane's CA are served (the
//!   apiserver presents its kubelet-client certificate).
//! - `GET /containerLogs/<ns>/<pod>/<container>` with `previous`, `tailLines`, `limitBytes`
//!   and `follow` (streams until that run of the container ends); `timestamps` and
//!   `sinceSeconds` are ignored. `GET /healthz` answers `ok`. Everything else (exec, attach,
//!   port-forward, stats) answers 501.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use super::agent::Ctx;
use super::network;
use super::node::KUBELET_PORT;

type Body = BoxBody<Bytes, std::io::Error>;

/// The bound endpoint.
pub struct Endpoint {
    listener: tokio::net::TcpListener,
    tls: TlsAcceptor,
}

/// Binds `<gateway>:10250` with the certificates in the plane's `pki` directory.
pub async fn bind(pki: &Path, slot: u8) -> anyhow::Result<Endpoint> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(pki.join("ca.crt"))?)?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let certs =
        CertificateDer::pem_file_iter(pki.join("kubelet.crt"))?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(pki.join("kubelet.key"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = tokio::net::TcpListener::bind((network::gateway(slot), KUBELET_PORT)).await?;
    Ok(Endpoint {
        listener,
        tls: TlsAcceptor::from(Arc::new(config)),
    })
}

/// Serves the endpoint until the process ends.
pub async fn serve(endpoint: Endpoint, ctx: Arc<Ctx>) {
    loop {
        let Ok((tcp, _)) = endpoint.listener.accept().await else {
            continue;
        };
        let tls = endpoint.tls.clone();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let Ok(stream) = tls.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| handle(ctx.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let query: Vec<(String, String)> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let get = |k: &str| {
        query
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    if path == "/healthz" {
        return Ok(text(StatusCode::OK, "ok"));
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, container] = parts.as_slice() else {
        return Ok(text(
            StatusCode::NOT_IMPLEMENTED,
            format!("{path} is not served by process-backed nodes (only containerLogs)\n"),
        ));
    };
    let Some((uid, restart, running)) = ctx.run_of(ns, pod, container) else {
        return Ok(text(
            StatusCode::NOT_FOUND,
            format!("container {container} of pod {ns}/{pod} is not known on this node\n"),
        ));
    };
    let previous = matches!(get("previous"), Some("true" | "1"));
    let run = if previous { restart - 1 } else { restart };
    if run < 0 {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            format!("previous terminated container \"{container}\" in pod \"{pod}\" not found\n"),
        ));
    }
    let file = ctx.layout.log_file(ns, pod, &uid, container, run);
    let tail: Option<usize> = get("tailLines").and_then(|v| v.parse().ok());
    let limit: Option<usize> = get("limitBytes").and_then(|v| v.parse().ok());
    let follow = matches!(get("follow"), Some("true" | "1")) && !previous && running;
    let mut head = read_log(&file, tail);
    if let Some(l) = limit {
        head.truncate(l);
    }
    if !follow {
        return Ok(text(StatusCode::OK, head));
    }
    let offset = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let (ns, pod, container) = (ns.to_string(), pod.to_string(), container.to_string());
    let stream = futures::stream::unfold(
        (Some(head), offset, false, ctx, file),
        move |(first, offset, ended, ctx, file)| {
            let (ns, pod, container) = (ns.clone(), pod.clone(), container.clone());
            async move {
                if let Some(h) = first {
                    return Some((
                        Ok(Frame::data(Bytes::from(h))),
                        (None, offset, false, ctx, file),
                    ));
                }
                if ended {
                    return None;
                }
                loop {
                    let (chunk, next) = read_from(&file, offset);
                    let still = ctx
                        .run_of(&ns, &pod, &container)
                        .is_some_and(|(_, r, running)| r == run && running);
                    if !chunk.is_empty() {
                        return Some((
                            Ok(Frame::data(Bytes::from(chunk))),
                            (None, next, !still, ctx, file),
                        ));
                    }
                    if !still {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await; // polling the log file for growth
                }
            }
        },
    );
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *r.status_mut() = StatusCode::OK;
    Ok(r)
}

/// The log, or its last `tail` lines.
fn read_log(file: &PathBuf, tail: Option<usize>) -> Vec<u8> {
    let data = std::fs::read(file).unwrap_or_default();
    match tail {
        None => data,
        Some(n) => {
            let text = String::from_utf8_lossy(&data);
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            lines[lines.len().saturating_sub(n)..].concat().into_bytes()
        }
    }
}

fn read_from(file: &PathBuf, offset: u64) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    if let Ok(mut f) = std::fs::File::open(file)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut out);
    }
    let next = offset + out.len() as u64;
    (out, next)
}
