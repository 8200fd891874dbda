//! A throwaway certificate authority and a TLS-enabled redis-server.

use std::path::{Path, PathBuf};
use std::process::Command;

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

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("could not run openssl: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Certs {
    pub fn generate() -> Certs {
        let dir = std::env::temp_dir().join(format!(
            "relaylock-tls-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for ca in ["ca", "other"] {
            openssl(
                &dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "1",
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                    "-subj",
                    &format!("/CN=relaylock test {ca}"),
                ],
            );
        }
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "1",
                "-extfile",
                "ext.cnf",
            ],
        );
        Certs {
            ca: std::fs::read(dir.join("ca.crt")).unwrap(),
            other_ca: std::fs::read(dir.join("other.crt")).unwrap(),
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
