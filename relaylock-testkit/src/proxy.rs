//! A loopback TCP proxy between one client and redis-server that can delay,
//! drop and blackhole its connections, to inject network faults into one
//! client only.
//!
//! Every connection accepted is forwarded to the target port in both
//! directions, chunk by chunk, under the proxy's current [`Mode`]. A
//! connection whose client sent `SUBSCRIBE` is tagged as a subscriber
//! connection, so a fault can target only those ([`Proxy::set_subscriber_mode`]).
//! Stopped (all its connections closed) on drop.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with the bytes of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Forward each chunk after this delay (order kept).
    Delay(Duration),
    /// Keep the connection open but forward nothing, either way: the peer
    /// sees a silent network, not a closed socket.
    Blackhole,
}

struct Shared {
    /// Where new connections go.
    target: AtomicU16,
    /// The armed one-shot cut, see [`Proxy::cut_after_reply_to`].
    cut: Mutex<Option<Cut>>,
    /// Cuts done.
    cuts: AtomicU64,
    mode: Mutex<Mode>,
    subscriber_mode: Mutex<Option<Mode>>,
    /// Bumped to close every open connection.
    generation: watch::Sender<u64>,
    accepted: AtomicU64,
}

/// A cut armed on one connection: where new connections go after it
/// (`None`: where they went), and whether the reply is forwarded first.
type Armed = (Option<u16>, bool);

/// A one-shot fault, see [`Proxy::cut_after_reply_to`] and
/// [`Proxy::cut_instead_of_reply_to`].
struct Cut {
    pattern: Vec<u8>,
    /// Where new connections go after the cut (`None`: where they went).
    then_target: Option<u16>,
    /// Whether the reply is forwarded before the cut.
    reply: bool,
}

pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listen on a free loopback port and forward to `127.0.0.1:target`.
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let (generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            target: AtomicU16::new(target),
            cut: Mutex::new(None),
            cuts: AtomicU64::new(0),
            mode: Mutex::new(Mode::Pass),
            subscriber_mode: Mutex::new(None),
            generation,
            accepted: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                s.accepted.fetch_add(1, Ordering::SeqCst);
                let s = Arc::clone(&s);
                tokio::spawn(async move {
                    let target = s.target.load(Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let mut closed = s.generation.subscribe();
                    closed.mark_unchanged();
                    let subscriber = Arc::new(AtomicBool::new(false));
                    let armed = Arc::new(Mutex::new(None));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(
                        cr,
                        sw,
                        Arc::clone(&s),
                        Arc::clone(&subscriber),
                        Arc::clone(&armed),
                        true,
                    );
                    let down = pump(sr, cw, Arc::clone(&s), subscriber, armed, false);
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                        _ = closed.changed() => {}
                    }
                });
            }
        });
        Proxy { port, shared, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The mode of every connection (also those opened later).
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// A mode for subscriber connections only (`None`: as all others).
    pub fn set_subscriber_mode(&self, mode: Option<Mode>) {
        *self.shared.subscriber_mode.lock().unwrap() = mode;
    }

    /// Close every open connection at once (both sides see a reset).
    pub fn drop_connections(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// A one-shot fault, as a failover looks to one connection: the first
    /// connection whose client sends bytes containing `pattern` is closed
    /// right after the proxy forwarded the server's next chunk to it (the
    /// reply), and from then on new connections go to `then_target`.
    pub fn cut_after_reply_to(&self, pattern: &[u8], then_target: u16) {
        *self.shared.cut.lock().unwrap() = Some(Cut {
            pattern: pattern.to_vec(),
            then_target: Some(then_target),
            reply: true,
        });
    }

    /// A one-shot fault, as a reply lost with its connection looks: the
    /// first connection whose client sends bytes containing `pattern` is
    /// closed when the server's next chunk (the reply) comes back, and that
    /// chunk is dropped. The server ran the command; the client sees its
    /// connection close with the command unanswered. New connections go
    /// where they went before.
    pub fn cut_instead_of_reply_to(&self, pattern: &[u8]) {
        *self.shared.cut.lock().unwrap() = Some(Cut {
            pattern: pattern.to_vec(),
            then_target: None,
            reply: false,
        });
    }

    /// Cuts done by [`cut_after_reply_to`](Self::cut_after_reply_to) and
    /// [`cut_instead_of_reply_to`](Self::cut_instead_of_reply_to).
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.drop_connections();
    }
}

fn mode_of(s: &Shared, subscriber: bool) -> Mode {
    if subscriber {
        if let Some(m) = *s.subscriber_mode.lock().unwrap() {
            return m;
        }
    }
    *s.mode.lock().unwrap()
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    s: Arc<Shared>,
    subscriber: Arc<AtomicBool>,
    armed: Arc<Mutex<Option<Armed>>>,
    client_side: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if client_side
            && chunk
                .windows(9)
                .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
        {
            subscriber.store(true, Ordering::SeqCst);
        }
        if client_side {
            let mut cut = s.cut.lock().unwrap();
            let hit = cut
                .as_ref()
                .is_some_and(|c| chunk.windows(c.pattern.len()).any(|w| w == &c.pattern[..]));
            if hit {
                *armed.lock().unwrap() = cut.take().map(|c| (c.then_target, c.reply));
            }
        }
        match mode_of(&s, subscriber.load(Ordering::SeqCst)) {
            Mode::Pass => {}
            Mode::Delay(d) => tokio::time::sleep(d).await,
            Mode::Blackhole => continue,
        }
        let cut = if client_side {
            None
        } else {
            armed.lock().unwrap().take()
        };
        if cut.is_none_or(|(_, reply)| reply) && to.write_all(chunk).await.is_err() {
            return;
        }
        if let Some((then_target, _)) = cut {
            // The reply went out or was dropped: redirect new connections
            // (if asked), then close this one (returning ends both
            // directions).
            if let Some(port) = then_target {
                s.target.store(port, Ordering::SeqCst);
            }
            s.cuts.fetch_add(1, Ordering::SeqCst);
            return;
        }
    }
}
