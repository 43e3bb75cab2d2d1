//! One client connection to a ggml-rpc server: HELLO with the version
//! check, then requests in order over one socket.
//!
//! Every socket operation has a timeout, so a dead or silent peer is an
//! error, never a hang. The first failure poisons the connection: every
//! later call returns the same error at once (the protocol has no way to
//! resynchronise a half-sent frame).
//!
//! Every frame is counted ([`ConnStats`]): bytes each way, requests, and
//! how many graphs went as a whole (GRAPH_COMPUTE) or as a reference to
//! the stored one (GRAPH_RECOMPUTE).

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tessera::{Error, Result};

use crate::codec::{read_reply, request_frame};
use crate::msg::Request;
use crate::proto::{CONN_CAPS_SIZE, Cmd, PROTO_MAJOR, PROTO_MINOR};
use crate::secure::{Psk, Transport, client_handshake};

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Time allowed to open the TCP connection.
    pub connect_timeout: Duration,
    /// Time allowed for any single read or write (including waiting for a
    /// remote compute to finish before a reply).
    pub io_timeout: Duration,
    /// Speak TLS, trusting these roots (Tessera's extension, see
    /// [`crate::secure`]; `None`: plain TCP, as llama.cpp).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Prove this pre-shared key before HELLO (Tessera's extension).
    pub psk: Option<Psk>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(300),
            tls: None,
            psk: None,
        }
    }
}

/// Traffic of one connection since it was opened (HELLO included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Bytes written to the socket (frame headers included).
    pub bytes_sent: u64,
    /// Bytes read from the socket (reply size headers included).
    pub bytes_received: u64,
    /// Frames sent (requests of every kind).
    pub requests: u64,
    /// Graphs sent whole (GRAPH_COMPUTE).
    pub graph_computes: u64,
    /// Graphs run again by reference (GRAPH_RECOMPUTE).
    pub graph_recomputes: u64,
}

impl ConnStats {
    /// The traffic between `earlier` and `self` (field by field).
    pub fn since(&self, earlier: &ConnStats) -> ConnStats {
        ConnStats {
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            requests: self.requests.saturating_sub(earlier.requests),
            graph_computes: self.graph_computes.saturating_sub(earlier.graph_computes),
            graph_recomputes: self
                .graph_recomputes
                .saturating_sub(earlier.graph_recomputes),
        }
    }

    /// Bytes both ways.
    pub fn bytes(&self) -> u64 {
        self.bytes_sent.saturating_add(self.bytes_received)
    }
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    requests: AtomicU64,
    computes: AtomicU64,
    recomputes: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: usize) {
        c.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// The connection's stream (reads buffered; writes go through
/// `get_mut`, one frame at a time).
type Io = BufReader<Box<dyn Transport>>;

#[derive(Debug)]
enum State {
    Open(Io),
    Failed(String),
}

/// A connection (shared by the devices, buffers and streams of one server).
#[derive(Debug)]
pub struct Conn {
    endpoint: String,
    state: Mutex<State>,
    /// The last GRAPH_COMPUTE payload sent per device, for GRAPH_RECOMPUTE.
    last_graph: Mutex<HashMap<u32, Vec<u8>>>,
    counters: Counters,
    /// Server version from HELLO.
    pub version: (u8, u8, u8),
}

/// The exact reply size of a request (GET_TENSOR: the bytes asked for).
fn reply_size(req: &Request) -> Option<u64> {
    Some(match req {
        Request::Hello { .. } => 4 + CONN_CAPS_SIZE as u64,
        Request::DeviceCount => 4,
        Request::AllocBuffer { .. } | Request::GetDeviceMemory { .. } => 16,
        Request::GetAlignment { .. }
        | Request::GetMaxSize { .. }
        | Request::BufferGetBase { .. }
        | Request::GetAllocSize { .. } => 8,
        Request::SetTensorHash { .. } | Request::CopyTensor { .. } => 1,
        Request::GetTensor { size, .. } => *size,
        _ => return None,
    })
}

impl Conn {
    /// Connect to `endpoint` (`host:port`) and shake hands: the server must
    /// speak major version 7 and a minor version not above ours.
    pub fn connect(endpoint: &str, opts: ClientOptions) -> Result<Conn> {
        let addrs = endpoint
            .to_socket_addrs()
            .map_err(|e| Error::device(format!("RPC[{endpoint}]"), format!("bad endpoint: {e}")))?;
        let mut last = None;
        let mut sock = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, opts.connect_timeout) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let sock = sock.ok_or_else(|| {
            Error::device(
                format!("RPC[{endpoint}]"),
                format!(
                    "cannot connect: {}",
                    last.map_or("no address".into(), |e| e.to_string())
                ),
            )
        })?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(opts.io_timeout))?;
        sock.set_write_timeout(Some(opts.io_timeout))?;
        let host = endpoint
            .rsplit_once(':')
            .map_or(endpoint, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let io = client_handshake(sock, host, opts.tls.as_ref(), opts.psk.as_ref())
            .map_err(|e| Error::device(format!("RPC[{endpoint}]"), e.to_string()))?;
        let mut conn = Conn {
            endpoint: endpoint.to_owned(),
            state: Mutex::new(State::Open(io)),
            last_graph: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            version: (0, 0, 0),
        };
        let secured = opts.tls.is_some() || opts.psk.is_some();
        let r = conn
            .call(&Request::Hello {
                caps: [0; CONN_CAPS_SIZE],
            })
            .map_err(|e| match (e, secured) {
                (Error::Device { device, message }, false) => Error::Device {
                    device,
                    message: format!(
                        "{message} (if the server is Tessera's with a key or TLS, give the \
                         key file and the CA: --rpc-psk-file, --rpc-ca)"
                    ),
                },
                (e, _) => e,
            })?;
        let v = (r[0], r[1], r[2]);
        if v.0 != PROTO_MAJOR || v.1 > PROTO_MINOR {
            return Err(Error::device(
                conn.name(),
                format!(
                    "server speaks ggml-rpc {}.{}.{}, this client {PROTO_MAJOR}.{PROTO_MINOR}.x",
                    v.0, v.1, v.2
                ),
            ));
        }
        conn.version = v;
        Ok(conn)
    }

    /// `RPC[endpoint]`.
    pub fn name(&self) -> String {
        format!("RPC[{}]", self.endpoint)
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Traffic so far.
    pub fn stats(&self) -> ConnStats {
        let c = &self.counters;
        ConnStats {
            bytes_sent: c.sent.load(Ordering::Relaxed),
            bytes_received: c.received.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            graph_computes: c.computes.load(Ordering::Relaxed),
            graph_recomputes: c.recomputes.load(Ordering::Relaxed),
        }
    }

    /// Is the connection still usable?
    pub fn is_open(&self) -> bool {
        matches!(*self.lock(), State::Open(_))
    }

    /// Send `req`; wait for and return its reply payload if it has one
    /// (empty otherwise).
    pub fn call(&self, req: &Request) -> Result<Vec<u8>> {
        let mut st = self.lock();
        let io = match &mut *st {
            State::Open(io) => io,
            State::Failed(why) => {
                return Err(Error::device(
                    self.name(),
                    format!("connection lost: {why}"),
                ));
            }
        };
        let cmd = req.cmd();
        let frame = request_frame(cmd as u8, &req.encode());
        Counters::add(&self.counters.requests, 1);
        Counters::add(&self.counters.sent, frame.len());
        let has_reply = cmd.has_reply() && reply_size(req).is_some();
        let res = io
            .get_mut()
            .write_all(&frame)
            .and_then(|()| io.get_mut().flush())
            .map_err(Error::from)
            .and_then(|()| match reply_size(req) {
                Some(n) if cmd.has_reply() => read_reply(io, n),
                _ => Ok(Vec::new()),
            });
        match res {
            Ok(r) => {
                if has_reply {
                    Counters::add(&self.counters.received, 8 + r.len());
                }
                Ok(r)
            }
            Err(e) => {
                let why = format!("{cmd:?}: {e}");
                *st = State::Failed(why.clone());
                Err(Error::device(
                    self.name(),
                    format!("connection lost: {why}"),
                ))
            }
        }
    }

    /// A `u64` reply.
    pub fn call_u64(&self, req: &Request) -> Result<u64> {
        let r = self.call(req)?;
        let b: [u8; 8] = r
            .get(..8)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| Error::Malformed("short reply".into()))?;
        Ok(u64::from_le_bytes(b))
    }

    /// Forget the graphs the server keeps (a buffer they may use is freed).
    pub fn forget_graphs(&self) {
        self.last_graph
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Send a graph: GRAPH_RECOMPUTE if `payload` is exactly the last graph
    /// sent for `device`, GRAPH_COMPUTE otherwise.
    pub fn compute(&self, device: u32, payload: Vec<u8>) -> Result<()> {
        let mut last = self.last_graph.lock().unwrap_or_else(|p| p.into_inner());
        if last.get(&device) == Some(&payload) {
            drop(last);
            Counters::add(&self.counters.recomputes, 1);
            self.call(&Request::GraphRecompute { device })?;
            return Ok(());
        }
        last.remove(&device);
        drop(last);
        Counters::add(&self.counters.computes, 1);
        self.send_raw(Cmd::GraphCompute, &payload)?;
        self.last_graph
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(device, payload);
        Ok(())
    }

    /// Send a request without a reply from an already encoded payload.
    fn send_raw(&self, cmd: Cmd, payload: &[u8]) -> Result<()> {
        let mut st = self.lock();
        let io = match &mut *st {
            State::Open(io) => io,
            State::Failed(why) => {
                return Err(Error::device(
                    self.name(),
                    format!("connection lost: {why}"),
                ));
            }
        };
        let frame = request_frame(cmd as u8, payload);
        Counters::add(&self.counters.requests, 1);
        Counters::add(&self.counters.sent, frame.len());
        if let Err(e) = io
            .get_mut()
            .write_all(&frame)
            .and_then(|()| io.get_mut().flush())
        {
            let why = format!("{cmd:?}: {e}");
            *st = State::Failed(why.clone());
            return Err(Error::device(
                self.name(),
                format!("connection lost: {why}"),
            ));
        }
        Ok(())
    }
}
