//! The snapshot registry clients against a real OCI registry (Debian's `docker-registry`,
//! distribution v2.8, started by `testenv::registry`) and, for what that registry cannot play,
//! a small HTTP server inside the test.
//!
//! Why an HTTP test server at all: distribution speaks neither epoch's write-token rule
//! (401 + `WWW-Authenticate: Bearer realm=…/v2/token,service="epoch"` on writes without the
//! right token, 202 on delete-by-tag) nor the registry token flow (it only has htpasswd basic
//! auth; a token server is a separate product). Those wire behaviours are served by axum on
//! 127.0.0.1 exactly as reference §6 describes them; everything else hits the real registry.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use cocoon::registry::epoch::EpochRegistry;
use cocoon::registry::oci::OciRegistry;
use cocoon::registry::{Credentials, Registry, RegistryError, RegistrySettings};
use testenv::registry::{RegistryServer, push_tag, tag_exists};

const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

fn oci(target: &str) -> OciRegistry {
    OciRegistry::new(target, None, None).expect("OCI client")
}

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("cocoon-registry-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A docker config dir whose `config.json` holds `user:password` for `host`.
fn docker_config(name: &str, host: &str, user: &str, password: &str) -> TempDir {
    let dir = TempDir::new(name);
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let json = serde_json::json!({"auths": {host: {"auth": auth}}});
    std::fs::write(dir.0.join("config.json"), json.to_string()).expect("config.json");
    dir
}

fn status_of(err: &RegistryError) -> Option<u16> {
    match err {
        RegistryError::Status { status, .. } => Some(*status),
        _ => None,
    }
}

// ---- OCI client against the real registry ----

#[tokio::test]
async fn oci_probe_is_false_until_the_tag_is_pushed_under_the_path_prefix() {
    let server = RegistryServer::start().await.unwrap();
    let reg = oci(&format!("http://{}/cocoon", server.host()));
    assert!(
        !reg.has_manifest("vm-a", "hibernate").await.unwrap(),
        "absent repo"
    );
    push_tag(&server.url(), None, "cocoon/vm-a", "hibernate", b"snap")
        .await
        .unwrap();
    assert!(reg.has_manifest("vm-a", "hibernate").await.unwrap());
    assert!(
        !reg.has_manifest("vm-a", "latest").await.unwrap(),
        "absent tag"
    );
    let unprefixed = oci(&format!("http://{}", server.host()));
    assert!(!unprefixed.has_manifest("vm-a", "hibernate").await.unwrap());
}

#[tokio::test]
async fn oci_delete_removes_a_present_tag_and_is_ok_when_absent() {
    let server = RegistryServer::start().await.unwrap();
    let url = server.url();
    push_tag(&url, None, "cocoon/vm-d", "hibernate", b"snap")
        .await
        .unwrap();
    let reg = oci(&format!("http://{}/cocoon/", server.host()));
    reg.delete_manifest("vm-d", "hibernate").await.unwrap();
    assert!(
        !tag_exists(&url, None, "cocoon/vm-d", "hibernate")
            .await
            .unwrap()
    );
    assert!(!reg.has_manifest("vm-d", "hibernate").await.unwrap());
    reg.delete_manifest("vm-d", "hibernate").await.unwrap();
    reg.delete_manifest("vm-never", "latest").await.unwrap();
}

#[tokio::test]
async fn oci_probe_of_a_stopped_registry_is_a_transport_error() {
    let server = RegistryServer::start().await.unwrap();
    let target = format!("http://{}/cocoon", server.host());
    drop(server);
    let err = oci(&target)
        .has_manifest("vm-a", "hibernate")
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Transport { op: "HEAD", .. }),
        "{err}"
    );
    assert_eq!(err.category(), "RegistryUnreachable");
    let err = oci(&target)
        .delete_manifest("vm-a", "hibernate")
        .await
        .unwrap_err();
    assert_eq!(err.category(), "RegistryUnreachable");
}

#[tokio::test]
async fn oci_basic_auth_uses_docker_config_credentials() {
    let server = RegistryServer::start_with_basic_auth("robot", "s3cret")
        .await
        .unwrap();
    let basic = Some(("robot", "s3cret"));
    push_tag(&server.url(), basic, "cocoon/vm-b", "hibernate", b"snap")
        .await
        .unwrap();
    let config = docker_config("basic-ok", &server.host(), "robot", "s3cret");
    let settings = RegistrySettings {
        oci_registry: Some(format!("http://{}/cocoon", server.host())),
        docker_config: Some(config.0.clone()),
        ..RegistrySettings::default()
    };
    let reg = settings.build().unwrap();
    assert!(reg.has_manifest("vm-b", "hibernate").await.unwrap());
    reg.delete_manifest("vm-b", "hibernate").await.unwrap();
    assert!(!reg.has_manifest("vm-b", "hibernate").await.unwrap());
    assert!(
        !tag_exists(&server.url(), basic, "cocoon/vm-b", "hibernate")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn oci_basic_auth_with_a_wrong_or_missing_password_is_an_auth_error() {
    let server = RegistryServer::start_with_basic_auth("robot", "s3cret")
        .await
        .unwrap();
    let target = format!("http://{}/cocoon", server.host());
    let config = docker_config("basic-wrong", &server.host(), "robot", "wrong");
    let settings = RegistrySettings {
        oci_registry: Some(target.clone()),
        docker_config: Some(config.0.clone()),
        ..RegistrySettings::default()
    };
    let err = settings
        .build()
        .unwrap()
        .has_manifest("vm-b", "hibernate")
        .await
        .unwrap_err();
    assert_eq!(err.category(), "RegistryAuth", "{err}");
    assert!(err.to_string().contains("401"), "{err}");
    let err = oci(&target)
        .delete_manifest("vm-b", "hibernate")
        .await
        .unwrap_err();
    assert_eq!(
        err.category(),
        "RegistryAuth",
        "no credentials at all: {err}"
    );
}

// ---- epoch client against the real registry ----

#[tokio::test]
async fn epoch_probe_reads_manifests_of_a_real_registry() {
    let server = RegistryServer::start().await.unwrap();
    push_tag(&server.url(), None, "vm-e", "hibernate", b"snap")
        .await
        .unwrap();
    let reg = EpochRegistry::new(&server.url(), None, None).unwrap();
    assert!(reg.has_manifest("vm-e", "hibernate").await.unwrap());
    assert!(!reg.has_manifest("vm-e", "latest").await.unwrap());
    assert!(!reg.has_manifest("vm-none", "hibernate").await.unwrap());
}

#[tokio::test]
async fn epoch_delete_by_tag_refused_by_distribution_is_an_error() {
    // Epoch answers 202 to a delete by tag; distribution wants a digest and answers 400.
    let server = RegistryServer::start().await.unwrap();
    push_tag(&server.url(), None, "vm-e", "latest", b"snap")
        .await
        .unwrap();
    let reg = EpochRegistry::new(&server.url(), None, None).unwrap();
    let err = reg.delete_manifest("vm-e", "latest").await.unwrap_err();
    assert_eq!(status_of(&err), Some(400), "{err}");
    assert!(err.to_string().starts_with(&format!(
        "DELETE {}/v2/vm-e/manifests/latest: 400",
        server.url()
    )));
    assert!(
        tag_exists(&server.url(), None, "vm-e", "latest")
            .await
            .unwrap()
    );
}

// ---- the HTTP test server: epoch's write token and the registry token flow ----

/// What the test server saw: method, path, `Authorization`, `Accept`.
type Seen = Arc<Mutex<Vec<(Method, String, String, String)>>>;

#[derive(Clone)]
struct Fake {
    base: String,
    seen: Seen,
    token_field: &'static str,
}

impl Fake {
    async fn start(
        token_field: &'static str,
        handler: fn(&Fake, &Method, &str, &HeaderMap) -> Response,
    ) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = Fake {
            base: format!("http://{}", listener.local_addr().unwrap()),
            seen: Seen::default(),
            token_field,
        };
        let app = axum::Router::new()
            .fallback(move |State(f): State<Fake>, req: Request| async move {
                let (parts, _) = req.into_parts();
                let path = parts.uri.to_string();
                let h = |name| {
                    parts
                        .headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string()
                };
                let row = (
                    parts.method.clone(),
                    path.clone(),
                    h(header::AUTHORIZATION),
                    h(header::ACCEPT),
                );
                f.seen.lock().unwrap().push(row);
                handler(&f, &parts.method, &path, &parts.headers)
            })
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        fake
    }

    fn seen(&self) -> Vec<(Method, String, String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn errors(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({"errors": [{"code": code, "message": message}]});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn manifest_found() -> Response {
    let digest = format!("sha256:{}", "a".repeat(64));
    let headers = [
        (header::CONTENT_TYPE, MANIFEST_TYPES[0].to_string()),
        (
            header::HeaderName::from_static("docker-content-digest"),
            digest,
        ),
    ];
    (StatusCode::OK, headers, r#"{"schemaVersion":2}"#).into_response()
}

/// Epoch per §6.2: anonymous reads, writes need `Bearer right-token`; `vm-a:hibernate` exists;
/// `vm-500` fails with a short body, `vm-big` with a long one.
fn epoch(f: &Fake, method: &Method, path: &str, headers: &HeaderMap) -> Response {
    if path.starts_with("/v2/vm-500/") {
        return errors(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "database is down",
        );
    }
    if path.starts_with("/v2/vm-big/") {
        return (StatusCode::INTERNAL_SERVER_ERROR, "x".repeat(2000)).into_response();
    }
    let exists = path == "/v2/vm-a/manifests/hibernate";
    if *method == Method::DELETE
        && headers
            .get(header::AUTHORIZATION)
            .is_none_or(|v| v != "Bearer right-token")
    {
        let challenge = format!(r#"Bearer realm="{}/v2/token",service="epoch""#, f.base);
        let mut resp = errors(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "valid Bearer token required",
        );
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge.parse().unwrap());
        return resp;
    }
    match (method.clone(), exists) {
        (Method::GET, true) => manifest_found(),
        (Method::DELETE, true) => StatusCode::ACCEPTED.into_response(),
        _ => errors(
            StatusCode::NOT_FOUND,
            "MANIFEST_UNKNOWN",
            "manifest unknown",
        ),
    }
}

#[tokio::test]
async fn epoch_probe_is_a_get_with_the_accept_list_and_the_token() {
    let fake = Fake::start("token", epoch).await;
    let reg = EpochRegistry::new(&fake.base, Some("right-token".into()), None).unwrap();
    assert!(reg.has_manifest("vm-a", "hibernate").await.unwrap());
    assert!(!reg.has_manifest("vm-a", "latest").await.unwrap());
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    for (method, _, auth, accept) in seen {
        assert_eq!(method, Method::GET);
        assert_eq!(auth, "Bearer right-token");
        assert!(
            MANIFEST_TYPES.iter().all(|t| accept.contains(t)),
            "{accept}"
        );
    }
}

#[tokio::test]
async fn epoch_delete_needs_the_right_bearer_token() {
    let fake = Fake::start("token", epoch).await;
    for token in [None, Some("wrong-token".to_string())] {
        let reg = EpochRegistry::new(&fake.base, token, None).unwrap();
        let err = reg.delete_manifest("vm-a", "hibernate").await.unwrap_err();
        assert_eq!(status_of(&err), Some(401), "{err}");
        assert!(
            err.to_string().contains("valid Bearer token required"),
            "{err}"
        );
    }
    let reg = EpochRegistry::new(&fake.base, Some("right-token".into()), None).unwrap();
    reg.delete_manifest("vm-a", "hibernate").await.unwrap();
    reg.delete_manifest("vm-a", "latest").await.unwrap();
    let last = fake.seen().last().cloned().unwrap();
    assert_eq!(
        (last.0, last.1.as_str()),
        (Method::DELETE, "/v2/vm-a/manifests/latest")
    );
}

#[tokio::test]
async fn epoch_server_errors_carry_status_and_the_first_512_bytes_of_body() {
    let fake = Fake::start("token", epoch).await;
    let reg = EpochRegistry::new(&fake.base, Some("right-token".into()), None).unwrap();
    let err = reg.has_manifest("vm-500", "hibernate").await.unwrap_err();
    let url = format!("{}/v2/vm-500/manifests/hibernate", fake.base);
    assert!(
        err.to_string().starts_with(&format!("GET {url}: 500 ")),
        "{err}"
    );
    assert!(err.to_string().contains("database is down"), "{err}");
    let err = reg
        .delete_manifest("vm-500", "hibernate")
        .await
        .unwrap_err();
    assert_eq!(status_of(&err), Some(500), "{err}");
    let err = reg.has_manifest("vm-big", "hibernate").await.unwrap_err();
    let RegistryError::Status { body, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(body, "x".repeat(512));
}

/// A token-auth registry: `/token` wants basic `robot:s3cret` and answers in `token_field`;
/// `/v2/…` wants `Bearer tok-1`; `cocoon/vm-a:hibernate` exists and deletes by digest only.
fn token_registry(f: &Fake, method: &Method, path: &str, headers: &HeaderMap) -> Response {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if path.starts_with("/token?") {
        let basic = base64::engine::general_purpose::STANDARD.encode("robot:s3cret");
        let scope_ok = path.contains("scope=repository%3Acocoon%2Fvm-a%3Apull%2Cdelete")
            && path.contains("service=fake");
        if auth != format!("Basic {basic}") || !scope_ok {
            return errors(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "bad credentials or scope",
            );
        }
        let body = format!(r#"{{"{}":"tok-1","expires_in":300}}"#, f.token_field);
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    if auth != "Bearer tok-1" {
        let challenge = format!(
            r#"Bearer realm="{}/token",service="fake",scope="repository:cocoon/vm-a:pull""#,
            f.base
        );
        let mut resp = errors(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "authentication required",
        );
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge.parse().unwrap());
        return resp;
    }
    let digest_path = format!("/v2/cocoon/vm-a/manifests/sha256:{}", "a".repeat(64));
    match method.clone() {
        Method::HEAD if path == "/v2/cocoon/vm-a/manifests/hibernate" => manifest_found(),
        Method::DELETE if path == digest_path => StatusCode::ACCEPTED.into_response(),
        Method::DELETE if path.ends_with("/hibernate") => {
            errors(StatusCode::BAD_REQUEST, "UNSUPPORTED", "by digest")
        }
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())
            .unwrap(),
    }
}

fn robot() -> Option<Credentials> {
    Some(Credentials {
        username: "robot".into(),
        password: "s3cret".into(),
    })
}

#[tokio::test]
async fn oci_bearer_flow_exchanges_credentials_once_and_deletes_by_digest() {
    for field in ["token", "access_token"] {
        let fake = Fake::start(field, token_registry).await;
        let reg = OciRegistry::new(&format!("{}/cocoon", fake.base), robot(), None).unwrap();
        assert!(reg.has_manifest("vm-a", "hibernate").await.unwrap());
        assert!(!reg.has_manifest("vm-a", "latest").await.unwrap());
        reg.delete_manifest("vm-a", "hibernate").await.unwrap();
        let seen = fake.seen();
        let tokens = seen.iter().filter(|s| s.1.starts_with("/token")).count();
        assert_eq!(tokens, 1, "the token is cached per scope: {seen:?}");
        let (method, path, auth, _) = seen.last().cloned().unwrap();
        assert_eq!(method, Method::DELETE);
        assert_eq!(
            path,
            format!("/v2/cocoon/vm-a/manifests/sha256:{}", "a".repeat(64))
        );
        assert_eq!(auth, "Bearer tok-1");
    }
}

#[tokio::test]
async fn oci_bearer_flow_with_refused_credentials_is_an_auth_error() {
    let fake = Fake::start("token", token_registry).await;
    let wrong = Some(Credentials {
        username: "robot".into(),
        password: "nope".into(),
    });
    let reg = OciRegistry::new(&format!("{}/cocoon", fake.base), wrong, None).unwrap();
    let err = reg.has_manifest("vm-a", "hibernate").await.unwrap_err();
    assert_eq!(err.category(), "RegistryAuth", "{err}");
    assert!(err.to_string().contains("bad credentials"), "{err}");
}
