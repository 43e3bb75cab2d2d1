//! Tessera's TLS and pre-shared-key extension on loopback: graphs computed
//! over TLS, with a key, and with both equal the local CPU's bytes; a
//! client that does not trust the certificate, holds another key or none,
//! a plain (llama.cpp-style) client, and garbage are all refused with an
//! error or a closed connection, never a hang, and the server serves on.
//! The certificates are test fixtures made by `scripts/rpc-tls/make-certs.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::Raw;
use common::{Val, client_options, config, ramp, same_as_local, server_with};
use tessera::{DType, Device, Graph};
use tessera_rpc::{ClientOptions, Psk, ServerConfig, ServerHandle, client_tls, server_tls};

fn tls_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
}

fn tls_server(psk: Option<Psk>) -> ServerHandle {
    let d = tls_dir();
    server_with(ServerConfig {
        tls: Some(server_tls(&d.join("server.pem"), &d.join("server.key")).unwrap()),
        psk,
        handshake_timeout: Duration::from_secs(3),
        ..config()
    })
}

fn key(s: &str) -> Psk {
    Psk::new(s.as_bytes().to_vec()).unwrap()
}

fn connect(
    endpoint: &str,
    ca: Option<&str>,
    psk: Option<Psk>,
) -> tessera::Result<Vec<Arc<dyn Device>>> {
    let opts = ClientOptions {
        tls: ca.map(|f| client_tls(&tls_dir().join(f)).unwrap()),
        psk,
        ..client_options()
    };
    tessera_rpc::connect_with(endpoint, opts)
}

/// A small matmul + norm graph: remote bytes equal local bytes.
fn check_compute(dev: &Arc<dyn Device>) {
    let mut g = Graph::new();
    let w = g.new_tensor(DType::Q8_0, &[64, 32]).unwrap();
    let x = g.new_tensor(DType::F32, &[64, 5]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let n = g.rms_norm(y, 1e-5).unwrap();
    let inputs = [
        (w, Val::F(ramp(64 * 32, 0.02))),
        (x, Val::F(ramp(64 * 5, 0.1))),
    ];
    same_as_local(dev, &g, &inputs, &[y, n]);
}

#[test]
fn graphs_over_tls_match_the_local_cpu() {
    let h = tls_server(None);
    // By IP address and by name: both are in the certificate.
    for ep in [
        h.addr().to_string(),
        format!("localhost:{}", h.addr().port()),
    ] {
        let mut devs = connect(&ep, Some("ca.pem"), None).unwrap();
        check_compute(&devs.remove(0));
    }
}

#[test]
fn graphs_with_a_key_match_the_local_cpu_with_and_without_tls() {
    let secret = "a key of thirty-two bytes, maybe";
    let plain = server_with(ServerConfig {
        psk: Some(key(secret)),
        ..config()
    });
    let mut devs = connect(&plain.addr().to_string(), None, Some(key(secret))).unwrap();
    check_compute(&devs.remove(0));
    let both = tls_server(Some(key(secret)));
    let mut devs = connect(&both.addr().to_string(), Some("ca.pem"), Some(key(secret))).unwrap();
    check_compute(&devs.remove(0));
}

#[test]
fn an_untrusted_certificate_is_refused() {
    let h = tls_server(None);
    let t0 = Instant::now();
    let err = connect(&h.addr().to_string(), Some("other-ca.pem"), None).unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    // A name the certificate does not hold.
    let err = connect(
        &format!("127.0.0.2:{}", h.addr().port()),
        Some("ca.pem"),
        None,
    );
    if let Err(e) = err {
        assert!(
            e.to_string().contains("TLS") || e.to_string().contains("connect"),
            "{e}"
        );
    } else {
        panic!("127.0.0.2 is not a name of the certificate");
    }
    // Plain ggml-rpc against the TLS server: refused, quickly.
    assert!(connect(&h.addr().to_string(), None, None).is_err());
    assert!(t0.elapsed() < Duration::from_secs(15));
    // The server serves on.
    let mut devs = connect(&h.addr().to_string(), Some("ca.pem"), None).unwrap();
    check_compute(&devs.remove(0));
}

#[test]
fn a_wrong_key_or_none_is_refused_and_the_server_serves_on() {
    let secret = "the server's key, 32 bytes long!";
    let h = server_with(ServerConfig {
        psk: Some(key(secret)),
        handshake_timeout: Duration::from_secs(3),
        ..config()
    });
    let ep = h.addr().to_string();
    let err = connect(&ep, None, Some(key("another key of thirty-two bytes!"))).unwrap_err();
    assert!(err.to_string().contains("authentication failed"), "{err}");
    // No key: HELLO first, as llama.cpp's client does; the server closes.
    let mut raw = Raw::bare(h.addr());
    assert!(
        raw.call(&tessera_rpc::msg::Request::Hello { caps: [0; 24] })
            .is_none(),
        "a client without the key got a HELLO reply"
    );
    assert!(connect(&ep, None, None).is_err());
    // A challenge, then a forged proof.
    let mut raw = Raw::bare(h.addr());
    assert!(raw.send(tessera_rpc::secure::CMD_AUTH_CHALLENGE, &[7; 32]));
    let r = raw.reply().expect("the server's challenge");
    assert_eq!(r.len(), 64);
    assert!(raw.send(tessera_rpc::secure::CMD_AUTH_PROVE, &r[32..]));
    assert!(raw.reply().is_none(), "a forged proof was accepted");
    // Oversized challenge: closed before it is read.
    let mut raw = Raw::bare(h.addr());
    raw.send(tessera_rpc::secure::CMD_AUTH_CHALLENGE, &vec![0; 1 << 20]);
    assert!(raw.reply().is_none());
    // A silent client is dropped after the handshake timeout.
    let mut raw = Raw::bare(h.addr());
    let t0 = Instant::now();
    assert!(raw.reply().is_none());
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    // The right key still works.
    let mut devs = connect(&ep, None, Some(key(secret))).unwrap();
    check_compute(&devs.remove(0));
}

#[test]
fn a_key_against_a_server_without_one_is_a_clear_error() {
    let h = server_with(config());
    let err = connect(
        &h.addr().to_string(),
        None,
        Some(key("a key this server does not know")),
    )
    .unwrap_err();
    assert!(err.to_string().contains("authentication failed"), "{err}");
    // Garbage instead of a TLS handshake: closed, server alive.
    let t = tls_server(None);
    let mut raw = Raw::bare(t.addr());
    raw.send_bytes(&[0x16, 3, 1, 0xff, 0xff, 1, 2, 3, 4, 5]);
    assert!(raw.reply().is_none());
    let mut devs = connect(&t.addr().to_string(), Some("ca.pem"), None).unwrap();
    check_compute(&devs.remove(0));
}

#[test]
fn short_keys_and_bad_files_are_errors() {
    assert!(Psk::new(b"short".to_vec()).is_err());
    let dir = std::env::temp_dir().join(format!("tessera-psk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("key");
    std::fs::write(&f, "  0123456789abcdef0123456789abcdef\n").unwrap();
    let k = Psk::from_file(&f).unwrap();
    assert!(!format!("{k:?}").contains("0123"), "the key shows in Debug");
    std::fs::write(&f, vec![b'a'; 5000]).unwrap();
    assert!(Psk::from_file(&f).is_err());
    assert!(Psk::from_file(&dir.join("missing")).is_err());
    let d = tls_dir();
    assert!(server_tls(&d.join("ca.pem"), &d.join("missing.key")).is_err());
    assert!(server_tls(&d.join("server.key"), &d.join("server.key")).is_err());
    assert!(client_tls(&d.join("server.key")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
