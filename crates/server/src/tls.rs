//! TLS for SSL listeners: the server certificate and key, optionally a CA that client
//! certificates must chain to (mutual TLS), reloaded while running.
//!
//! [`TlsState`] holds the rustls config that new handshakes use. [`TlsState::load`] reads the
//! PEM files (certificate chain; PKCS#8, PKCS#1 RSA or SEC1 EC key; CA bundle) and checks that
//! the key belongs to the certificate, so a bad file is refused before anything binds.
//! [`TlsState::watch`] reloads on SIGHUP and when a file's modification time changes (checked
//! every [`RELOAD_CHECK_INTERVAL`]): new handshakes get the new config, open connections keep
//! the session they have, and a file that does not load is logged while the old config stays.
//!
//! The principal of a connection: `User:ANONYMOUS` without a client certificate; with one, the
//! subject's distinguished name mapped by the [`PrincipalMapper`] (Kafka's
//! `ssl.principal.mapping.rules`), as `User:NAME`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use crate::principal::{self, PrincipalMapper};

/// How often the certificate, key and CA files are checked for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Where the TLS material is, and how client certificates name users.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// PEM certificate chain, the server's certificate first.
    pub cert: PathBuf,
    /// PEM private key of that certificate.
    pub key: PathBuf,
    /// PEM CA certificates: when given, clients on SSL listeners must present a certificate
    /// that chains to one of them.
    pub client_ca: Option<PathBuf>,
    /// Distinguished name to user name.
    pub mapper: PrincipalMapper,
}

/// Why TLS material did not load; the message names the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// The TLS config new handshakes use, replaced on reload.
#[derive(Debug)]
pub struct TlsState {
    settings: TlsSettings,
    current: RwLock<Arc<rustls::ServerConfig>>,
    /// Modification times of the files when last loaded (or last tried).
    seen: Mutex<Vec<Option<SystemTime>>>,
}

impl TlsState {
    /// Loads the files once; any problem is an error that names the file.
    pub fn load(settings: TlsSettings) -> Result<Arc<TlsState>, TlsError> {
        let seen = modified(&settings);
        let config = build(&settings)?;
        Ok(Arc::new(TlsState {
            settings,
            current: RwLock::new(config),
            seen: Mutex::new(seen),
        }))
    }

    /// The config for the next handshake.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether clients must present certificates.
    pub fn mutual(&self) -> bool {
        self.settings.client_ca.is_some()
    }

    /// The principal of a connection whose client presented `certs` (the first is its own).
    /// `Err` when no mapping rule applies to its name.
    pub fn principal(&self, certs: Option<&[CertificateDer<'_>]>) -> Result<String, String> {
        let Some(cert) = certs.and_then(<[_]>::first) else {
            return Ok(format!("User:{}", principal::ANONYMOUS));
        };
        let dn = principal::subject_dn(cert)
            .ok_or_else(|| "the client certificate's subject could not be read".to_owned())?;
        match self.settings.mapper.map(&dn) {
            Some(name) => Ok(format!("User:{name}")),
            None => Err(format!(
                "no ssl_principal_mapping_rules rule applies to the client certificate's subject '{dn}'"
            )),
        }
    }

    /// Loads the files again; on success new handshakes use them, on failure the current
    /// config stays and the error is logged. `why` says what asked for it.
    pub fn reload(&self, why: &str) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = modified(&self.settings);
        match build(&self.settings) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
                tracing::info!(
                    cert = %self.settings.cert.display(),
                    "reloaded the TLS certificate, key and client CA ({why}); new connections use them"
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS files changed ({why}) but do not load; keeping the current certificate")
            }
        }
    }

    /// Reloads on SIGHUP and when a file changes, until `shutdown`.
    pub async fn watch(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(hup) => Some(hup),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS files reload only when they change");
                None
            }
        };
        loop {
            let hup_recv = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let forced = tokio::select! {
                _ = tokio::time::sleep(RELOAD_CHECK_INTERVAL) => false,
                _ = hup_recv => true,
                _ = shutdown.changed() => return,
            };
            if forced {
                self.reload("SIGHUP");
                continue;
            }
            let now = modified(&self.settings);
            let changed = *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != now;
            if changed {
                self.reload("a file changed");
            }
        }
    }
}

fn modified(settings: &TlsSettings) -> Vec<Option<SystemTime>> {
    [
        Some(&settings.cert),
        Some(&settings.key),
        settings.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    .collect()
}

fn read_file(what: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| {
        TlsError(format!(
            "cannot read the TLS {what} {}: {e}",
            path.display()
        ))
    })
}

fn certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            TlsError(format!(
                "the TLS {what} {} is not valid PEM: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "the TLS {what} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// Builds the rustls config from the files.
fn build(settings: &TlsSettings) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = certificates("certificate", &settings.cert)?;
    let key_pem = read_file("key", &settings.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        TlsError(format!(
            "the TLS key {} holds no PEM private key (PKCS#8, RSA or EC): {e}",
            settings.key.display()
        ))
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS protocol versions: {e}")))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates("client CA", ca)? {
                roots.add(cert).map_err(|e| {
                    TlsError(format!(
                        "the TLS client CA {} holds a certificate that cannot be used: {e}",
                        ca.display()
                    ))
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| TlsError(format!("the TLS client CA {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        TlsError(format!(
            "the TLS key {} does not go with the certificate {}: {e}",
            settings.key.display(),
            settings.cert.display()
        ))
    })?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn settings(cert: PathBuf, key: PathBuf) -> TlsSettings {
        TlsSettings {
            cert,
            key,
            client_ca: None,
            mapper: PrincipalMapper::default(),
        }
    }

    #[test]
    fn bad_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = write_pair(dir.path(), "one");
        let (_, k2) = write_pair(dir.path(), "two");
        assert!(TlsState::load(settings(c1.clone(), k1.clone())).is_ok());
        let e = TlsState::load(settings(c1.clone(), k2.clone())).unwrap_err();
        assert!(e.0.contains("does not go with the certificate"), "{e}");
        let e = TlsState::load(settings(dir.path().join("missing.crt"), k1.clone())).unwrap_err();
        assert!(e.0.contains("cannot read the TLS certificate"), "{e}");
        let e = TlsState::load(settings(k1.clone(), k1.clone())).unwrap_err();
        assert!(e.0.contains("holds no PEM certificate"), "{e}");
        let e = TlsState::load(settings(c1.clone(), c1.clone())).unwrap_err();
        assert!(e.0.contains("holds no PEM private key"), "{e}");
    }

    #[test]
    fn a_bad_reload_keeps_the_current_config() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), "one");
        let state = TlsState::load(settings(c.clone(), k.clone())).unwrap();
        let before = state.config();
        std::fs::write(&c, "garbage").unwrap();
        state.reload("test");
        assert!(Arc::ptr_eq(&before, &state.config()));
        write_pair(dir.path(), "one");
        state.reload("test");
        assert!(!Arc::ptr_eq(&before, &state.config()));
        assert_eq!(state.principal(None).unwrap(), "User:ANONYMOUS");
    }
}
