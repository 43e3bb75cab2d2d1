//! The ggml-rpc server: serves local Tessera devices to llama.cpp (or
//! Tessera) clients over TCP.
//!
//! One thread per connection, at most [`ServerConfig::max_connections`] at
//! once (more are closed on accept). Each connection must start with HELLO
//! (exactly 24 bytes), then gets its own [`Session`]. Any error — a
//! malformed or oversized message, a tensor outside its buffer, an op
//! outside the allow-list, a failed compute — closes that connection only;
//! the server keeps serving. Plain ggml-rpc has no authentication: bind to
//! loopback unless the network is trusted, or require TLS and a key
//! ([`ServerConfig::tls`], [`ServerConfig::psk`]; `crate::secure`).

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tessera::{Device, Error, Result};

use crate::cache::TensorCache;
use crate::codec::{read_request, write_reply};
use crate::msg::Request;
use crate::proto::Cmd;
use crate::secure::{Psk, Transport, server_handshake};
use crate::session::{Session, hello_reply};

/// The default endpoint, loopback only (llama.cpp's default port).
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:50052";

/// Limits and settings of a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Connections served at once.
    pub max_connections: usize,
    /// Largest request payload, in bytes.
    pub max_message_bytes: u64,
    /// Largest single buffer, in bytes (at most 1 TiB).
    pub max_buffer_bytes: u64,
    /// Largest total of one client's buffers, in bytes.
    pub max_client_bytes: u64,
    /// Most buffers one client holds at once (empty ones included).
    pub max_buffers: usize,
    /// Most nodes (and tensors) in one graph.
    pub max_graph_nodes: usize,
    /// Compute threads per stream (`None`: the device's default).
    pub threads: Option<usize>,
    /// A connection silent for this long is closed (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Print connection errors to stderr.
    pub verbose: bool,
    /// Speak TLS only (Tessera's extension, see [`crate::secure`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Serve only clients that prove this pre-shared key (Tessera's
    /// extension; llama.cpp clients cannot).
    pub psk: Option<Psk>,
    /// Time allowed for the TLS handshake and the key's proof.
    pub handshake_timeout: Duration,
    /// Tensor bytes SET_TENSOR_HASH may find (seeded by the operator,
    /// read-only to clients; `None`: every hash is "not found").
    pub cache: Option<Arc<TensorCache>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 8,
            max_message_bytes: 1 << 30,
            max_buffer_bytes: 16 << 30,
            max_client_bytes: 32 << 30,
            max_buffers: 1 << 16,
            max_graph_nodes: 1 << 16,
            threads: None,
            idle_timeout: Some(Duration::from_secs(600)),
            verbose: false,
            tls: None,
            psk: None,
            handshake_timeout: Duration::from_secs(10),
            cache: None,
        }
    }
}

/// A bound server, not yet accepting.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    devices: Arc<Vec<Arc<dyn Device>>>,
    config: Arc<ServerConfig>,
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Bind `addr` (e.g. [`DEFAULT_ENDPOINT`], or `127.0.0.1:0` for any
    /// free port) to serve `devices` (at least one).
    pub fn bind(
        addr: impl ToSocketAddrs,
        devices: Vec<Arc<dyn Device>>,
        mut config: ServerConfig,
    ) -> Result<Server> {
        if devices.is_empty() {
            return Err(Error::NotFound("no device to serve".into()));
        }
        config.max_buffer_bytes = config.max_buffer_bytes.min((1 << 40) - 1);
        Ok(Server {
            listener: TcpListener::bind(addr)?,
            devices: Arc::new(devices),
            config: Arc::new(config),
            active: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// Accept connections until [`ServerHandle::shutdown`] (blocking).
    pub fn run(&self) -> Result<()> {
        for conn in self.listener.incoming() {
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(sock) = conn else {
                // Out of descriptors or similar: do not spin.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            if self.active.load(Ordering::SeqCst) >= self.config.max_connections {
                if self.config.verbose {
                    eprintln!("rpc-server: connection limit reached, closing a new connection");
                }
                continue;
            }
            self.active.fetch_add(1, Ordering::SeqCst);
            let guard = ActiveGuard(self.active.clone());
            let devices = self.devices.clone();
            let config = self.config.clone();
            let spawned = std::thread::Builder::new()
                .name("tessera-rpc-conn".into())
                .spawn(move || {
                    let _guard = guard;
                    let peer = sock.peer_addr().ok();
                    if let Err(e) = serve_connection(sock, devices, config.clone())
                        && config.verbose
                    {
                        eprintln!("rpc-server: connection {peer:?} closed: {e}");
                    }
                });
            if spawned.is_err() && self.config.verbose {
                eprintln!("rpc-server: could not start a connection thread");
            }
        }
        Ok(())
    }

    /// Run the accept loop on a thread of its own.
    pub fn spawn(self) -> Result<ServerHandle> {
        let addr = self.local_addr()?;
        let stop = self.stop.clone();
        let active = self.active.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-rpc-accept".into())
            .spawn(move || {
                let _ = self.run();
            })?;
        Ok(ServerHandle {
            addr,
            stop,
            active,
            thread: Mutex::new(Some(thread)),
        })
    }
}

/// Decrements the connection count when a connection thread ends (also by
/// unwinding).
struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running server; shut down on drop.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections being served now.
    pub fn active_connections(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Is the accept loop still running?
    pub fn is_running(&self) -> bool {
        self.thread
            .lock()
            .ok()
            .and_then(|t| t.as_ref().map(|t| !t.is_finished()))
            .unwrap_or(false)
    }

    /// Stop accepting (connections being served finish on their own).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        let t = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Serve one connection to its end.
fn serve_connection(
    sock: TcpStream,
    devices: Arc<Vec<Arc<dyn Device>>>,
    config: Arc<ServerConfig>,
) -> Result<()> {
    sock.set_nodelay(true)?;
    let handshake = Some(config.handshake_timeout.max(Duration::from_millis(1)));
    sock.set_read_timeout(handshake)?;
    sock.set_write_timeout(handshake)?;
    let control = sock.try_clone()?;
    let mut reader = server_handshake(sock, config.tls.as_ref(), config.psk.as_ref())?;
    control.set_read_timeout(config.idle_timeout)?;
    control.set_write_timeout(config.idle_timeout)?;
    let limit = config.max_message_bytes;
    let Some((cmd, payload)) = read_request(&mut reader, limit.min(64))? else {
        return Ok(());
    };
    if cmd != Cmd::Hello as u8 {
        return Err(Error::Malformed(format!(
            "first command {cmd} is not HELLO"
        )));
    }
    Request::decode(cmd, &payload)?;
    send_reply(&mut reader, &hello_reply())?;
    let mut session = Session::new(devices, config);
    while let Some((cmd, payload)) = read_request(&mut reader, limit)? {
        let req = Request::decode(cmd, &payload)?;
        drop(payload);
        if let Some(reply) = session.handle(req)? {
            send_reply(&mut reader, &reply)?;
        }
    }
    Ok(())
}

/// Write a reply frame through the connection's stream: small ones as one
/// write (one TCP segment, one TLS record).
fn send_reply(io: &mut BufReader<Box<dyn Transport>>, payload: &[u8]) -> Result<()> {
    let w = io.get_mut();
    if payload.len() <= 64 << 10 {
        let mut frame = Vec::with_capacity(8 + payload.len());
        frame.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        frame.extend_from_slice(payload);
        w.write_all(&frame)?;
        w.flush()?;
        return Ok(());
    }
    write_reply(w, payload)
}
