//! A TCP fault proxy on a free loopback port, in front of one server.
//!
//! Plain threads, std only: one accepting thread, two pumping threads per
//! connection. The mode can be switched at any time:
//!
//! * [`ProxyMode::Pass`]: bytes are forwarded as they come.
//! * [`ProxyMode::Latency`]: every chunk is held for the given time, in both
//!   directions, before it is forwarded.
//! * [`ProxyMode::Blackhole`]: connections are accepted and kept open, but
//!   nothing is read or forwarded in either direction (a partition: the
//!   kernel buffers fill, nobody gets an answer). Back in `Pass`, whatever was
//!   held is delivered late, as a healed network would.
//! * [`ProxyMode::Reset`]: every open connection is closed with a TCP reset,
//!   and new ones are reset as soon as they are accepted.
//! * [`ProxyMode::LoseNextReply`]: requests are forwarded; the next reply
//!   that comes back is dropped and its connection reset (the server did
//!   the work, the client never hears of it); then back to `Pass`.
//!
//! Dropping the proxy closes the listener and every connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::free_port;

/// How often idle threads look at the mode and the stop flag.
const TICK: Duration = Duration::from_millis(5);
/// How long a forward may block on a peer that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the proxy does with traffic; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward everything at once.
    Pass,
    /// Hold every chunk this long before forwarding it.
    Latency(Duration),
    /// Accept, hold, forward nothing, answer nothing.
    Blackhole,
    /// Reset every connection, old and new.
    Reset,
    /// Forward requests; drop the next reply and reset its connection, then
    /// pass again.
    LoseNextReply,
    /// As `LoseNextReply`, then `Blackhole` (the client's resend waits until
    /// the test passes traffic again).
    LoseNextReplyThenHold,
}

struct Shared {
    mode: Mutex<ProxyMode>,
    /// Bumped on every switch to `Reset`: connections opened before it die.
    resets: AtomicU64,
    stop: AtomicBool,
    upstream: SocketAddr,
    accepted: AtomicU64,
}

impl Shared {
    fn mode(&self) -> ProxyMode {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running proxy; see the module docs.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream_port`,
    /// in [`ProxyMode::Pass`].
    pub fn start(upstream_port: u16) -> FaultProxy {
        let (listener, port) = loop {
            let port = free_port();
            if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
                break (listener, port);
            }
        };
        listener
            .set_nonblocking(true)
            .expect("proxy: nonblocking listener");
        let shared = Arc::new(Shared {
            mode: Mutex::new(ProxyMode::Pass),
            resets: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
            accepted: AtomicU64::new(0),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-{port}"))
                .spawn(move || accept_loop(listener, shared))
                .expect("proxy: spawn acceptor")
        };
        FaultProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Switch mode; takes effect within a few milliseconds.
    pub fn set_mode(&self, mode: ProxyMode) {
        let mut current = self.shared.mode.lock().unwrap_or_else(|e| e.into_inner());
        if mode == ProxyMode::Reset {
            self.shared.resets.fetch_add(1, Ordering::SeqCst);
        }
        *current = mode;
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        self.shared.mode()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Close with RST rather than FIN: the peer sees "connection reset".
fn reset(stream: &TcpStream) {
    // SO_LINGER with a zero timeout makes close() send a reset.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a socket we own, with a correctly sized struct.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = stream.shutdown(Shutdown::Both);
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let _ = client.set_nonblocking(false);
                if shared.mode() == ProxyMode::Reset {
                    reset(&client);
                    continue;
                }
                let Ok(server) =
                    TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(2))
                else {
                    reset(&client);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let generation = shared.resets.load(Ordering::SeqCst);
                let dead = Arc::new(AtomicBool::new(false));
                for (from, to, replies) in [(&client, &server, false), (&server, &client, true)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let shared = shared.clone();
                    let dead = dead.clone();
                    if let Ok(handle) = std::thread::Builder::new()
                        .name("proxy-pump".into())
                        .spawn(move || pump(from, to, replies, shared, generation, dead))
                    {
                        pumps.push(handle);
                    }
                }
                pumps.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(_) => std::thread::sleep(TICK),
        }
    }
    drop(listener);
    for handle in pumps {
        let _ = handle.join();
    }
}

/// Copies `from` to `to` according to the mode until either side closes, the
/// connection is reset, or the proxy stops.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    replies: bool,
    shared: Arc<Shared>,
    generation: u64,
    dead: Arc<AtomicBool>,
) {
    let _ = from.set_read_timeout(Some(TICK));
    // A peer that stops reading must not keep the proxy from stopping.
    let _ = to.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if shared.stop.load(Ordering::SeqCst) || dead.load(Ordering::SeqCst) {
            break;
        }
        if shared.resets.load(Ordering::SeqCst) != generation {
            reset(&from);
            reset(&to);
            break;
        }
        if shared.mode() == ProxyMode::Blackhole {
            std::thread::sleep(TICK);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        // The mode when the chunk arrived (it may have changed during the read).
        if let ProxyMode::Latency(delay) = shared.mode() {
            std::thread::sleep(delay);
        }
        // The mode may have changed while this chunk was held.
        while shared.mode() == ProxyMode::Blackhole && !shared.stop.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
        }
        if shared.resets.load(Ordering::SeqCst) != generation {
            reset(&from);
            reset(&to);
            break;
        }
        if replies {
            let mut mode = shared.mode.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(
                *mode,
                ProxyMode::LoseNextReply | ProxyMode::LoseNextReplyThenHold
            ) {
                // The reply goes nowhere; the client sees its connection reset.
                *mode = if *mode == ProxyMode::LoseNextReply {
                    ProxyMode::Pass
                } else {
                    ProxyMode::Blackhole
                };
                drop(mode);
                reset(&from);
                reset(&to);
                break;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    dead.store(true, Ordering::SeqCst);
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
