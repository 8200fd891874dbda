//! A throwaway certificate authority and a TLS-enabled redis-server.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use super::{free_port, RedisServer};

/// A CA, a server certificate it signed for `127.0.0.1`, and an unrelated
/// CA, in a temporary directory removed on drop.
pub struct Certs {
    dir: PathBuf,
    /// The CA that signed the server certificate (PEM).
    pub ca: Vec<u8>,
    /// A CA that did not (PEM).
    pub other_ca: Vec<u8>,
}

/// A self-signed CA named `name` (ECDSA P-256), with its key.
fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("relaylock test {name}"));
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

impl Certs {
    pub fn generate() -> Certs {
        let dir = std::env::temp_dir().join(format!(
            "relaylock-tls-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (signer, other) = (ca("ca"), ca("other"));
        // The server's certificate: for the IP address 127.0.0.1.
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        let key = KeyPair::generate().unwrap();
        let server = params.signed_by(&key, &signer).unwrap();
        std::fs::write(dir.join("ca.crt"), signer.pem()).unwrap();
        std::fs::write(dir.join("server.crt"), server.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        Certs {
            ca: signer.pem().into_bytes(),
            other_ca: other.pem().into_bytes(),
            dir,
        }
    }

    /// A redis-server serving TLS on the returned port (and plain text on
    /// its usual one, for the admin connection).
    pub fn server(&self) -> (RedisServer, u16) {
        let tls_port = free_port();
        let file = |f: &str| self.dir.join(f).display().to_string();
        let server = RedisServer::try_start(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &file("server.crt"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.crt"),
            "--tls-auth-clients",
            "no",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        (server, tls_port)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
