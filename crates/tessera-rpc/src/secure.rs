//! Tessera's extension of ggml-rpc for networks that are not trusted: TLS
//! (rustls, TLS 1.3/1.2) around the connection, and authentication with a
//! pre-shared key. Both are opt-in on each side; llama.cpp peers never
//! negotiate them (they speak plain ggml-rpc to a server configured
//! without them).
//!
//! **TLS**: the server presents a certificate chain and key from PEM files
//! ([`server_tls`]); the client trusts the certificates of a PEM file
//! ([`client_tls`]; a self-signed server certificate can be its own trust
//! anchor) and checks the server's name or IP address against it.
//!
//! **Pre-shared key** ([`Psk`]): before HELLO, client and server prove to
//! each other that they hold the key, without sending it:
//!
//! 1. client → `AUTH_CHALLENGE` (command 0xF0): a 32-byte random nonce `nc`;
//! 2. server → its nonce `ns` and `HMAC(key, "tessera-rpc server" | nc | ns | b)`;
//! 3. client checks it, → `AUTH_PROVE` (0xF1): `HMAC(key, "tessera-rpc client" | nc | ns | b)`;
//! 4. server checks it, → one byte 1; then the connection goes on as plain
//!    ggml-rpc (HELLO first).
//!
//! HMAC is HMAC-SHA-256; `b` binds the proof to the TLS session (32 bytes
//! exported from it, RFC 5705/8446) when there is one, so a proof cannot be
//! relayed into another session. A server with a key closes any connection
//! that does not start with a valid proof (a llama.cpp client's HELLO
//! included); a failed proof costs the client the connection, and both
//! sides compare in constant time. Without TLS the key keeps strangers out
//! but the traffic is readable: use both on an open network.

use std::fmt;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::Arc;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, RootCertStore, ServerConfig,
    ServerConnection, SideData,
};
use tessera::{Error, Result};

use crate::codec::{read_reply, read_request, request_frame, write_reply};

/// First command of an authenticating client (outside ggml's command ids).
pub const CMD_AUTH_CHALLENGE: u8 = 0xF0;
/// Second command of an authenticating client.
pub const CMD_AUTH_PROVE: u8 = 0xF1;

const NONCE: usize = 32;
const MAC: usize = 32;
const EXPORTER_LABEL: &[u8] = b"EXPORTER-tessera-rpc-auth";

/// A byte stream the protocol runs over: a TCP socket, or TLS over one.
pub trait Transport: Read + Write + Send + fmt::Debug {}
impl<T: Read + Write + Send + fmt::Debug> Transport for T {}

/// A pre-shared key (at least 16 bytes; its bytes never appear in `Debug`).
#[derive(Clone)]
pub struct Psk(Vec<u8>);

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psk({} bytes)", self.0.len())
    }
}

impl Psk {
    /// The shortest key accepted.
    pub const MIN_LEN: usize = 16;

    /// A key of these bytes.
    pub fn new(key: impl Into<Vec<u8>>) -> Result<Psk> {
        let key = key.into();
        if key.len() < Psk::MIN_LEN {
            return Err(Error::InvalidLayout(format!(
                "a pre-shared key of {} bytes: at least {} needed (e.g. 32 random bytes, hex)",
                key.len(),
                Psk::MIN_LEN
            )));
        }
        Ok(Psk(key))
    }

    /// The key in file `path` (its content without surrounding whitespace;
    /// at most 4 KiB), so that it never shows in a process list.
    pub fn from_file(path: &Path) -> Result<Psk> {
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::NotFound(format!("key file {}: {e}", path.display())))?;
        if meta.len() > 4096 {
            return Err(Error::InvalidLayout(format!(
                "key file {}: {} bytes (a key file holds at most 4096)",
                path.display(),
                meta.len()
            )));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| Error::NotFound(format!("key file {}: {e}", path.display())))?;
        let text = bytes.trim_ascii();
        Psk::new(text.to_vec())
    }

    fn mac(&self, role: &[u8], nc: &[u8], ns: &[u8], binding: &[u8]) -> hmac::Tag {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        let mut ctx = hmac::Context::with_key(&key);
        for part in [role, nc, ns, binding] {
            ctx.update(part);
        }
        ctx.sign()
    }

    fn verify(&self, role: &[u8], nc: &[u8], ns: &[u8], binding: &[u8], tag: &[u8]) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        let msg = [role, nc, ns, binding].concat();
        hmac::verify(&key, &msg, tag).is_ok()
    }
}

fn tls_error(what: &str, e: impl fmt::Display) -> Error {
    Error::InvalidLayout(format!("TLS: {what}: {e}"))
}

/// A server TLS configuration from a PEM certificate chain and a PEM
/// private key (PKCS#8, PKCS#1 or SEC1).
pub fn server_tls(cert_chain: &Path, key: &Path) -> Result<Arc<ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(cert_chain)
        .map_err(|e| tls_error(&format!("reading {}", cert_chain.display()), e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_error(&format!("reading {}", cert_chain.display()), e))?;
    if certs.is_empty() {
        return Err(tls_error(
            &cert_chain.display().to_string(),
            "no certificate in the file",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| tls_error(&format!("reading {}", key.display()), e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("protocol versions", e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls_error("certificate and key", e))?;
    Ok(Arc::new(config))
}

/// A client TLS configuration trusting the certificates of PEM file `ca`.
pub fn client_tls(ca: &Path) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)
        .map_err(|e| tls_error(&format!("reading {}", ca.display()), e))?
    {
        let cert = cert.map_err(|e| tls_error(&format!("reading {}", ca.display()), e))?;
        roots
            .add(cert)
            .map_err(|e| tls_error(&format!("a certificate of {}", ca.display()), e))?;
    }
    if roots.is_empty() {
        return Err(tls_error(
            &ca.display().to_string(),
            "no certificate in the file",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("protocol versions", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Complete the TLS handshake of `conn` over `sock`; the stream and the
/// 32 bytes that bind a proof to this session.
fn tls_session<C, D>(
    mut conn: C,
    mut sock: TcpStream,
    what: &str,
) -> Result<(Box<dyn Transport>, Vec<u8>)>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + fmt::Debug + 'static,
    D: SideData + 'static,
{
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| tls_error(what, e))?;
    }
    let mut b = vec![0; 32];
    conn.export_keying_material(&mut b, EXPORTER_LABEL, None)
        .map_err(|e| tls_error("exporting the session binding", e))?;
    Ok((Box::new(rustls::StreamOwned::new(conn, sock)), b))
}

/// The client's side of a connection: `sock` (timeouts already set), in
/// TLS when `tls` is given (checking the certificate against `host`),
/// authenticated when `psk` is given. Returns the stream the protocol runs
/// over.
pub fn client_handshake(
    sock: TcpStream,
    host: &str,
    tls: Option<&Arc<ClientConfig>>,
    psk: Option<&Psk>,
) -> Result<BufReader<Box<dyn Transport>>> {
    let (stream, binding): (Box<dyn Transport>, Vec<u8>) = match tls {
        None => (Box::new(sock), Vec::new()),
        Some(cfg) => {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| tls_error(&format!("server name {host}"), e))?;
            let conn = ClientConnection::new(cfg.clone(), name)
                .map_err(|e| tls_error("starting the handshake", e))?;
            tls_session(conn, sock, &format!("handshake with {host}"))?
        }
    };
    let mut io = BufReader::new(stream);
    if let Some(psk) = psk {
        client_auth(&mut io, psk, &binding)?;
    }
    Ok(io)
}

fn client_auth(io: &mut BufReader<Box<dyn Transport>>, psk: &Psk, binding: &[u8]) -> Result<()> {
    let refused = |what: &str| {
        Error::device(
            "RPC",
            format!(
                "authentication failed: {what} (is the key right, and is the server Tessera's \
                 with a key? llama.cpp's server knows no authentication)"
            ),
        )
    };
    let mut nc = [0u8; NONCE];
    SystemRandom::new()
        .fill(&mut nc)
        .map_err(|_| Error::device("RPC", "no system randomness for a nonce"))?;
    let w = io.get_mut();
    w.write_all(&request_frame(CMD_AUTH_CHALLENGE, &nc))?;
    w.flush()?;
    let r = read_reply(io, (NONCE + MAC) as u64)
        .map_err(|e| refused(&format!("no challenge came back ({e})")))?;
    let (ns, tag) = r.split_at(NONCE);
    if !psk.verify(b"tessera-rpc server", &nc, ns, binding, tag) {
        return Err(refused("the server does not hold the key"));
    }
    let proof = psk.mac(b"tessera-rpc client", &nc, ns, binding);
    let w = io.get_mut();
    w.write_all(&request_frame(CMD_AUTH_PROVE, proof.as_ref()))?;
    w.flush()?;
    let ok = read_reply(io, 1).map_err(|e| refused(&format!("the server closed ({e})")))?;
    if ok != [1] {
        return Err(refused("the server refused the proof"));
    }
    Ok(())
}

/// The server's side of a connection: TLS when `tls` is given, then the
/// key's proof when `psk` is given (see the module docs). Returns the
/// stream the protocol runs over.
pub fn server_handshake(
    sock: TcpStream,
    tls: Option<&Arc<ServerConfig>>,
    psk: Option<&Psk>,
) -> Result<BufReader<Box<dyn Transport>>> {
    let (stream, binding): (Box<dyn Transport>, Vec<u8>) = match tls {
        None => (Box::new(sock), Vec::new()),
        Some(cfg) => {
            let conn = ServerConnection::new(cfg.clone()).map_err(|e| tls_error("starting", e))?;
            tls_session(conn, sock, "handshake")?
        }
    };
    let mut io = BufReader::new(stream);
    if let Some(psk) = psk {
        server_auth(&mut io, psk, &binding)?;
    }
    Ok(io)
}

fn server_auth(io: &mut BufReader<Box<dyn Transport>>, psk: &Psk, binding: &[u8]) -> Result<()> {
    let unauthenticated = |what: &str| Error::Malformed(format!("not authenticated: {what}"));
    let Some((cmd, nc)) = read_request(io, NONCE as u64)? else {
        return Err(unauthenticated("closed before the challenge"));
    };
    if cmd != CMD_AUTH_CHALLENGE || nc.len() != NONCE {
        return Err(unauthenticated(&format!(
            "command {cmd} before the key's proof (a client without the key?)"
        )));
    }
    let mut ns = [0u8; NONCE];
    SystemRandom::new()
        .fill(&mut ns)
        .map_err(|_| Error::device("RPC", "no system randomness for a nonce"))?;
    let tag = psk.mac(b"tessera-rpc server", &nc, &ns, binding);
    write_reply(io.get_mut(), &[&ns[..], tag.as_ref()].concat())?;
    io.get_mut().flush()?;
    let Some((cmd, proof)) = read_request(io, MAC as u64)? else {
        return Err(unauthenticated("closed before the proof"));
    };
    if cmd != CMD_AUTH_PROVE || !psk.verify(b"tessera-rpc client", &nc, &ns, binding, &proof) {
        return Err(unauthenticated("wrong proof"));
    }
    write_reply(io.get_mut(), &[1])?;
    io.get_mut().flush()?;
    Ok(())
}
