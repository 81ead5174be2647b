//! Certificates for the local plane, made with the `openssl` command line.
//!
//! One throw-away CA signs the apiserver serving certificate (SANs 127.0.0.1, localhost, the
//! `kubernetes.default…` names and every pod network gateway address, which pods dial; v3
//! extensions, because rustls rejects v1 and CA certificates used as server certificates), an
//! admin client certificate (O=system:masters), the process-backed nodes' kubelet serving
//! certificate and the apiserver's client certificate for them. A plain RSA key pair signs
//! service-account tokens.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Paths of the generated PKI files.
#[derive(Debug, Clone)]
pub struct Pki {
    /// Directory holding everything below.
    pub dir: PathBuf,
}

impl Pki {
    /// CA certificate.
    pub fn ca_crt(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    /// CA key.
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    /// apiserver serving certificate.
    pub fn apiserver_crt(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    /// apiserver serving key.
    pub fn apiserver_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    /// Admin client certificate.
    pub fn admin_crt(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    /// Admin client key.
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    /// The process-backed nodes' kubelet serving certificate.
    pub fn kubelet_crt(&self) -> PathBuf {
        self.dir.join("kubelet.crt")
    }
    /// Its key.
    pub fn kubelet_key(&self) -> PathBuf {
        self.dir.join("kubelet.key")
    }
    /// The apiserver's client certificate towards kubelets.
    pub fn kubelet_client_crt(&self) -> PathBuf {
        self.dir.join("apiserver-kubelet-client.crt")
    }
    /// Its key.
    pub fn kubelet_client_key(&self) -> PathBuf {
        self.dir.join("apiserver-kubelet-client.key")
    }
    /// Service-account signing key.
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    /// Service-account public key.
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// Generates a fresh CA, serving, admin and service-account keys in `dir`.
    pub fn generate(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let pki = Self {
            dir: dir.to_path_buf(),
        };
        let d = |p: PathBuf| p.display().to_string();
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/CN=flotilla-testenv-ca",
            "-keyout",
            &d(pki.ca_key()),
            "-out",
            &d(pki.ca_crt()),
        ])?;
        let gateways: String = crate::procnode::network::all_gateways()
            .iter()
            .map(|ip| format!(",IP:{ip}"))
            .collect();
        let srv = dir.join("srv.ext");
        std::fs::write(
            &srv,
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
                extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,\
                DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1{gateways}\n"
            ),
        )?;
        let kubelet = dir.join("kubelet.ext");
        std::fs::write(
            &kubelet,
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
                extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1{gateways}\n"
            ),
        )?;
        let cli = dir.join("cli.ext");
        std::fs::write(
            &cli,
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
            extendedKeyUsage=clientAuth\n",
        )?;
        pki.sign("apiserver", "/CN=kube-apiserver", &srv)?;
        pki.sign("admin", "/O=system:masters/CN=flotilla-admin", &cli)?;
        pki.sign("kubelet", "/CN=flotilla-proc-node", &kubelet)?;
        pki.sign(
            "apiserver-kubelet-client",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            &cli,
        )?;
        openssl(&["genrsa", "-out", &d(pki.sa_key()), "2048"])?;
        openssl(&[
            "rsa",
            "-in",
            &d(pki.sa_key()),
            "-pubout",
            "-out",
            &d(pki.sa_pub()),
        ])?;
        Ok(pki)
    }

    fn sign(&self, name: &str, subject: &str, ext: &Path) -> anyhow::Result<()> {
        let key = self.dir.join(format!("{name}.key"));
        let csr = self.dir.join(format!("{name}.csr"));
        let crt = self.dir.join(format!("{name}.crt"));
        let d = |p: &Path| p.display().to_string();
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            &d(&key),
            "-out",
            &d(&csr),
        ])?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &d(&csr),
            "-CA",
            &d(&self.ca_crt()),
            "-CAkey",
            &d(&self.ca_key()),
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            &d(ext),
            "-out",
            &d(&crt),
        ])?;
        Ok(())
    }
}

fn openssl(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl").args(args).output().map_err(|e| {
        anyhow::anyhow!("cannot run openssl (install it: apt-get install openssl): {e}")
    })?;
    if !out.status.success() {
        anyhow::bail!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
