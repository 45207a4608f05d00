//! `FrontThread`: the listening socket and the serving thread every native front has, shared by the
//! gRPC front (`grpc_front.rs`) and the remoting front (`remoting_front.rs`).
//!
//! Both bind their port on Python's thread (so a port in use is an error of the constructor, and
//! port 0 is known at once), serve it from a thread of their own running a tokio runtime until
//! `close()` or a drop tells it to stop, then give their connections a short while to write what
//! Python gave them. Only what a front does with a connection differs; that part is the `accept`
//! closure of `accept_until_stopped`.

use std::future::Future;
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A socket listening on `host:port` (0 picks one), ready for tokio, and the port it is bound to.
pub fn listen(host: &str, port: u16) -> PyResult<(std::net::TcpListener, u16)> {
    let listener = std::net::TcpListener::bind((host, port))
        .map_err(|e| PyOSError::new_err(format!("cannot listen on {host}:{port}: {e}")))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?.port();
    Ok((listener, bound))
}

/// The runtime's error as Python's.
pub fn runtime_error(e: std::io::Error) -> PyErr {
    PyOSError::new_err(format!("tokio runtime: {e}"))
}

/// The thread a front serves on, told to stop through a oneshot: by `stop_and_join`, or by a drop
/// (the front object collected without `close()`), which does not wait for it.
pub struct FrontThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FrontThread {
    /// Runs `serve` on `runtime` in a thread named `name`; the future `serve` makes is handed the
    /// receiver that says when to stop. Once it ends the runtime is dropped, and with it every
    /// connection still open.
    pub fn spawn<S, F>(name: &str, runtime: tokio::runtime::Runtime, serve: S) -> PyResult<Self>
    where
        S: FnOnce(oneshot::Receiver<()>) -> F + Send + 'static,
        F: Future<Output = ()>,
    {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            runtime.block_on(serve(stop_rx));
        })?;
        Ok(FrontThread {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Tells the thread to stop and waits for it with the interpreter lock let go (the thread's
    /// connections may still be handing events to Python's side while they drain).
    pub fn stop_and_join(&mut self, py: Python<'_>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            py.detach(|| {
                let _ = thread.join();
            });
        }
    }
}

impl Drop for FrontThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Accepts connections on `listener` until `stop` fires, each served by the task `accept` makes
/// for it (None: the connection is not served, e.g. over a cap); finished tasks are reaped as they
/// end. Then it stops listening, calls `stopping` (the front tells its connections to wind down)
/// and gives the tasks up to `drain` to end before it returns.
pub async fn accept_until_stopped<A, C>(
    listener: std::net::TcpListener,
    stop: oneshot::Receiver<()>,
    drain: Duration,
    mut accept: A,
    stopping: impl FnOnce(),
) where
    A: FnMut(TcpStream, SocketAddr) -> Option<C>,
    C: Future<Output = ()> + Send + 'static,
{
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let mut connections = tokio::task::JoinSet::new();
    let mut stop = stop;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((socket, peer)) = accepted else { continue };
                if let Some(task) = accept(socket, peer) {
                    connections.spawn(task);
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut stop => break,
        }
    }
    drop(listener);
    stopping();
    let _ = tokio::time::timeout(drain, async { while connections.join_next().await.is_some() {} }).await;
}
