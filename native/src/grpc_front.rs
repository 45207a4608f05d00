//! `GrpcFront`: an HTTP/2 + gRPC front end on a tokio runtime of its own thread, handing calls to
//! Python in batches.
//!
//! grpcio hands every call between its own threads and the event loop (~300 µs of CPU and ~17
//! context switches a call). Here one thread speaks HTTP/2 (`h2`) and gRPC framing; it never
//! touches Python. Events (a call, a message of a client stream, a half-close, a cancel) go into
//! a queue behind a mutex; a byte written to a socket pair, only when the queue turns non-empty,
//! wakes Python's loop, which takes the whole batch in one call (`handoff.rs`, shared with the
//! remoting front). Python hands back the answers of one pass of its loop in one call too; they go
//! to each call's task through a channel.
//! Protobuf is not decoded here: Python keeps the logic.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use tokio::sync::{mpsc, watch, Notify};

use crate::front_thread::{self, FrontThread};
use crate::handoff::Handoff;

/// Event kinds, the first field of each tuple `take()` returns.
pub const EV_CALL: u8 = 0;
pub const EV_MESSAGE: u8 = 1;
pub const EV_HALF_CLOSE: u8 = 2;
pub const EV_CANCEL: u8 = 3;

/// How long `close()` lets connections write what they were given after their GOAWAY.
const STOP_DRAIN: Duration = Duration::from_secs(1);
/// How long an idle connection sent its GOAWAY has to answer h2's closing PING before it is
/// dropped (a client that never reads would otherwise keep it).
const IDLE_GOAWAY_GRACE: Duration = Duration::from_secs(5);

/// HTTP/2 limits every connection gets (the configurable ones come from Python: see `Limits`).
///
/// Header list: what a client may make us decode and hold for one request's headers (h2 also caps
/// the CONTINUATION frames buffered for a header block with it). grpc-java's servers take 8 KiB of
/// metadata; twice that leaves room for long signatures and tracing headers.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// Largest frame a client may send: HTTP/2's default, which is also grpc-java's. Each connection's
/// read buffer holds up to one frame, so this multiplies by the connection cap.
const MAX_FRAME_BYTES: u32 = 16 * 1024;
/// Receive windows: what a client may send before we read it (per stream, per connection).
const STREAM_WINDOW_BYTES: u32 = 1 << 20;
const CONNECTION_WINDOW_BYTES: u32 = 1 << 24;
/// Response bytes h2 buffers per stream for a client that does not read (a slow reader): past this
/// a call's responses wait (in its channel) for the client to open its window.
const MAX_SEND_BUFFER_BYTES: usize = 1 << 20;
/// Streams a client reset before we accepted them (RST flood against the accept queue: h2's
/// CVE-2023-44487 defence), and resets h2 had to send for a client's protocol errors, per connection.
const MAX_PENDING_ACCEPT_RESETS: usize = 20;
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
/// Calls a client may reset (RST_STREAM) after we took them: a burst of `RESET_BURST`, refilled at
/// `RESET_REFILL_PER_S`; past that the connection is closed with GOAWAY(ENHANCE_YOUR_CALM). Each
/// such call costs a task and, for a streaming one, a round trip to Python, so a client opening
/// and resetting calls in a loop (rapid reset) could keep both threads busy without ever holding a
/// stream open long enough to meet `max_concurrent_streams`.
const RESET_BURST: f64 = 1000.0;
const RESET_REFILL_PER_S: f64 = 200.0;

/// gRPC status codes this module sets itself.
const CANCELLED: u32 = 1;
const DEADLINE_EXCEEDED: u32 = 4;
const RESOURCE_EXHAUSTED: u32 = 8;
const UNIMPLEMENTED: u32 = 12;
const INTERNAL: u32 = 13;

enum Event {
    Call {
        id: u64,
        path: String,
        metadata: Vec<(String, MetaValue)>,
        peer: String,
        timeout: Option<f64>,
        message: Option<Bytes>,
    },
    Message {
        id: u64,
        message: Bytes,
    },
    HalfClose {
        id: u64,
    },
    Cancel {
        id: u64,
    },
}

enum MetaValue {
    Text(String),
    Binary(Vec<u8>),
}

/// What Python sends a call.
enum Out {
    Message(Bytes),
    Finish(u32, String),
}

/// One of Python's answers: the call, a message to send on it, the status that ends it.
type Answer = (u64, Option<Bytes>, Option<(u32, String)>);

/// Hands each answer of Python's batches to its call's task. It runs on the front's thread, so
/// Python's thread wakes that thread once per batch, however many calls the batch answers.
async fn hand_out(shared: Arc<Shared>, mut batches: mpsc::UnboundedReceiver<Vec<Answer>>) {
    while let Some(batch) = batches.recv().await {
        let calls = shared.calls.lock().unwrap_or_else(|e| e.into_inner());
        for (id, message, finish) in batch {
            let Some(tx) = calls.get(&id) else { continue };
            if let Some(message) = message {
                let _ = tx.send(Out::Message(message));
            }
            if let Some((status, details)) = finish {
                let _ = tx.send(Out::Finish(status, details));
            }
        }
    }
}

/// The limits Python configures (broker.conf keys: see grpc_v2/server.py).
#[derive(Clone, Copy)]
struct Limits {
    max_message: usize,
    /// request bytes one connection may have in messages not complete yet, all streams together
    max_request_bytes: usize,
    /// response bytes one connection's calls may have waiting for their clients' windows
    max_response_bytes: usize,
    max_concurrent_streams: u32,
    max_connections: usize,
    /// a connection with no call open this long is sent a GOAWAY; None: never
    idle_timeout: Option<Duration>,
}

/// Running totals and gauges read by `GrpcFront::stats`.
#[derive(Default)]
struct Counters {
    open_connections: AtomicUsize,
    refused_connections: AtomicU64,
    idle_closed: AtomicU64,
    reset_flood_closed: AtomicU64,
    request_budget_refused: AtomicU64,
    slow_reader_reset: AtomicU64,
}

struct Shared {
    events: Handoff<Event>,
    calls: Mutex<HashMap<u64, mpsc::UnboundedSender<Out>>>,
    limits: Limits,
    counters: Counters,
    client_streaming: Vec<String>,
}

impl Shared {
    fn push(&self, event: Event) {
        self.events.push(event);
    }
}

/// What one connection's calls spend together: request bytes buffered in unfinished messages, and
/// the client's resets of calls in progress.
struct ConnectionBudget {
    request_bytes: AtomicUsize,
    /// response bytes its calls were given and h2 has not taken yet (the clients' windows are shut)
    response_bytes: AtomicUsize,
    resets: Mutex<ResetBucket>,
    /// woken when the client spent its resets: the connection closes
    flood: Notify,
}

struct ResetBucket {
    tokens: f64,
    at: Instant,
}

impl ConnectionBudget {
    fn new() -> Self {
        ConnectionBudget {
            request_bytes: AtomicUsize::new(0),
            response_bytes: AtomicUsize::new(0),
            resets: Mutex::new(ResetBucket {
                tokens: RESET_BURST,
                at: Instant::now(),
            }),
            flood: Notify::new(),
        }
    }

    /// Counts a call the client reset; wakes the connection once the bucket is empty.
    fn reset_by_client(&self) {
        let mut bucket = self.resets.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(bucket.at).as_secs_f64() * RESET_REFILL_PER_S;
        bucket.tokens = (bucket.tokens + refill).min(RESET_BURST) - 1.0;
        bucket.at = now;
        if bucket.tokens < 0.0 {
            self.flood.notify_one();
        }
    }
}

/// Why a call ended on this side before Python finished it.
struct Failure(u32, String);

/// Parses complete gRPC messages out of `buf`; Err for a compressed or oversized one.
fn next_message(buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, Failure> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let compressed = buf[0];
    let length = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if compressed > 1 {
        return Err(Failure(
            INTERNAL,
            format!("invalid gRPC frame: compressed flag {compressed}"),
        ));
    }
    if compressed == 1 {
        return Err(Failure(
            UNIMPLEMENTED,
            "compressed messages are not supported (no grpc-encoding)".into(),
        ));
    }
    if length > max {
        return Err(Failure(
            RESOURCE_EXHAUSTED,
            format!("Received message larger than max ({length} vs. {max})"),
        ));
    }
    if buf.len() < 5 + length {
        buf.reserve(5 + length - buf.len());
        return Ok(None);
    }
    buf.advance(5);
    Ok(Some(buf.split_to(length).freeze()))
}

/// `grpc-timeout`: up to 8 digits and a unit (H M S m u n).
fn parse_timeout(value: &str) -> Option<f64> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let amount: f64 = digits.parse::<u64>().ok()? as f64;
    let scale = match unit {
        "H" => 3600.0,
        "M" => 60.0,
        "S" => 1.0,
        "m" => 1e-3,
        "u" => 1e-6,
        "n" => 1e-9,
        _ => return None,
    };
    Some(amount * scale)
}

fn metadata_of(headers: &HeaderMap) -> Vec<(String, MetaValue)> {
    let mut out = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let key = name.as_str();
        if matches!(
            key,
            "content-type" | "te" | "grpc-timeout" | "grpc-encoding" | "grpc-accept-encoding"
        ) {
            continue;
        }
        if key.ends_with("-bin") {
            let text = value.as_bytes();
            let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(
                    text.strip_suffix(b"==")
                        .or_else(|| text.strip_suffix(b"="))
                        .unwrap_or(text),
                )
                .unwrap_or_else(|_| text.to_vec());
            out.push((key.to_string(), MetaValue::Binary(decoded)));
        } else {
            out.push((
                key.to_string(),
                MetaValue::Text(String::from_utf8_lossy(value.as_bytes()).into_owned()),
            ));
        }
    }
    out
}

fn peer_name(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("ipv4:{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("ipv6:[{}]:{}", a.ip(), a.port()),
    }
}

fn grpc_headers() -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    response
}

fn trailers(status: u32, message: &str) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert("grpc-status", HeaderValue::from(status));
    if !message.is_empty() {
        // grpc-message is percent-encoded (the spec's set: outside 0x20-0x7E, and '%')
        let mut encoded = String::with_capacity(message.len());
        for byte in message.bytes() {
            if (0x20..=0x7e).contains(&byte) && byte != b'%' {
                encoded.push(byte as char);
            } else {
                encoded.push_str(&format!("%{byte:02X}"));
            }
        }
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            map.insert("grpc-message", value);
        }
    }
    map
}

/// The response side of one call: headers once, then messages, then trailers.
///
/// Messages are handed to h2 only as the client's flow-control windows make room for them (at most
/// `MAX_SEND_BUFFER_BYTES` buffered in h2 per stream); the rest wait in `pending`, counted in the
/// connection's response budget (`Limits::max_response_bytes`). h2 would otherwise buffer whatever
/// it is given: a client that opens streaming calls and never reads them (a slow reader of
/// ReceiveMessage or PullMessage, each up to a batch of the largest messages) could make the
/// broker hold that much per stream.
struct Responder {
    respond: SendResponse<Bytes>,
    stream: Option<SendStream<Bytes>>,
    pending: std::collections::VecDeque<Bytes>,
    pending_bytes: usize,
    budget: Arc<ConnectionBudget>,
    /// the status Python ended the call with, sent once `pending` is written
    finishing: Option<(u32, String)>,
    /// part of `pending`'s first message is written already
    partial: bool,
}

/// What happened to a call's stream while it waited.
enum StreamEvent {
    Reset,
    Room,
}

impl Responder {
    /// Queues a message; Err when the stream is gone. Returns the connection's response bytes
    /// waiting for their clients' windows, this one included.
    fn message(&mut self, body: Bytes) -> Result<usize, h2::Error> {
        if self.stream.is_none() {
            self.stream = Some(self.respond.send_response(grpc_headers(), false)?);
        }
        let mut frame = BytesMut::with_capacity(5 + body.len());
        frame.extend_from_slice(&[0]);
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        let len = frame.len();
        self.pending.push_back(frame.freeze());
        self.pending_bytes += len;
        let waiting = self.budget.response_bytes.fetch_add(len, Ordering::Relaxed) + len;
        self.write_ready()?;
        Ok(waiting)
    }

    /// Hands h2 as much of `pending` as the stream has room for.
    fn write_ready(&mut self) -> Result<(), h2::Error> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        while !self.pending.is_empty() {
            stream.reserve_capacity(self.pending_bytes);
            let room = stream.capacity();
            if room == 0 {
                break;
            }
            let front = self.pending.front_mut().expect("not empty");
            self.partial = front.len() > room;
            let chunk = if self.partial {
                front.split_to(room)
            } else {
                self.pending.pop_front().expect("not empty")
            };
            self.pending_bytes -= chunk.len();
            self.budget.response_bytes.fetch_sub(chunk.len(), Ordering::Relaxed);
            stream.send_data(chunk, false)?;
        }
        Ok(())
    }

    /// Ends the call with `status` once what is pending is written (at once when nothing is);
    /// true when the call is over.
    fn finish_when_written(&mut self, status: u32, message: String) -> bool {
        if self.pending.is_empty() {
            self.finish(status, &message);
            return true;
        }
        self.finishing = Some((status, message));
        false
    }

    /// Ends the call with `status` now: messages still pending are dropped (the client did not
    /// make room for them), and if one was cut the stream is reset, as trailers after part of a
    /// message would not parse.
    fn finish(&mut self, status: u32, message: &str) {
        self.drop_pending();
        if self.partial {
            self.reset(h2::Reason::CANCEL);
            return;
        }
        match self.stream.as_mut() {
            Some(stream) => {
                let _ = stream.send_trailers(trailers(status, message));
            }
            None => {
                // trailers-only: one HEADERS frame carrying the status
                let mut response = grpc_headers();
                response.headers_mut().extend(trailers(status, message));
                let _ = self.respond.send_response(response, true);
            }
        }
    }

    fn reset(&mut self, reason: h2::Reason) {
        match self.stream.as_mut() {
            Some(stream) => stream.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }

    /// Forgets the messages not handed to h2, giving their bytes back to the connection's budget.
    fn drop_pending(&mut self) {
        self.budget
            .response_bytes
            .fetch_sub(self.pending_bytes, Ordering::Relaxed);
        self.pending.clear();
        self.pending_bytes = 0;
    }

    /// The client reset the stream, or (with messages pending) its window opened.
    async fn event(&mut self) -> StreamEvent {
        let waiting = !self.pending.is_empty();
        std::future::poll_fn(|cx| match self.stream.as_mut() {
            Some(stream) => {
                if stream.poll_reset(cx).is_ready() {
                    return std::task::Poll::Ready(StreamEvent::Reset);
                }
                match waiting.then(|| stream.poll_capacity(cx)) {
                    Some(std::task::Poll::Ready(Some(Ok(_)))) => std::task::Poll::Ready(StreamEvent::Room),
                    Some(std::task::Poll::Ready(_)) => std::task::Poll::Ready(StreamEvent::Reset),
                    _ => std::task::Poll::Pending,
                }
            }
            None => self.respond.poll_reset(cx).map(|_| StreamEvent::Reset),
        })
        .await
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.drop_pending();
    }
}

/// Reads gRPC messages off a request body, releasing flow-control capacity as data arrives.
///
/// Released bytes sit in `buf` until their message is complete; the connection's budget
/// (`Limits::max_request_bytes`) bounds them over all its streams, as the windows no longer do.
/// A chunk past the budget fails its call RESOURCE_EXHAUSTED rather than waiting: waiting streams
/// would hold the budget that the others need to finish.
struct Reader {
    body: RecvStream,
    buf: BytesMut,
    shared: Arc<Shared>,
    budget: Arc<ConnectionBudget>,
    /// bytes of `buf` counted in the budget
    held: usize,
}

impl Reader {
    /// The next message, None at the end of the stream.
    async fn next(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            if let Some(message) = next_message(&mut self.buf, self.shared.limits.max_message)? {
                self.give_back(self.held - self.buf.len());
                return Ok(Some(message));
            }
            match self.body.data().await {
                Some(Ok(chunk)) => {
                    let spent = self.budget.request_bytes.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
                    self.held += chunk.len();
                    let most = self.shared.limits.max_request_bytes;
                    if spent > most {
                        self.shared
                            .counters
                            .request_budget_refused
                            .fetch_add(1, Ordering::Relaxed);
                        return Err(Failure(
                            RESOURCE_EXHAUSTED,
                            format!("this connection's unfinished request messages passed {most} bytes"),
                        ));
                    }
                    let _ = self.body.flow_control().release_capacity(chunk.len());
                    self.buf.extend_from_slice(&chunk);
                }
                Some(Err(err)) => {
                    if err.is_reset() && err.is_remote() {
                        self.budget.reset_by_client();
                    }
                    return Err(Failure(CANCELLED, format!("request stream failed: {err}")));
                }
                None => {
                    if self.buf.is_empty() {
                        return Ok(None);
                    }
                    return Err(Failure(INTERNAL, "the request ended inside a gRPC message".into()));
                }
            }
        }
    }

    fn give_back(&mut self, bytes: usize) {
        self.held -= bytes;
        self.budget.request_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.give_back(self.held);
    }
}

async fn serve_call(
    shared: Arc<Shared>,
    id: u64,
    peer: String,
    request: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    budget: Arc<ConnectionBudget>,
    mut closed: watch::Receiver<bool>,
) {
    let (parts, body) = request.into_parts();
    let mut responder = Responder {
        respond,
        stream: None,
        pending: std::collections::VecDeque::new(),
        pending_bytes: 0,
        budget: budget.clone(),
        finishing: None,
        partial: false,
    };
    let grpc = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !grpc || parts.method != http::Method::POST {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        let _ = responder.respond.send_response(response, true);
        return;
    }
    let path = parts.uri.path().to_string();
    let timeout = parts
        .headers
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_timeout);
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.min(1e9)));
    let metadata = metadata_of(&parts.headers);
    let streaming = shared.client_streaming.iter().any(|p| p == &path);
    let mut reader = Reader {
        body,
        buf: BytesMut::new(),
        shared: shared.clone(),
        budget: budget.clone(),
        held: 0,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(
        deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365)),
    ));
    tokio::pin!(sleep);

    // a unary or server-streaming request is read whole before Python hears of the call
    let message = if streaming {
        None
    } else {
        let read = async {
            let first = reader.next().await?;
            let Some(first) = first else {
                return Err(Failure(INTERNAL, "the request carried no message".into()));
            };
            if reader.next().await?.is_some() {
                return Err(Failure(
                    INTERNAL,
                    "more than one request message for a unary request".into(),
                ));
            }
            Ok(first)
        };
        tokio::select! {
            read = read => match read {
                Ok(message) => Some(message),
                Err(Failure(code, text)) => {
                    responder.finish(code, &text);
                    return;
                }
            },
            () = &mut sleep => {
                responder.finish(DEADLINE_EXCEEDED, "Deadline Exceeded");
                return;
            }
            _ = closed.changed() => return,
        }
    };
    shared.calls.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
    shared.push(Event::Call {
        id,
        path,
        metadata,
        peer,
        timeout,
        message,
    });

    let mut reading = streaming;
    let ended = loop {
        tokio::select! {
            out = rx.recv(), if responder.finishing.is_none() => match out {
                Some(Out::Message(body)) => match responder.message(body) {
                    Err(_) => break Some(CANCELLED),
                    Ok(waiting) if waiting > shared.limits.max_response_bytes => {
                        // the connection's clients do not read what they asked for
                        shared.counters.slow_reader_reset.fetch_add(1, Ordering::Relaxed);
                        responder.reset(h2::Reason::ENHANCE_YOUR_CALM);
                        break Some(RESOURCE_EXHAUSTED);
                    }
                    Ok(_) => {}
                },
                Some(Out::Finish(status, text)) => {
                    if responder.finish_when_written(status, text) {
                        break None;
                    }
                }
                None => break Some(CANCELLED),
            },
            read = reader.next(), if reading => match read {
                Ok(Some(message)) => shared.push(Event::Message { id, message }),
                Ok(None) => {
                    reading = false;
                    shared.push(Event::HalfClose { id });
                }
                Err(Failure(code, text)) => {
                    responder.finish(code, &text);
                    break Some(code);
                }
            },
            event = responder.event() => match event {
                StreamEvent::Reset => {
                    budget.reset_by_client();
                    break Some(CANCELLED);
                }
                StreamEvent::Room => {
                    if responder.write_ready().is_err() {
                        break Some(CANCELLED);
                    }
                    if responder.pending.is_empty() {
                        if let Some((status, text)) = responder.finishing.take() {
                            responder.finish(status, &text);
                            break None;
                        }
                    }
                }
            },
            () = &mut sleep => {
                responder.finish(DEADLINE_EXCEEDED, "Deadline Exceeded");
                break Some(DEADLINE_EXCEEDED);
            }
            _ = closed.changed() => break Some(CANCELLED),
        }
    };
    shared.calls.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    if ended.is_some() {
        shared.push(Event::Cancel { id });
    }
}

async fn serve_connection(
    shared: Arc<Shared>,
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
    next_id: Arc<Mutex<u64>>,
    mut stopping: watch::Receiver<bool>,
    _open: OpenConnection,
) {
    let _ = socket.set_nodelay(true);
    let limits = shared.limits;
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .max_send_buffer_size(MAX_SEND_BUFFER_BYTES);
    // a client that connects and never sends its preface is idle too
    let handshake = builder.handshake::<_, Bytes>(socket);
    let handshaken = match limits.idle_timeout {
        Some(idle) => tokio::time::timeout(idle, handshake).await.ok(),
        None => Some(handshake.await),
    };
    let Some(Ok(mut connection)) = handshaken else {
        return;
    };
    let peer = peer_name(&peer);
    let budget = Arc::new(ConnectionBudget::new());
    let (closed_tx, closed_rx) = watch::channel(false);
    let mut going_away = false;
    // idle: no stream open; checked a few times per timeout (a timer per stream change would cost more)
    let check_every = limits
        .idle_timeout
        .map_or(Duration::from_secs(3600), |t| (t / 4).max(Duration::from_millis(50)));
    let mut idle_check = tokio::time::interval(check_every);
    let mut idle_since: Option<Instant> = None;
    let mut drop_at: Option<Instant> = None;
    loop {
        tokio::select! {
            accepted = connection.accept() => {
                // None once a graceful shutdown has seen every open stream end
                let Some(Ok((request, respond))) = accepted else { break };
                idle_since = None;
                let id = {
                    let mut next = next_id.lock().unwrap_or_else(|e| e.into_inner());
                    *next += 1;
                    *next
                };
                tokio::spawn(serve_call(
                    shared.clone(),
                    id,
                    peer.clone(),
                    request,
                    respond,
                    budget.clone(),
                    closed_rx.clone(),
                ));
            }
            _ = stopping.changed(), if !going_away => {
                // GOAWAY: the client opens no new streams here and retries them elsewhere; the
                // connection keeps being driven, so answers already given are written out
                going_away = true;
                connection.graceful_shutdown();
            }
            _ = idle_check.tick(), if limits.idle_timeout.is_some() => {
                if let Some(at) = drop_at {
                    if Instant::now() >= at {
                        break;
                    }
                } else if going_away || connection.has_streams() {
                    idle_since = None;
                } else {
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if limits.idle_timeout.is_some_and(|t| since.elapsed() >= t) {
                        shared.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                        going_away = true;
                        drop_at = Some(Instant::now() + IDLE_GOAWAY_GRACE);
                        connection.graceful_shutdown();
                    }
                }
            }
            () = budget.flood.notified() => {
                shared.counters.reset_flood_closed.fetch_add(1, Ordering::Relaxed);
                connection.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                // drive the GOAWAY out, then drop the connection and every call on it
                let _ = tokio::time::timeout(STOP_DRAIN, std::future::poll_fn(|cx| connection.poll_closed(cx))).await;
                break;
            }
        }
    }
    let _ = closed_tx.send(true);
}

/// Keeps `Counters::open_connections` right however a connection's task ends.
struct OpenConnection(Arc<Shared>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.counters.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An HTTP/2 + gRPC server on its own thread; Python takes its events and answers its calls.
#[pyclass(module = "rocketstore.common._native")]
pub struct GrpcFront {
    shared: Arc<Shared>,
    answers: mpsc::UnboundedSender<Vec<Answer>>,
    port: u16,
    thread: FrontThread,
}

#[pymethods]
impl GrpcFront {
    /// Listens on `host:port` (0 picks one: see `port`); `client_streaming` names the method paths
    /// whose messages are handed over one by one (the others are read whole before the call event).
    /// The limits: largest request message, request bytes a connection may have in unfinished
    /// messages, response bytes its calls may have waiting for the client's windows, streams open
    /// at once per connection, connections at once (more are closed as
    /// they come), and how long a connection with no call open is kept (0: forever).
    #[new]
    #[pyo3(signature = (host, port, *, max_message_bytes, client_streaming, max_request_bytes_per_connection,
                        max_response_bytes_per_connection, max_concurrent_streams, max_connections,
                        idle_timeout_ms))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        host: &str,
        port: u16,
        max_message_bytes: usize,
        client_streaming: Vec<String>,
        max_request_bytes_per_connection: usize,
        max_response_bytes_per_connection: usize,
        max_concurrent_streams: u32,
        max_connections: usize,
        idle_timeout_ms: u64,
    ) -> PyResult<Self> {
        if max_request_bytes_per_connection < max_message_bytes + 5 {
            return Err(PyValueError::new_err(
                "max_request_bytes_per_connection must hold at least one message of max_message_bytes",
            ));
        }
        let (listener, bound) = front_thread::listen(host, port)?;
        let shared = Arc::new(Shared {
            events: Handoff::new()?,
            calls: Mutex::new(HashMap::new()),
            limits: Limits {
                max_message: max_message_bytes,
                max_request_bytes: max_request_bytes_per_connection,
                max_response_bytes: max_response_bytes_per_connection,
                max_concurrent_streams,
                max_connections,
                idle_timeout: (idle_timeout_ms > 0).then(|| Duration::from_millis(idle_timeout_ms)),
            },
            counters: Counters::default(),
            client_streaming,
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(front_thread::runtime_error)?;
        let (answers_tx, answers_rx) = mpsc::unbounded_channel::<Vec<Answer>>();
        let serving = shared.clone();
        let thread = FrontThread::spawn("grpc-front", runtime, move |stop| async move {
            tokio::spawn(hand_out(serving.clone(), answers_rx));
            let next_id = Arc::new(Mutex::new(0u64));
            let (stopping_tx, stopping_rx) = watch::channel(false);
            let accept = |socket: tokio::net::TcpStream, peer: SocketAddr| {
                let counters = &serving.counters;
                if counters.open_connections.load(Ordering::Relaxed) >= serving.limits.max_connections {
                    // closed at once: the cap bounds what connections can make us hold
                    counters.refused_connections.fetch_add(1, Ordering::Relaxed);
                    drop(socket);
                    return None;
                }
                counters.open_connections.fetch_add(1, Ordering::Relaxed);
                let open = OpenConnection(serving.clone());
                Some(serve_connection(
                    serving.clone(),
                    socket,
                    peer,
                    next_id.clone(),
                    stopping_rx.clone(),
                    open,
                ))
            };
            // answers Python gave before close() reach their clients; calls still open then
            // (Python stopped waiting for them) are dropped with their connection after
            // STOP_DRAIN, when the runtime is dropped with every connection and call task
            let stopping = || {
                let _ = stopping_tx.send(true);
            };
            front_thread::accept_until_stopped(listener, stop, STOP_DRAIN, accept, stopping).await;
        })?;
        Ok(GrpcFront {
            shared,
            answers: answers_tx,
            port: bound,
            thread,
        })
    }

    /// The bound port.
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// `(open connections, connections refused by the cap, connections closed idle, connections
    /// closed for a reset flood, calls refused for the connection's request-bytes budget, calls
    /// reset for the connection's response-bytes budget)`.
    fn stats(&self) -> (usize, u64, u64, u64, u64, u64) {
        let c = &self.shared.counters;
        (
            c.open_connections.load(Ordering::Relaxed),
            c.refused_connections.load(Ordering::Relaxed),
            c.idle_closed.load(Ordering::Relaxed),
            c.reset_flood_closed.load(Ordering::Relaxed),
            c.request_budget_refused.load(Ordering::Relaxed),
            c.slow_reader_reset.load(Ordering::Relaxed),
        )
    }

    /// The descriptor to watch for readability (`loop.add_reader`): readable when events wait.
    fn fileno(&self) -> i32 {
        self.shared.events.fileno()
    }

    /// Every waiting event, as tuples: `(0, id, path, metadata, peer, timeout_s | None, message | None)`
    /// for a call, `(1, id, message)` a message of a client stream, `(2, id)` its half-close,
    /// `(3, id)` a call that ended on the client's side (cancel, reset, deadline, connection lost).
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.shared.events.take_list(py, |event| {
            Ok(match event {
                Event::Call {
                    id,
                    path,
                    metadata,
                    peer,
                    timeout,
                    message,
                } => {
                    let mut pairs = Vec::with_capacity(metadata.len());
                    for (key, value) in metadata {
                        let value: Bound<'py, PyAny> = match value {
                            MetaValue::Text(text) => text.into_pyobject(py)?.into_any(),
                            MetaValue::Binary(raw) => PyBytes::new(py, &raw).into_any(),
                        };
                        pairs.push((key, value));
                    }
                    let message = message.map(|m| PyBytes::new(py, &m));
                    (EV_CALL, id, path, pairs, peer, timeout, message)
                        .into_pyobject(py)?
                        .into_any()
                }
                Event::Message { id, message } => (EV_MESSAGE, id, PyBytes::new(py, &message))
                    .into_pyobject(py)?
                    .into_any(),
                Event::HalfClose { id } => (EV_HALF_CLOSE, id).into_pyobject(py)?.into_any(),
                Event::Cancel { id } => (EV_CANCEL, id).into_pyobject(py)?.into_any(),
            })
        })
    }

    /// Python's answers of one pass of its loop, in order: each `(id, message | None, status | None,
    /// details)` sends `message` on call `id` when there is one (a stream's next response, a unary
    /// call's answer), then ends the call with gRPC `status` and `details` when there is one. Taken
    /// in one call and handed to the front's thread as one batch (`hand_out`), so that thread is
    /// woken once for all of them: waking each call's task from here cost a wake-up per answer,
    /// each a system call made with the interpreter lock held and, on a core both threads share,
    /// often a context switch. Answers to calls that are gone are dropped: the client ended them.
    fn answer(
        &self,
        py: Python<'_>,
        answers: Vec<(u64, Option<PyBackedBytes>, Option<u32>, String)>,
    ) -> PyResult<()> {
        if let Some((_, _, Some(status), _)) = answers.iter().find(|a| a.2.is_some_and(|s| s > 16)) {
            return Err(PyValueError::new_err(format!("not a gRPC status code: {status}")));
        }
        // the messages' bytes are kept, not copied: the front's thread holds the Python objects
        let batch: Vec<Answer> = answers
            .into_iter()
            .map(|(id, message, status, details)| {
                (id, message.map(Bytes::from_owner), status.map(|s| (s, details)))
            })
            .collect();
        // Waking the front's thread may be a system call and a context switch: made with the
        // interpreter lock let go, as the remoting front's `send` does. It fails only once the
        // front's thread has ended (after close): nobody is left to answer.
        py.detach(|| {
            let _ = self.answers.send(batch);
        });
        Ok(())
    }

    /// Stops listening, sends every connection a GOAWAY and gives them up to `STOP_DRAIN` to write
    /// the answers already given, then drops them.
    fn close(&mut self, py: Python<'_>) {
        self.thread.stop_and_join(py);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("5S"), Some(5.0));
        assert_eq!(parse_timeout("250m"), Some(0.25));
        assert_eq!(parse_timeout("5x"), None);
        assert_eq!(parse_timeout("S"), None);
    }

    #[test]
    fn frames() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 0, 3, 1, 2][..]);
        assert!(matches!(next_message(&mut buf, 10), Ok(None)));
        buf.extend_from_slice(&[3]);
        assert_eq!(
            next_message(&mut buf, 10).ok().flatten().as_deref(),
            Some(&[1u8, 2, 3][..])
        );
        let mut big = BytesMut::from(&[0u8, 0, 0, 1, 0][..]);
        assert!(matches!(
            next_message(&mut big, 10),
            Err(Failure(RESOURCE_EXHAUSTED, _))
        ));
    }
}
