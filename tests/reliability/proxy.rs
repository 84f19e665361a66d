//! A TCP proxy in the role of the network between the workers and PostgreSQL: the virtual
//! IP in front of a primary that fails over, or the replication link from a primary to its
//! standby.
//!
//! It models what the peers of a machine that dies see, not what a clean shutdown shows:
//!
//! - **The machine dies** ([`Proxy::down`], then its server is killed): from that moment
//!   nothing reaches the clients from it (not even the last words its server processes send
//!   when they see their postmaster die), and the end of a server connection is not passed
//!   on. Each client's socket stays open and silent, as a connection to a machine that
//!   vanished does. New connections are accepted and held, unanswered, as a SYN to a dead
//!   address is retransmitted until someone answers.
//! - **The address moves** ([`Proxy::move_to`]): new connections, and the ones held, go to
//!   the new server. An old connection is reset as soon as its client sends anything (the
//!   new holder of the address knows nothing of it and answers with a reset), or at once if
//!   it sent something the dead machine never answered (its retransmissions meet the new
//!   holder). A client that only waits, for a notification say, hears nothing, ever: that
//!   is a half-open connection, and only the client can find out.
//! - **A partition** ([`Proxy::freeze`]): nothing is forwarded either way, every socket stays
//!   open; the bytes in flight are never delivered.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What every connection of the proxy follows.
#[derive(Clone, Debug)]
struct Control {
    /// Where new connections go; `None`: nobody holds the address.
    backend: Option<SocketAddr>,
    /// Bumped each time the address moves: connections of older generations are cut.
    generation: u64,
    /// Nothing is forwarded, either way.
    frozen: bool,
}

/// A running proxy; dropping it closes every connection.
pub struct Proxy {
    pub port: u16,
    control: watch::Sender<Control>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free local port, forwarding to `127.0.0.1:backend_port`.
    pub async fn start(backend_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (control, _) = watch::channel(Control {
            backend: Some(local(backend_port)),
            generation: 0,
            frozen: false,
        });
        let follow = control.clone();
        let task = tokio::spawn(async move {
            // the connections' tasks (and their sockets) end with this one
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                connections.spawn(serve(client, follow.subscribe()));
                // reap the finished ones as we go
                while connections.try_join_next().is_some() {}
            }
        });
        Proxy {
            port,
            control,
            task,
        }
    }

    /// A partition: nothing is forwarded either way from now on (new connections are held),
    /// every socket stays open, and whatever was in flight is never delivered.
    pub fn freeze(&self) {
        self.control.send_modify(|c| c.frozen = true);
    }

    /// The machine behind the address dies: nothing is forwarded on the connections open
    /// now (they are not closed either), and new connections are held, unanswered, until
    /// the address moves.
    pub fn down(&self) {
        self.control.send_modify(|c| c.backend = None);
    }

    /// The address moves to `127.0.0.1:backend_port`, and the partition (if any) ends: see
    /// the module's documentation for what becomes of the connections open now.
    pub fn move_to(&self, backend_port: u16) {
        self.control.send_modify(|c| {
            c.backend = Some(local(backend_port));
            c.generation += 1;
            c.frozen = false;
        });
    }

    /// The URL of the `postgres` database for `user`, through the proxy.
    pub fn url(&self, user: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Closes `stream` with a reset (RST), as a host that knows nothing of the connection does.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Where a connection stands.
enum State {
    /// Forwarding to its server.
    Live(TcpStream),
    /// Its server is gone, or the address moved away from it: nothing is forwarded again.
    Orphaned {
        /// The client sent something since: nobody will ever answer it.
        sent: bool,
        /// The address moved since the connection was opened.
        moved: bool,
    },
}

/// Serves one client connection until it ends (see the module's documentation).
async fn serve(mut client: TcpStream, mut control: watch::Receiver<Control>) {
    // held, unanswered, until someone holds the address and the network forwards
    let (generation, address) = loop {
        let now = control.borrow_and_update().clone();
        if let (Some(address), false) = (now.backend, now.frozen) {
            break (now.generation, address);
        }
        if control.changed().await.is_err() {
            return;
        }
    };
    let mut state =
        match tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(address)).await {
            Ok(Ok(server)) => {
                let _ = server.set_nodelay(true);
                State::Live(server)
            }
            // a live host with nothing on the port refuses: so does the proxy
            _ => return reset(client),
        };
    let mut frozen = control.borrow().frozen;
    let mut from_client = vec![0u8; 64 * 1024];
    let mut from_server = vec![0u8; 64 * 1024];
    loop {
        state = match state {
            State::Live(mut server) => {
                tokio::select! {
                    changed = control.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let now = control.borrow_and_update().clone();
                        frozen = now.frozen;
                        if now.generation != generation {
                            // the address moved away from this server
                            drop(server);
                            State::Orphaned { sent: false, moved: true }
                        } else if now.backend.is_none() {
                            // the server's machine died: nothing more comes from it
                            drop(server);
                            State::Orphaned { sent: false, moved: false }
                        } else {
                            State::Live(server)
                        }
                    }
                    read = client.read(&mut from_client), if !frozen => match read {
                        Ok(0) | Err(_) => return, // the client closed: both ends go
                        Ok(n) => match server.write_all(&from_client[..n]).await {
                            Ok(()) => State::Live(server),
                            Err(_) => State::Orphaned { sent: true, moved: false },
                        },
                    },
                    read = server.read(&mut from_server), if !frozen => match read {
                        // the server's machine died: it tells the client nothing
                        Ok(0) | Err(_) => State::Orphaned { sent: false, moved: false },
                        Ok(n) => match client.write_all(&from_server[..n]).await {
                            Ok(()) => State::Live(server),
                            Err(_) => return,
                        },
                    },
                }
            }
            State::Orphaned { sent, moved } => {
                if sent && moved {
                    return reset(client);
                }
                tokio::select! {
                    changed = control.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let now = control.borrow_and_update().clone();
                        State::Orphaned { sent, moved: moved || now.generation != generation }
                    }
                    read = client.read(&mut from_client) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(_) => State::Orphaned { sent: true, moved },
                    },
                }
            }
        };
    }
}
