//! One dispatch pass: the twin of `scan_python` in `rocketstore.store.dispatch_scan`.
//!
//! Runs without the interpreter lock over the mapped segment; the result is plain Rust data
//! that the binding turns into Python objects per queue run, not per message.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::java;
use crate::record::{self, Decoded, Record};

pub const END_NONE: u8 = 0;
pub const END_BLANK: u8 = 1;
pub const END_CORRUPT: u8 = 2;

/// Consecutive ConsumeQueue entries of one queue.
pub struct QueueRun {
    pub topic: String,
    pub queue_id: i32,
    pub first_queue_offset: i64,
    pub count: i64,
    pub entries: Vec<u8>,
    pub last_store_timestamp: i64,
}

pub struct Scan {
    pub end_pos: usize,
    pub records: usize,
    pub end_kind: u8,
    pub reason: String,
    pub runs: Vec<QueueRun>,
    pub index_entries: Vec<u8>,
    pub last_queue_timestamp: i64,
}

/// The topic whose ConsumeQueue entries carry a delivery time instead of a tag hash.
const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// Scan whole records from `start` while below `limit` (at most `max_records` of them).
/// `delay_levels_ms` is messageDelayLevel in milliseconds, level 1 first.
pub fn scan(
    buf: &[u8],
    start: usize,
    limit: usize,
    max_records: usize,
    index_enabled: bool,
    delay_levels_ms: &[i64],
) -> Scan {
    let mut out = Scan {
        end_pos: start,
        records: 0,
        end_kind: END_NONE,
        reason: String::new(),
        runs: Vec::new(),
        index_entries: Vec::new(),
        last_queue_timestamp: 0,
    };
    // keyed by the topic as decoded, borrowed from the log unless it needed replacement characters:
    // no allocation per record to find its run
    let mut open_runs: HashMap<(Cow<'_, str>, i32), usize> = HashMap::new();
    let mut pos = start;
    while pos < limit && out.records < max_records {
        let rec = match record::decode(buf, pos) {
            Decoded::Message(rec) => rec,
            Decoded::Blank => {
                out.end_kind = END_BLANK;
                out.reason = "blank record".to_owned();
                break;
            }
            Decoded::Corrupt(reason) => {
                out.end_kind = END_CORRUPT;
                out.reason = reason;
                break;
            }
        };
        out.records += 1;
        pos += rec.total_size;
        // Java's new String(bytes, UTF_8) and Python's errors="replace" both substitute U+FFFD
        let topic = String::from_utf8_lossy(rec.topic);
        let properties = String::from_utf8_lossy(rec.properties);
        let props = record::dispatch_properties(&properties);
        if record::gets_consume_queue_entry(rec.sys_flag) {
            let tags_code = consume_queue_tags_code(&topic, &props, rec.store_timestamp, delay_levels_ms);
            add_to_run(&mut out.runs, &mut open_runs, topic.clone(), &rec, tags_code);
            out.last_queue_timestamp = rec.store_timestamp;
        }
        if index_enabled && rec.sys_flag & record::TRANSACTION_TYPE_MASK != record::TRANSACTION_ROLLBACK {
            add_index_keys(&mut out.index_entries, &topic, &rec, props.uniq_key, props.keys);
        }
    }
    out.end_pos = pos;
    out
}

fn add_to_run<'a>(
    runs: &mut Vec<QueueRun>,
    open_runs: &mut HashMap<(Cow<'a, str>, i32), usize>,
    topic: Cow<'a, str>,
    rec: &Record<'_>,
    tags_code: i64,
) {
    let mut entry = [0u8; 20];
    entry[..8].copy_from_slice(&rec.physical_offset.to_be_bytes());
    entry[8..12].copy_from_slice(&(rec.total_size as i32).to_be_bytes());
    entry[12..].copy_from_slice(&tags_code.to_be_bytes());
    let key = (topic, rec.queue_id);
    if let Some(&at) = open_runs.get(&key) {
        let run = &mut runs[at];
        if run.first_queue_offset.wrapping_add(run.count) == rec.queue_offset {
            run.entries.extend_from_slice(&entry);
            run.count += 1;
            run.last_store_timestamp = rec.store_timestamp;
            return;
        }
    }
    let topic = key.0.to_string();
    open_runs.insert(key, runs.len());
    runs.push(QueueRun {
        topic,
        queue_id: rec.queue_id,
        first_queue_offset: rec.queue_offset,
        count: 1,
        entries: entry.to_vec(),
        last_store_timestamp: rec.store_timestamp,
    });
}

/// The twin of `consume_queue_tags_code` in `rocketstore.store.schedule_message_service`: the
/// delivery time of a scheduled record (store time + its level's delay, the level clamped to the
/// highest), else the Java hash of its tags.
fn consume_queue_tags_code(
    topic: &str,
    props: &record::DispatchProperties<'_>,
    store_timestamp: i64,
    delay_levels_ms: &[i64],
) -> i64 {
    if topic == SCHEDULE_TOPIC {
        if let Some(level) = props.delay.and_then(|t| java::parse_java_int(t, i64::from(i32::MIN), i64::from(i32::MAX))) {
            let level = level.min(delay_levels_ms.len() as i64);
            if level > 0 {
                return store_timestamp.wrapping_add(delay_levels_ms[(level - 1) as usize]);
            }
        }
    }
    match props.tags {
        Some(t) if !t.is_empty() => i64::from(java::string_hash(t)),
        _ => 0,
    }
}

/// `topic#uniqKey`, then `topic#key` per non-empty space-separated key, hashed for the IndexFile.
fn add_index_keys(out: &mut Vec<u8>, topic: &str, rec: &Record<'_>, uniq_key: Option<&str>, keys: Option<&str>) {
    let topic_hash = java::hash_continue(java::string_hash(topic), "#");
    let mut add = |name: &str| {
        out.extend_from_slice(&java::index_key_hash(java::hash_continue(topic_hash, name)).to_be_bytes());
        out.extend_from_slice(&rec.physical_offset.to_be_bytes());
        out.extend_from_slice(&rec.store_timestamp.to_be_bytes());
    };
    if let Some(uniq) = uniq_key {
        add(uniq);
    }
    if let Some(keys) = keys {
        for key in keys.split(' ').filter(|k| !k.is_empty()) {
            add(key);
        }
    }
}
