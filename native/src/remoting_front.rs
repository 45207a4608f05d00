//! `RemotingFront`: RocketMQ's remoting protocol (the 4.x TCP port) on a tokio runtime of several
//! threads, handing requests to Python in batches.
//!
//! On the asyncio server every socket read, frame split, header decode and write runs on the
//! interpreter's one thread. Here the front's threads accept connections, read them, split frames
//! (a length outside the legal range closes that connection only), decode headers with the native
//! decoder (`remoting.rs`) and write the responses; Python is handed decoded commands through a
//! `Handoff` (one wake-up, one call per batch) and hands back encoded frames, closes and read
//! pauses of one pass of its loop in one call. A frame the native decoder declines (an unusual
//! header, valid or not) is handed over whole, for the Python decoder to decode or refuse.
//!
//! Flow control, as the asyncio server does it. A connection is not read while Python asked it
//! paused (requests waiting for a handler slot or for the client to read its responses), while
//! more than `WRITE_HIGH` bytes of its responses wait for the client to read them (reading resumes
//! below `WRITE_LOW`), nor while more than `READ_AHEAD` bytes of its requests wait for Python to
//! take them: the front's threads must not read faster than Python handles, or a client sending
//! without pause would fill memory. Python counts what it writes to a connection as asyncio's
//! transport does; past its high-water mark it stops handling the connection's requests and asks
//! (`OUT_WATCH`) to hear when the connection's responses fell below `WRITE_LOW` (`EV_DRAINED`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, Notify};

use crate::front_thread::{self, FrontThread};
use crate::handoff::Handoff;
use crate::remoting;

/// Event kinds, the first field of each tuple `take()` returns.
pub const EV_CONNECTED: u8 = 0;
pub const EV_COMMAND: u8 = 1;
pub const EV_FRAME: u8 = 2;
pub const EV_CLOSED: u8 = 3;
pub const EV_DRAINED: u8 = 4;

/// What Python asks of a connection, the second field of each tuple `send()` takes.
pub const OUT_DATA: u8 = 0;
pub const OUT_CLOSE: u8 = 1;
pub const OUT_ABORT: u8 = 2;
pub const OUT_PAUSE: u8 = 3;
pub const OUT_RESUME: u8 = 4;
pub const OUT_WATCH: u8 = 5;

/// Response bytes a connection may have waiting for its client before it is no longer read, and
/// the level they must fall to for reading to resume (the asyncio server's write buffer limits).
const WRITE_HIGH: usize = 4 * 1024 * 1024;
const WRITE_LOW: usize = 1024 * 1024;
/// Request bytes of a connection read and not taken by Python yet, past which it is not read.
const READ_AHEAD: usize = 1024 * 1024;
/// Responses are gathered into one write up to this many bytes.
const COALESCE_MAX_BYTES: usize = 256 * 1024;
/// How long `close()` lets connections write what they were given.
const STOP_DRAIN: Duration = Duration::from_secs(1);

enum Event {
    Connected {
        conn: u64,
        peer: SocketAddr,
    },
    Command {
        conn: u64,
        header: remoting::Header<'static>,
        body: Bytes,
        serialize: u8,
        _read: Read,
    },
    Frame {
        conn: u64,
        frame: Bytes,
        _read: Read,
    },
    Closed {
        conn: u64,
    },
    Drained {
        conn: u64,
    },
}

/// A frame's bytes, counted against its connection's `READ_AHEAD` until Python takes it.
struct Read {
    flow: Arc<Flow>,
    bytes: usize,
}

impl Drop for Read {
    fn drop(&mut self) {
        if self.flow.queued_in.fetch_sub(self.bytes, Ordering::AcqRel) - self.bytes <= READ_AHEAD {
            self.flow.resume.notify_one();
        }
    }
}

enum Out {
    Data(Bytes),
    Close,
    Abort,
}

/// What the reader of a connection and the Python side share.
struct Flow {
    /// response bytes handed to the connection and not written yet
    pending_out: AtomicUsize,
    /// Python asked for reading to stop
    paused: AtomicBool,
    /// request bytes read and not taken by Python yet
    queued_in: AtomicUsize,
    /// Python waits to hear when `pending_out` is at most `WRITE_LOW`
    drain_wanted: AtomicBool,
    /// woken when either of the above may have let reading resume
    resume: Notify,
}

impl Flow {
    fn new() -> Arc<Self> {
        Arc::new(Flow {
            pending_out: AtomicUsize::new(0),
            paused: AtomicBool::new(false),
            queued_in: AtomicUsize::new(0),
            drain_wanted: AtomicBool::new(false),
            resume: Notify::new(),
        })
    }

    fn blocked(&self) -> bool {
        self.paused.load(Ordering::Acquire)
            || self.pending_out.load(Ordering::Acquire) > WRITE_HIGH
            || self.queued_in.load(Ordering::Acquire) > READ_AHEAD
    }

    /// Tells Python its responses fell to `WRITE_LOW`, if it waits to hear it.
    fn report_drained(&self, shared: &Shared, conn: u64) {
        if self.pending_out.load(Ordering::Acquire) <= WRITE_LOW && self.drain_wanted.swap(false, Ordering::AcqRel) {
            shared.events.push(Event::Drained { conn });
        }
    }
}

struct Connection {
    out: mpsc::UnboundedSender<Out>,
    flow: Arc<Flow>,
}

struct Shared {
    events: Handoff<Event>,
    connections: Mutex<HashMap<u64, Connection>>,
    max_frame: usize,
}

/// One of Python's requests: the connection, what to do (`OUT_*`), the frame bytes of `OUT_DATA`.
type Request = (u64, u8, Option<Bytes>);

/// Hands each item of Python's batches to its connection. It runs on the front's threads, so
/// Python's thread wakes them once per batch, however many connections the batch writes to.
async fn hand_out(shared: Arc<Shared>, mut batches: mpsc::UnboundedReceiver<Vec<Request>>) {
    while let Some(batch) = batches.recv().await {
        let connections = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
        for (conn, what, data) in batch {
            let Some(connection) = connections.get(&conn) else {
                continue;
            };
            match what {
                OUT_DATA => {
                    if let Some(data) = data {
                        connection.flow.pending_out.fetch_add(data.len(), Ordering::AcqRel);
                        let _ = connection.out.send(Out::Data(data));
                    }
                }
                OUT_CLOSE => {
                    let _ = connection.out.send(Out::Close);
                }
                OUT_ABORT => {
                    let _ = connection.out.send(Out::Abort);
                }
                OUT_PAUSE => connection.flow.paused.store(true, Ordering::Release),
                OUT_WATCH => {
                    connection.flow.drain_wanted.store(true, Ordering::Release);
                    connection.flow.report_drained(&shared, conn);
                }
                _ => {
                    connection.flow.paused.store(false, Ordering::Release);
                    connection.flow.resume.notify_one();
                }
            }
        }
    }
}

/// The event one frame (without its length prefix) makes: decoded when the native decoder takes
/// its header, else whole for Python.
fn frame_event(conn: u64, frame: Bytes, flow: &Arc<Flow>) -> Event {
    let bytes = frame.len();
    flow.queued_in.fetch_add(bytes, Ordering::AcqRel);
    let read = Read {
        flow: flow.clone(),
        bytes,
    };
    if let Some((serialize, header, body)) = remoting::split(&frame) {
        if let Some(header) = remoting::decode_header(serialize, header) {
            let body = frame.slice(frame.len() - body.len()..);
            return Event::Command {
                conn,
                header: header.into_owned(),
                body,
                serialize,
                _read: read,
            };
        }
    }
    Event::Frame {
        conn,
        frame,
        _read: read,
    }
}

/// Why a connection's reading ended.
enum ReadEnd {
    /// the client closed it, or it failed
    Gone,
    /// a frame length outside 4..max: the stream cannot be followed any further
    Malformed,
}

/// Every complete frame at the head of `buf`, as events; Err at a length outside 4..`max_frame`.
fn split_frames(
    conn: u64,
    buf: &mut BytesMut,
    max_frame: usize,
    flow: &Arc<Flow>,
    events: &mut Vec<Event>,
) -> Result<(), ()> {
    while buf.len() >= 4 {
        let length = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let Ok(length) = usize::try_from(length) else {
            return Err(());
        };
        if length < 4 || length + 4 > max_frame {
            return Err(());
        }
        if buf.len() < 4 + length {
            buf.reserve(4 + length - buf.len());
            break;
        }
        buf.advance(4);
        events.push(frame_event(conn, buf.split_to(length).freeze(), flow));
    }
    Ok(())
}

async fn read_loop(shared: &Shared, conn: u64, mut socket: OwnedReadHalf, flow: &Arc<Flow>) -> ReadEnd {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        while flow.blocked() {
            flow.resume.notified().await;
        }
        match socket.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return ReadEnd::Gone,
            Ok(_) => {}
        }
        let mut events = Vec::new();
        let split = split_frames(conn, &mut buf, shared.max_frame, flow, &mut events);
        shared.events.push_all(events);
        if split.is_err() {
            return ReadEnd::Malformed;
        }
    }
}

async fn write_loop(
    shared: &Shared,
    conn: u64,
    mut socket: OwnedWriteHalf,
    mut out: mpsc::UnboundedReceiver<Out>,
    flow: &Flow,
) {
    let mut gathered = BytesMut::new();
    while let Some(first) = out.recv().await {
        let mut next = Some(first);
        let mut end: Option<Out> = None;
        while let Some(item) = next.take() {
            match item {
                Out::Data(data) => {
                    gathered.extend_from_slice(&data);
                    if gathered.len() < COALESCE_MAX_BYTES {
                        next = out.try_recv().ok();
                    }
                }
                other => end = Some(other),
            }
        }
        if !gathered.is_empty() {
            let written = gathered.len();
            let failed = socket.write_all(&gathered).await.is_err();
            gathered.clear();
            if flow.pending_out.fetch_sub(written, Ordering::AcqRel) - written <= WRITE_LOW {
                flow.resume.notify_one();
                flow.report_drained(shared, conn);
            }
            if failed {
                return;
            }
        }
        match end {
            Some(Out::Close) => {
                let _ = socket.shutdown().await;
                return;
            }
            Some(Out::Abort) => return,
            _ => {}
        }
    }
}

/// One connection: read and written until the client goes, a frame is malformed, Python closes
/// it or the front stops; Python then hears of its end.
async fn serve_connection(
    shared: Arc<Shared>,
    conn: u64,
    socket: tokio::net::TcpStream,
    out: mpsc::UnboundedReceiver<Out>,
    flow: Arc<Flow>,
) {
    let _ = socket.set_nodelay(true);
    let (reader, writer) = socket.into_split();
    tokio::select! {
        _ = read_loop(&shared, conn, reader, &flow) => {}
        () = write_loop(&shared, conn, writer, out, &flow) => {}
    }
    shared
        .connections
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&conn);
    shared.events.push(Event::Closed { conn });
}

/// A remoting server on threads of its own; Python takes its requests and gives its responses.
#[pyclass(module = "rocketstore.common._native")]
pub struct RemotingFront {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedSender<Vec<Request>>,
    port: u16,
    thread: FrontThread,
}

#[pymethods]
impl RemotingFront {
    /// Listens on `host:port` (0 picks one: see `port`) with `threads` threads; a frame longer
    /// than `max_frame_bytes` (length prefix included) closes its connection.
    #[new]
    #[pyo3(signature = (host, port, *, threads, max_frame_bytes))]
    fn new(host: &str, port: u16, threads: usize, max_frame_bytes: usize) -> PyResult<Self> {
        if threads == 0 {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let (listener, bound) = front_thread::listen(host, port)?;
        let shared = Arc::new(Shared {
            events: Handoff::new()?,
            connections: Mutex::new(HashMap::new()),
            max_frame: max_frame_bytes,
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("remoting-front")
            .enable_all()
            .build()
            .map_err(front_thread::runtime_error)?;
        let (requests_tx, requests_rx) = mpsc::unbounded_channel::<Vec<Request>>();
        let serving = shared.clone();
        let thread = FrontThread::spawn("remoting-accept", runtime, move |stop| async move {
            tokio::spawn(hand_out(serving.clone(), requests_rx));
            let mut next_conn = 0u64;
            let accept = |socket: tokio::net::TcpStream, peer: SocketAddr| {
                next_conn += 1;
                let conn = next_conn;
                let (out_tx, out_rx) = mpsc::unbounded_channel();
                let flow = Flow::new();
                // registered before Python hears of it, so its first answers find it
                serving.connections.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    conn,
                    Connection {
                        out: out_tx,
                        flow: flow.clone(),
                    },
                );
                serving.events.push(Event::Connected { conn, peer });
                Some(serve_connection(serving.clone(), conn, socket, out_rx, flow))
            };
            // dropping the senders ends each connection once it wrote what it was given
            let stopping = || serving.connections.lock().unwrap_or_else(|e| e.into_inner()).clear();
            front_thread::accept_until_stopped(listener, stop, STOP_DRAIN, accept, stopping).await;
        })?;
        Ok(RemotingFront {
            shared,
            requests: requests_tx,
            port: bound,
            thread,
        })
    }

    /// The bound port.
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// The descriptor to watch for readability (`loop.add_reader`): readable when events wait.
    fn fileno(&self) -> i32 {
        self.shared.events.fileno()
    }

    /// Every waiting event, in the order each connection produced them: `(0, conn, host, port)`
    /// a new connection, `(1, conn, fields)` a command, `fields` as `decode_frame` returns them,
    /// `(2, conn, frame)` a frame (without its length prefix) the native decoder declined,
    /// `(3, conn)` a connection that ended (closed by either side, or a malformed frame length),
    /// `(4, conn)` a connection whose responses fell to the low-water mark after a watch request.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.shared.events.take_list(py, |event| {
            Ok(match event {
                Event::Connected { conn, peer } => (EV_CONNECTED, conn, peer.ip().to_string(), peer.port())
                    .into_pyobject(py)?
                    .into_any(),
                Event::Command {
                    conn,
                    header,
                    body,
                    serialize,
                    ..
                } => {
                    let fields = crate::header_fields(py, &header, &body, serialize)?;
                    (EV_COMMAND, conn, fields).into_pyobject(py)?.into_any()
                }
                Event::Frame { conn, frame, .. } => {
                    (EV_FRAME, conn, PyBytes::new(py, &frame)).into_pyobject(py)?.into_any()
                }
                Event::Closed { conn } => (EV_CLOSED, conn).into_pyobject(py)?.into_any(),
                Event::Drained { conn } => (EV_DRAINED, conn).into_pyobject(py)?.into_any(),
            })
        })
    }

    /// Python's requests of one pass of its loop, in order, each `(conn, what, data)`: `what` 0
    /// writes the frames `data` (one or more whole frames), 1 closes the connection once what it
    /// was given is written, 2 closes it at once, 3 stops reading it, 4 reads it again, 5 asks
    /// for event 4 once what it was given and has not written is at most 1 MiB. Handed to
    /// the front's threads as one batch; requests for connections that ended are dropped.
    fn send(&self, py: Python<'_>, requests: Vec<(u64, u8, Option<PyBackedBytes>)>) -> PyResult<()> {
        if let Some((_, what, _)) = requests.iter().find(|r| r.1 > OUT_WATCH) {
            return Err(PyValueError::new_err(format!("not a remoting front request: {what}")));
        }
        let batch: Vec<Request> = requests
            .into_iter()
            .map(|(conn, what, data)| (conn, what, data.map(Bytes::from_owner)))
            .collect();
        // Waking the front's threads may be a system call and a context switch (measured: a
        // quarter of the interpreter's time per send with the lock held), so the lock is let go.
        // It fails only once the front's threads have ended (after close): nobody is left to write to.
        py.detach(|| {
            let _ = self.requests.send(batch);
        });
        Ok(())
    }

    /// Stops listening, lets every connection write what it was given (up to `STOP_DRAIN`), then
    /// drops them.
    fn close(&mut self, py: Python<'_>) {
        self.thread.stop_and_join(py);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn splits_whole_frames_and_keeps_the_tail() {
        let header = br#"{"code":10,"opaque":7}"#;
        let mut payload = (header.len() as i32).to_be_bytes().to_vec();
        payload.extend_from_slice(header);
        payload.extend_from_slice(b"body");
        let whole = frame(&payload);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&whole);
        buf.extend_from_slice(&whole[..5]);
        let mut events = Vec::new();
        let flow = Flow::new();
        assert!(split_frames(1, &mut buf, 1 << 20, &flow, &mut events).is_ok());
        assert_eq!(events.len(), 1);
        assert_eq!(flow.queued_in.load(Ordering::Acquire), payload.len());
        assert_eq!(buf.len(), 5);
        let Event::Command { header, body, .. } = &events[0] else {
            panic!("not decoded")
        };
        assert_eq!((header.code, header.opaque), (10, 7));
        assert_eq!(&body[..], b"body");
        drop(events);
        assert_eq!(
            flow.queued_in.load(Ordering::Acquire),
            0,
            "taken frames no longer count"
        );
    }

    #[test]
    fn refuses_lengths_outside_the_range() {
        for length in [-1i32, 0, 3, 1 << 20] {
            let mut buf = BytesMut::from(&length.to_be_bytes()[..]);
            assert!(
                split_frames(1, &mut buf, 1 << 20, &Flow::new(), &mut Vec::new()).is_err(),
                "{length}"
            );
        }
    }

    #[test]
    fn hands_undecodable_headers_over_whole() {
        let mut buf = BytesMut::from(&frame(&[0, 0, 0, 2, b'{', b'x'])[..]);
        let mut events = Vec::new();
        assert!(split_frames(1, &mut buf, 1 << 20, &Flow::new(), &mut events).is_ok());
        assert!(matches!(&events[0], Event::Frame { frame, .. } if frame.len() == 6));
    }
}
