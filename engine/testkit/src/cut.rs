//! A TCP proxy in the test tree that a test cuts to simulate a broker outage:
//! a broker advertises itself at the proxy's port, so every connection a client
//! makes (bootstrap and after Metadata) goes through it. Cutting drops every open
//! connection and closes new ones at once; restoring forwards again.
//!
//! What it does NOT do: delay or corrupt bytes (only all-or-nothing outages).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A cuttable TCP proxy on 127.0.0.1.
pub struct Proxy {
    /// The port it listens on.
    pub port: u16,
    target: Arc<Mutex<Option<u16>>>,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens now (so its port is known before the broker starts, which must
    /// advertise it); closes connections at once until [`Proxy::forward_to`].
    pub async fn listen() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let target: Arc<Mutex<Option<u16>>> = Arc::default();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (target, cut, conns) = (target.clone(), cut.clone(), conns.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        continue;
                    };
                    // The check of `cut` and the push happen under the list's
                    // lock, which `cut` takes after setting the flag: a
                    // connection accepted as the cut begins is either refused
                    // here or in the list the cut drains, never missed.
                    let mut list = conns.lock().expect("conns");
                    let to = *target.lock().expect("target");
                    let Some(to) = to.filter(|_| !cut.load(Ordering::SeqCst)) else {
                        drop(list);
                        drop(client); // cut (or no broker yet): close at once
                        continue;
                    };
                    let task = tokio::spawn(async move {
                        if let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", to)).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        }
                    });
                    list.retain(|t| !t.is_finished());
                    list.push(task);
                }
            })
        };
        Self {
            port,
            target,
            cut,
            conns,
            accept,
        }
    }

    /// Forwards new connections to `127.0.0.1:<port>`.
    pub fn forward_to(&self, port: u16) {
        *self.target.lock().expect("target") = Some(port);
    }

    /// Drops every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for t in self.conns.lock().expect("conns").drain(..) {
            t.abort();
        }
    }

    /// Forwards again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
