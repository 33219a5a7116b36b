//! The plan's `tls`: the CA certificates that vouch for the database's
//! servers, an optional client certificate for mutual TLS and the name to
//! verify, checked and turned into one rustls client configuration that
//! every connection of the run shares (and its session cache with it).
//!
//! The PEM text, the keys and anything derived from them never show in an
//! error or in Debug output: errors name the key and what is wrong with it.

use std::fmt;
use std::sync::Arc;

use rustls::client::WantsClientCert;
use rustls::crypto::aws_lc_rs;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ConfigBuilder, RootCertStore, WantsVerifier};

use super::value::{Fields, PlanError, Secret, Value};
use super::{Endpoint, Result};

const TLS_KEYS: &[&str] = &["ca", "cert", "key", "server_name"];

/// The plan's `tls`, checked: the client configuration and what it was
/// built from, for a client library that builds its own (ZooKeeper's).
#[derive(Clone)]
pub struct TlsPlan {
    config: Arc<ClientConfig>,
    /// The name every server's certificate must hold; None: each
    /// endpoint's own host.
    server_name: Option<ServerName<'static>>,
    pem: Arc<Pem>,
}

/// The PEM text as the plan gave it.
struct Pem {
    ca: Secret<String>,
    /// The client certificate chain and its key.
    identity: Option<(Secret<String>, Secret<String>)>,
}

impl TlsPlan {
    /// The CA certificates' PEM text.
    pub fn ca_pem(&self) -> &str {
        self.pem.ca.expose()
    }

    /// The client certificate chain's and its key's PEM text (mutual TLS).
    pub fn identity_pem(&self) -> Option<(&str, &str)> {
        let (cert, key) = self.pem.identity.as_ref()?;
        Some((cert.expose(), key.expose()))
    }

    /// The name given to verify instead of each endpoint's host.
    pub fn server_name(&self) -> Option<&ServerName<'static>> {
        self.server_name.as_ref()
    }

    /// TLS to `endpoint` (the `index`th of the plan's): the shared
    /// configuration, and the name its certificate must hold.
    fn to(&self, index: usize, endpoint: &Endpoint) -> Result<Tls> {
        let server_name = match &self.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(endpoint.host.clone()).map_err(|_| {
                PlanError(format!(
                    "plan[\"endpoints\"][{index}]'s host {:?} is neither a DNS name nor an IP \
                     address a certificate can be checked against; give plan[\"tls\"][\"server_name\"]",
                    endpoint.host
                ))
            })?,
        };
        Ok(Tls {
            config: self.config.clone(),
            server_name,
        })
    }
}

/// Shows whether there is a client certificate and the server name, nothing more.
impl fmt::Debug for TlsPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPlan")
            .field("client_certificate", &self.pem.identity.is_some())
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Two plans' TLS are equal when they are the same parsed `tls`.
impl PartialEq for TlsPlan {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.server_name == other.server_name
    }
}

/// TLS to one endpoint: what its connections dial with. The transport adds
/// the ALPN protocol it speaks (h2, http/1.1) to each connection.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
}

impl Tls {
    pub fn config(&self) -> &Arc<ClientConfig> {
        &self.config
    }

    /// The name the server's certificate must hold.
    pub fn server_name(&self) -> &ServerName<'static> {
        &self.server_name
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Tls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.server_name == other.server_name
    }
}

impl Eq for Tls {}

/// `tls`: absent or None for plain TCP, else the dict TLS_KEYS name. Every
/// endpoint gets its TLS (and a host that cannot be verified is an error).
pub(super) fn parse(top: &Fields<'_>, endpoints: &mut [Endpoint]) -> Result<Option<TlsPlan>> {
    let value = match top.get("tls") {
        None | Some(Value::None) => return Ok(None),
        Some(value) => value,
    };
    let tls = Fields::opaque(top.name("tls"), value, TLS_KEYS, None)?;
    let ca = tls.secret("ca", "PEM text of one or more CA certificates")?;
    let roots = roots(&tls, ca)?;
    let identity = identity(&tls)?;
    let server_name = server_name(&tls)?;
    let builder = builder(&tls)?.with_root_certificates(roots);
    let config = match &identity {
        None => builder.with_no_client_auth(),
        Some((_, _, chain, key)) => with_identity(&tls, builder, chain.clone(), key.clone_key())?,
    };
    let plan = TlsPlan {
        config: Arc::new(config),
        server_name,
        pem: Arc::new(Pem {
            ca: Secret::new(ca.to_owned()),
            identity: identity.map(|(cert, key, _, _)| {
                (Secret::new(cert.to_owned()), Secret::new(key.to_owned()))
            }),
        }),
    };
    for (index, endpoint) in endpoints.iter_mut().enumerate() {
        endpoint.tls = Some(plan.to(index, endpoint)?);
    }
    Ok(Some(plan))
}

/// TLS 1.2 and 1.3 with aws-lc-rs, named here rather than taken from the
/// process-wide default (see Cargo.toml).
fn builder(tls: &Fields<'_>) -> Result<ConfigBuilder<ClientConfig, WantsVerifier>> {
    ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| PlanError(format!("{} cannot be set up: {e}", tls.name("ca"))))
}

/// The CA certificates in `pem`: at least one, each one rustls can use.
fn roots(tls: &Fields<'_>, pem: &str) -> Result<RootCertStore> {
    let name = tls.name("ca");
    let certs = certificates(&name, pem)?;
    let mut roots = RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            PlanError(format!(
                "{name}'s certificate {i} is not one a server's can be checked against: {e}"
            ))
        })?;
    }
    Ok(roots)
}

/// The certificates in `pem` (other sections are skipped); none is an error.
fn certificates(name: &str, pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| malformed(name, &e))?;
    if certs.is_empty() {
        return Err(PlanError(format!("{name} holds no certificate")));
    }
    Ok(certs)
}

/// A client certificate and its key, both PEM text and parsed.
type Identity<'a> = (
    &'a str,
    &'a str,
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
);

/// `cert` and `key`: both or neither.
fn identity<'a>(tls: &Fields<'a>) -> Result<Option<Identity<'a>>> {
    let cert = tls.optional_secret("cert", "None or PEM text of a certificate chain")?;
    let key = tls.optional_secret("key", "None or PEM text of a private key")?;
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => {
            return Err(PlanError(format!(
                "{} is given without {}: a client certificate needs its private key",
                tls.name("cert"),
                tls.name("key")
            )));
        }
        (None, Some(_)) => {
            return Err(PlanError(format!(
                "{} is given without {}: a private key needs its client certificate",
                tls.name("key"),
                tls.name("cert")
            )));
        }
    };
    let chain = certificates(&tls.name("cert"), cert)?;
    let name = tls.name("key");
    let parsed = match PrivateKeyDer::from_pem_slice(key.as_bytes()) {
        Ok(parsed) => parsed,
        Err(pem::Error::NoItemsFound) => {
            return Err(PlanError(format!(
                "{name} holds no private key (PKCS#8, PKCS#1 or SEC1 PEM)"
            )));
        }
        Err(e) => return Err(malformed(&name, &e)),
    };
    Ok(Some((cert, key, chain, parsed)))
}

/// The configuration with the client certificate; rustls checks that the
/// key is one it can sign with and that it matches the certificate.
fn with_identity(
    tls: &Fields<'_>,
    builder: ConfigBuilder<ClientConfig, WantsClientCert>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ClientConfig> {
    // rustls' errors here name the problem (an unsupported key, keys that
    // do not match), never the key.
    builder.with_client_auth_cert(chain, key).map_err(|e| {
        PlanError(format!(
            "{} cannot be used with {}: {e}",
            tls.name("key"),
            tls.name("cert")
        ))
    })
}

/// `server_name`: absent or None, or a DNS name or an IP address.
fn server_name(tls: &Fields<'_>) -> Result<Option<ServerName<'static>>> {
    let allowed = "None or a DNS name or an IP address";
    match tls.get("server_name") {
        None | Some(Value::None) => Ok(None),
        Some(Value::Str(name)) => ServerName::try_from(name.clone()).map(Some).map_err(|_| {
            PlanError(format!(
                "{} must be {allowed}, got {name:?}",
                tls.name("server_name")
            ))
        }),
        Some(other) => Err(PlanError(format!(
            "{} must be {allowed}, got {}",
            tls.name("server_name"),
            other.describe()
        ))),
    }
}

/// What is wrong with PEM text, without quoting any of it (pem::Error's
/// own text can hold a line of the input).
fn malformed(name: &str, error: &pem::Error) -> PlanError {
    let what = match error {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line",
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "a section is not valid base64",
        pem::Error::SectionTooLarge => "a section is too large",
        _ => "it cannot be read",
    };
    PlanError(format!("{name} is not well-formed PEM: {what}"))
}

/// Certificates for tests, made on the spot: a CA, a server certificate it
/// signed (for "localhost" and 127.0.0.1) and a client certificate, and a
/// second CA that signed neither.
#[cfg(test)]
pub(crate) mod pki {
    use std::sync::Arc;

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    use rustls::ServerConfig;
    use rustls::crypto::aws_lc_rs;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::server::WebPkiClientVerifier;

    use crate::plan::Value;
    use crate::plan::tests::{dict, s};

    pub(crate) struct Pki {
        pub ca: String,
        pub server_cert: String,
        pub server_key: String,
        pub client_cert: String,
        pub client_key: String,
        /// A CA that vouches for neither.
        pub other_ca: String,
    }

    fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    /// A certificate for `names` signed by `issuer`, and its key (PEM).
    fn leaf(issuer: &CertifiedIssuer<'static, KeyPair>, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    impl Pki {
        pub fn new() -> Pki {
            let ca = ca("dbtester test CA");
            let (server_cert, server_key) = leaf(&ca, &["localhost", "127.0.0.1"]);
            let (client_cert, client_key) = leaf(&ca, &["dbtester-client"]);
            Pki {
                ca: ca.pem(),
                server_cert,
                server_key,
                client_cert,
                client_key,
                other_ca: self::ca("another CA").pem(),
            }
        }

        /// The plan's `tls` trusting `ca`, with the client certificate if
        /// `mutual`.
        pub fn plan(&self, ca: &str, mutual: bool) -> Value {
            let mut entries = vec![("ca", s(ca))];
            if mutual {
                entries.push(("cert", s(&self.client_cert)));
                entries.push(("key", s(&self.client_key)));
            }
            dict(&entries)
        }

        /// A server's configuration offering `alpn`; with `mutual`, it
        /// requires a client certificate from the CA.
        pub fn server(&self, alpn: &[u8], mutual: bool) -> Arc<ServerConfig> {
            let provider = Arc::new(aws_lc_rs::default_provider());
            let builder = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap();
            let builder = if mutual {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(self.ca.as_bytes()).unwrap())
                    .unwrap();
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_no_client_auth()
            };
            let chain = CertificateDer::pem_slice_iter(self.server_cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(self.server_key.as_bytes()).unwrap();
            let mut config = builder.with_single_cert(chain, key).unwrap();
            config.alpn_protocols = vec![alpn.to_vec()];
            Arc::new(config)
        }
    }

    /// The plan's endpoint `address` with `tls` (a plan's `tls` value).
    pub(crate) fn endpoint(address: std::net::SocketAddr, tls: Value) -> super::Endpoint {
        plan(address, tls).endpoints.remove(0)
    }

    /// The good plan on `address`, with `tls`.
    pub(crate) fn plan(address: std::net::SocketAddr, tls: Value) -> crate::plan::Plan {
        let mut entries = crate::plan::tests::good();
        entries.retain(|(key, _)| *key != "endpoints");
        entries.push(("endpoints", Value::List(vec![s(&address.to_string())])));
        entries.push(("tls", tls));
        crate::plan::parse(&dict(&entries)).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::pki::Pki;
    use crate::plan::tests::{dict, good, s};
    use crate::plan::{Value, parse};

    fn with_tls(tls: Value) -> Result<crate::plan::Plan, String> {
        let mut entries = good();
        entries.push(("tls", tls));
        parse(&dict(&entries)).map_err(|e| e.0)
    }

    /// The error `tls` makes; it must not quote any PEM.
    fn error(tls: Value, pki: &Pki) -> String {
        let message = with_tls(tls).unwrap_err();
        for pem in [&pki.ca, &pki.client_cert, &pki.client_key, &pki.server_key] {
            for line in pem.lines().filter(|l| !l.starts_with("-----")) {
                assert!(!message.contains(line), "{message}");
            }
        }
        assert!(!message.contains("-----"), "{message}");
        message
    }

    #[test]
    fn no_tls_is_plain_tcp() {
        let plan = crate::plan::tests::good_plan();
        assert!(plan.tls.is_none() && plan.endpoints[0].tls.is_none());
        let plan = with_tls(Value::None).unwrap();
        assert!(plan.tls.is_none() && plan.endpoints[0].tls.is_none());
    }

    #[test]
    fn each_endpoint_checks_its_own_host_unless_a_name_is_given() {
        let pki = Pki::new();
        let plan = with_tls(pki.plan(&pki.ca, true)).unwrap();
        let tls = plan.endpoints[0].tls.as_ref().unwrap();
        assert_eq!(tls.server_name().to_str(), "127.0.0.1");
        assert!(plan.tls.as_ref().unwrap().identity_pem().is_some());
        let mut given = pki.plan(&pki.ca, false);
        if let Value::Dict(entries) = &mut given {
            entries.push(("server_name".into(), s("db.example")));
        }
        let plan = with_tls(given).unwrap();
        assert_eq!(
            plan.endpoints[0]
                .tls
                .as_ref()
                .unwrap()
                .server_name()
                .to_str(),
            "db.example"
        );
        // Clones of one plan's endpoints are equal (the leader balancer
        // finds its endpoint among them); Debug shows no PEM.
        assert_eq!(plan.endpoints[0], plan.endpoints[0].clone());
        let debug = format!("{plan:?}");
        assert!(
            debug.contains("db.example") && !debug.contains("BEGIN"),
            "{debug}"
        );
        assert!(plan.tls.as_ref().unwrap().identity_pem().is_none());
    }

    #[test]
    fn bad_tls_names_its_key_and_never_its_pem() {
        let pki = Pki::new();
        let key_as_ca = pki.plan(&pki.client_key, false);
        let unterminated = pki.ca.replace("-----END CERTIFICATE-----", "");
        let cases = [
            (s(&pki.ca), r#"plan["tls"] must be a dict, got a string"#),
            (dict(&[]), r#"plan["tls"] is missing "ca""#),
            (
                dict(&[("ca", Value::Int(3))]),
                r#"plan["tls"]["ca"] must be PEM text of one or more CA certificates, got an int"#,
            ),
            (
                pki.plan("", false),
                r#"plan["tls"]["ca"] holds no certificate"#,
            ),
            (
                pki.plan("not PEM at all", false),
                r#"plan["tls"]["ca"] holds no certificate"#,
            ),
            (key_as_ca, r#"plan["tls"]["ca"] holds no certificate"#),
            (
                pki.plan(&unterminated, false),
                r#"plan["tls"]["ca"] is not well-formed PEM: a section has no END line"#,
            ),
            (
                dict(&[("ca", s(&pki.ca)), ("cert", s(&pki.client_cert))]),
                r#"plan["tls"]["cert"] is given without plan["tls"]["key"]"#,
            ),
            (
                dict(&[("ca", s(&pki.ca)), ("key", s(&pki.client_key))]),
                r#"plan["tls"]["key"] is given without plan["tls"]["cert"]"#,
            ),
            (
                dict(&[
                    ("ca", s(&pki.ca)),
                    ("cert", s(&pki.client_cert)),
                    ("key", s(&pki.client_cert)),
                ]),
                r#"plan["tls"]["key"] holds no private key"#,
            ),
            (
                dict(&[
                    ("ca", s(&pki.ca)),
                    ("cert", s(&pki.client_cert)),
                    ("key", s(&pki.server_key)),
                ]),
                r#"plan["tls"]["key"] cannot be used with plan["tls"]["cert"]"#,
            ),
            (
                dict(&[("ca", s(&pki.ca)), ("server_name", s("not a name!"))]),
                r#"plan["tls"]["server_name"] must be None or a DNS name or an IP address, got "not a name!""#,
            ),
            (
                dict(&[("ca", s(&pki.ca)), ("verify", Value::Bool(false))]),
                r#"plan["tls"] has an unknown key "verify"; allowed keys: "ca", "cert", "key", "server_name""#,
            ),
        ];
        for (tls, expected) in cases {
            let message = error(tls, &pki);
            assert!(message.starts_with(expected), "{message}");
        }
    }

    #[test]
    fn a_host_no_certificate_can_name_needs_a_server_name() {
        let pki = Pki::new();
        let mut entries = good();
        entries.retain(|(key, _)| *key != "endpoints");
        entries.push(("endpoints", Value::List(vec![s("db..example:2379")])));
        entries.push(("tls", pki.plan(&pki.ca, false)));
        let message = parse(&dict(&entries)).unwrap_err().0;
        assert!(
            message.starts_with(r#"plan["endpoints"][0]'s host "db..example" is neither"#),
            "{message}"
        );
    }
}
