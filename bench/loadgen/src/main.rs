//! A lean load generator for RocketMQ-protocol brokers, for bench/run_broker_bench.py.
//!
//! Why it exists: on a 2-core machine, with the broker pinned to one core and the client to the
//! other, the Java client's own CPU (about 24 µs per send, 8 per consumed message) caps what any
//! broker can be shown to do: its core runs at 91-100 % while the broker's does not. This program
//! writes the same requests the 4.x client writes (SEND_MESSAGE_V2 with a 1 KiB body and the
//! client's properties; PULL_MESSAGE of 32) at a few µs each, so the broker sets the pace. Every
//! broker gets the same program in the same run; the Java client's rows stay in the table as what
//! a user's client sees.
//!
//! One connection and one thread, as the Java client uses one channel per broker: `produce` keeps
//! `--inflight` sends outstanding (a closed loop: each answer releases the next send), `pull` keeps
//! one pull outstanding per queue and walks each answer's records, checking that queue offsets run
//! on without a gap. A summary is printed as one JSON line on stdout; "timing starts" goes to stderr
//! when the timed part of a produce begins (after `--warmup` seconds of the same, untimed).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

const SEND_MESSAGE_V2: i32 = 310;
const PULL_MESSAGE: i32 = 11;
const SUCCESS: i32 = 0;
const PULL_NOT_FOUND: i32 = 19;
const PULL_RETRY_IMMEDIATELY: i32 = 20;
const PULL_OFFSET_MOVED: i32 = 21;
/// PullSysFlag's FLAG_SUBSCRIPTION: the request carries its own subscription ("*"), so no heartbeat
/// has to register the group first.
const FLAG_SUBSCRIPTION: u32 = 1 << 2;
/// Where a stored message record keeps its QUEUEOFFSET: after TOTALSIZE, MAGICCODE, BODYCRC,
/// QUEUEID and FLAG, 4 bytes each.
const QUEUE_OFFSET_AT: usize = 20;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
struct Header {
    code: i32,
    opaque: i32,
    #[serde(default)]
    remark: Option<String>,
    #[serde(rename = "extFields", default)]
    ext_fields: HashMap<String, serde_json::Value>,
}

impl Header {
    fn field(&self, name: &str) -> Option<i64> {
        match self.ext_fields.get(name)? {
            serde_json::Value::String(s) => s.parse().ok(),
            serde_json::Value::Number(n) => n.as_i64(),
            _ => None,
        }
    }
}

/// `--name value` pairs.
struct Args(HashMap<String, String>);

impl Args {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut map = HashMap::new();
        let mut it = args.iter();
        while let Some(key) = it.next() {
            let name = key
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --name, got {key:?}"))?;
            let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            map.insert(name.to_string(), value.clone());
        }
        Ok(Args(map))
    }

    fn text(&self, name: &str) -> Result<&str, String> {
        self.0
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("--{name} is required"))
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: Option<T>) -> Result<T, String> {
        match self.0.get(name) {
            Some(v) => v.parse().map_err(|_| format!("--{name}: {v:?} is not a number")),
            None => default.ok_or_else(|| format!("--{name} is required")),
        }
    }
}

/// A remoting connection: frames out, whole frames in (length, header length, JSON header, body).
struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
}

impl Connection {
    fn open(addr: &str) -> io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        Ok(Connection {
            stream,
            buf: vec![0; 4 << 20],
            start: 0,
            end: 0,
            out: Vec::with_capacity(1 << 20),
        })
    }

    /// Queue one request frame; `flush` writes every queued frame in one call.
    fn queue(&mut self, header: &str, body: &[u8]) {
        let total = 4 + header.len() + body.len();
        self.out.extend_from_slice(&(total as u32).to_be_bytes());
        self.out.extend_from_slice(&(header.len() as u32).to_be_bytes()); // top byte 0: a JSON header
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(body);
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// Read once (blocking) and return every whole frame now buffered, as (header, body range);
    /// bodies stay in `self.buf` until the next call.
    fn frames(&mut self) -> io::Result<Vec<(Header, std::ops::Range<usize>)>> {
        if self.start > 0 && (self.end == self.start || self.buf.len() - self.end < 64 << 10) {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let len = self.buf.len();
            self.buf.resize(len * 2, 0);
        }
        let n = self.stream.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the broker closed the connection",
            ));
        }
        self.end += n;
        let mut frames = Vec::new();
        while self.end - self.start >= 8 {
            let at = self.start;
            let total = u32::from_be_bytes(self.buf[at..at + 4].try_into().unwrap()) as usize;
            if self.end - at < 4 + total {
                if 4 + total > self.buf.len() {
                    self.buf.resize(4 + total, 0);
                }
                break;
            }
            let header_len = (u32::from_be_bytes(self.buf[at + 4..at + 8].try_into().unwrap()) & 0x00ff_ffff) as usize;
            let header: Header = serde_json::from_slice(&self.buf[at + 8..at + 8 + header_len])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("response header: {e}")))?;
            frames.push((header, at + 8 + header_len..at + 4 + total));
            self.start = at + 4 + total;
        }
        Ok(frames)
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The 4.x client's body: random bytes (a padded body would be zipped over 4 KiB), the same every
/// send, from a fixed seed.
fn random_body(size: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Produce {
    topic: String,
    queues: u32,
    body: Vec<u8>,
    key_prefix: String,
    next_opaque: i32,
    sent_total: u64,
}

impl Produce {
    /// One SEND_MESSAGE_V2 as DefaultMQProducer writes it for `new Message(topic, body)`: the
    /// properties hold WAIT=true and a 32-hex-digit UNIQ_KEY, round robin over the queues.
    fn request(&mut self, conn: &mut Connection) -> i32 {
        let opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1);
        let queue = (self.sent_total % self.queues as u64) as u32;
        let header = format!(
            concat!(
                r#"{{"code":{},"extFields":{{"a":"loadgen_bench","b":"{}","c":"TBW102","d":"4","e":"{}","f":"0","#,
                r#""g":"{}","h":"0","i":"UNIQ_KEY\u0001{}{:016X}\u0002WAIT\u0001true\u0002","j":"0","k":"false","#,
                r#""m":"false"}},"flag":0,"language":"JAVA","opaque":{},"serializeTypeCurrentRPC":"JSON","version":399}}"#
            ),
            SEND_MESSAGE_V2,
            self.topic,
            queue,
            now_ms(),
            self.key_prefix,
            self.sent_total,
            opaque
        );
        self.sent_total += 1;
        conn.queue(&header, &self.body);
        opaque
    }
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1e6
}

fn produce(args: &Args) -> Result<String, String> {
    let addr = args.text("addr")?;
    let inflight: usize = args.number("inflight", Some(32))?;
    let seconds: f64 = args.number("seconds", None)?;
    let warmup: f64 = args.number("warmup", Some(0.0))?;
    let mut gen = Produce {
        topic: args.text("topic")?.to_string(),
        queues: args.number("queues", Some(4))?,
        body: random_body(args.number("size", Some(1024))?),
        key_prefix: format!("{:08X}{:08X}", std::process::id(), now_ms() as u32),
        next_opaque: 1,
        sent_total: 0,
    };
    let mut conn = Connection::open(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    // opaque -> (sent at, timed): a send made before the timed part starts is not counted
    let mut pending: HashMap<i32, (Instant, bool)> = HashMap::with_capacity(inflight * 2);
    let mut timed = warmup <= 0.0;
    if timed {
        eprintln!("loadgen: timing starts");
    }
    let start = Instant::now();
    let mut begin = start;
    let mut end = begin + Duration::from_secs_f64(seconds + warmup.max(0.0));
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut first_failure: Option<String> = None;
    let mut latencies: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut last_answer = begin;
    for _ in 0..inflight {
        let opaque = gen.request(&mut conn);
        pending.insert(opaque, (Instant::now(), timed));
    }
    conn.flush().map_err(|e| format!("write: {e}"))?;
    while !pending.is_empty() {
        let frames = conn.frames().map_err(|e| format!("read: {e}"))?;
        let now = Instant::now();
        if !timed && now >= start + Duration::from_secs_f64(warmup) {
            timed = true;
            begin = now;
            end = begin + Duration::from_secs_f64(seconds);
            eprintln!("loadgen: timing starts");
        }
        for (header, _) in frames {
            let Some((sent_at, counted)) = pending.remove(&header.opaque) else {
                return Err(format!("an answer to opaque {} that was not asked", header.opaque));
            };
            if counted {
                last_answer = now;
                latencies.push(now.duration_since(sent_at).as_nanos() as u64);
                if header.code == SUCCESS {
                    ok += 1;
                } else {
                    failed += 1;
                    first_failure.get_or_insert_with(|| format!("code {}: {:?}", header.code, header.remark));
                }
            }
            if now < end {
                let opaque = gen.request(&mut conn);
                pending.insert(opaque, (now, timed));
            }
        }
        conn.flush().map_err(|e| format!("write: {e}"))?;
    }
    let elapsed = last_answer.duration_since(begin).as_secs_f64().max(1e-9);
    latencies.sort_unstable();
    Ok(serde_json::json!({
        "mode": "produce", "inflight": inflight, "size": gen.body.len(), "seconds": elapsed, "sent": ok,
        "failed": failed, "first_failure": first_failure, "tps": ok as f64 / elapsed,
        "p50_ms": percentile(&latencies, 0.50), "p99_ms": percentile(&latencies, 0.99),
        "max_ms": percentile(&latencies, 1.0),
    })
    .to_string())
}

struct Queue {
    offset: i64,
    done: bool,
}

fn pull_request(conn: &mut Connection, group: &str, topic: &str, queue: usize, offset: i64, batch: u32) {
    let header = format!(
        concat!(
            r#"{{"code":{},"extFields":{{"consumerGroup":"{}","topic":"{}","queueId":"{}","queueOffset":"{}","#,
            r#""maxMsgNums":"{}","sysFlag":"{}","commitOffset":"0","suspendTimeoutMillis":"0","subscription":"*","#,
            r#""subVersion":"0","expressionType":"TAG"}},"flag":0,"language":"JAVA","opaque":{},"#,
            r#""serializeTypeCurrentRPC":"JSON","version":399}}"#
        ),
        PULL_MESSAGE, group, topic, queue, offset, batch, FLAG_SUBSCRIPTION, queue
    );
    conn.queue(&header, &[]);
}

fn pull(args: &Args) -> Result<String, String> {
    let addr = args.text("addr")?;
    let topic = args.text("topic")?;
    let group = args.text("group")?;
    let queues: usize = args.number("queues", Some(4))?;
    let batch: u32 = args.number("batch", Some(32))?;
    let stop_after: u64 = args.number("stop-after", None)?;
    let max_seconds: f64 = args.number("max-seconds", Some(300.0))?;
    let mut conn = Connection::open(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    let mut state: Vec<Queue> = (0..queues).map(|_| Queue { offset: 0, done: false }).collect();
    let begin = Instant::now();
    let deadline = begin + Duration::from_secs_f64(max_seconds);
    let (mut consumed, mut bytes, mut pulls, mut gaps) = (0u64, 0u64, 0u64, 0u64);
    for q in 0..queues {
        pull_request(&mut conn, group, topic, q, 0, batch);
    }
    conn.flush().map_err(|e| format!("write: {e}"))?;
    let mut outstanding = queues;
    while outstanding > 0 {
        let frames = conn.frames().map_err(|e| format!("read: {e}"))?;
        for (header, body) in frames {
            outstanding -= 1;
            pulls += 1;
            let q = header.opaque as usize;
            if q >= queues {
                return Err(format!("an answer to opaque {} that was not asked", header.opaque));
            }
            match header.code {
                SUCCESS => {
                    // walk the records: each opens with its total size; queue offsets run on
                    let mut at = body.start;
                    let mut expect = state[q].offset;
                    while at + QUEUE_OFFSET_AT + 8 <= body.end {
                        let size = u32::from_be_bytes(conn.buf[at..at + 4].try_into().unwrap()) as usize;
                        let offset = i64::from_be_bytes(
                            conn.buf[at + QUEUE_OFFSET_AT..at + QUEUE_OFFSET_AT + 8]
                                .try_into()
                                .unwrap(),
                        );
                        if offset != expect {
                            gaps += 1;
                        }
                        expect = offset + 1;
                        consumed += 1;
                        bytes += size as u64;
                        at += size.max(1);
                    }
                    let next = header
                        .field("nextBeginOffset")
                        .ok_or("a FOUND answer without nextBeginOffset")?;
                    state[q].offset = next;
                }
                // the backlog is written before the drain: a queue with nothing more is drained
                PULL_NOT_FOUND => state[q].done = true,
                PULL_OFFSET_MOVED => match header.field("nextBeginOffset") {
                    Some(next) if next > state[q].offset => state[q].offset = next,
                    _ => state[q].done = true,
                },
                PULL_RETRY_IMMEDIATELY => {}
                code => return Err(format!("pull of queue {q}: code {code}: {:?}", header.remark)),
            }
            if !state[q].done && consumed < stop_after && Instant::now() < deadline {
                pull_request(&mut conn, group, topic, q, state[q].offset, batch);
                outstanding += 1;
            }
        }
        conn.flush().map_err(|e| format!("write: {e}"))?;
    }
    let elapsed = begin.elapsed().as_secs_f64().max(1e-9);
    Ok(serde_json::json!({
        "mode": "pull", "queues": queues, "batch": batch, "seconds": elapsed, "consumed": consumed,
        "bytes": bytes, "pulls": pulls, "gaps": gaps, "tps": consumed as f64 / elapsed,
    })
    .to_string())
}

const USAGE: &str = "usage:
  loadgen produce --addr HOST:PORT --topic T --seconds S [--warmup S] [--inflight 32] [--queues 4] [--size 1024]
  loadgen pull --addr HOST:PORT --topic T --group G --stop-after N [--queues 4] [--batch 32] [--max-seconds 300]";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = match argv.split_first() {
        Some((mode, rest)) => Args::parse(rest).and_then(|args| match mode.as_str() {
            "produce" => produce(&args),
            "pull" => pull(&args),
            other => Err(format!("unknown mode {other:?}\n{USAGE}")),
        }),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
