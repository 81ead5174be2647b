//! Test support shared by the redis instance tests: an S3-compatible server.

use std::path::PathBuf;

/// The access key the server accepts.
pub const AK: &str = "AKIDTEST";
/// Its secret key.
pub const SK: &str = "secret/key+test";

/// An S3-compatible server: s3s-fs (a third-party S3 implementation with its own SigV4
/// verification) over a scratch directory, with one access key. Stopped and removed on drop.
pub struct S3Server {
    /// The stored objects: `<root>/<bucket>/<key>`.
    pub root: PathBuf,
    /// `http://<ip>:<port>`.
    pub endpoint: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Starts a server on `ip` (a free port) with `bucket` created.
pub async fn s3_server(bucket: &str, ip: &str) -> S3Server {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let root = std::env::temp_dir().join(format!(
        "s3-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join(bucket)).expect("bucket");
    let fs = s3s_fs::FileSystem::new(&root).expect("s3s-fs");
    let mut b = s3s::service::S3ServiceBuilder::new(fs);
    b.set_auth(s3s::auth::SimpleAuth::from_single(AK, SK));
    let service = b.build();
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let service = service.clone();
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(socket);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    S3Server {
        root,
        endpoint,
        task,
    }
}
