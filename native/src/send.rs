//! A plain SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE in one call: from the request's extFields and
//! body to the stamped record(s) in the mapped CommitLog segment and the encoded SEND_OK frame.
//!
//! Python decides whether a send is plain (`rocketstore.broker.processor.send`: the topic's
//! cached state, the broker's and the store's) and holds the put lock around the call; this
//! does the per-message byte work of the path it stands for, which stays the reference
//! (`SendMessageProcessor._put` then `CommitLog.put_message`, and `ROCKETSTORE_NATIVE=0` runs only
//! that): the header's fields, the stored properties (the request's without `WAIT=true`, with
//! `CLUSTER` appended, as `properties_to_string(string_to_properties(...))` writes them), the
//! record encoded and stamped off the mapping and copied in at once (a kill -9 never leaves a
//! record with unstamped offsets), the offset message id and the response. Anything the
//! reference would treat otherwise (a property that routes the message elsewhere, a field that
//! does not decode, a record that does not fit the segment's room) makes it write nothing and
//! answer None, and the send takes the reference path.
//!
//! A batch (`PlainSend::put_batch`) stands for `SendMessageProcessor._put`'s batch branch then
//! `CommitLog.put_messages`: its body split as `decode_batch` splits it, each item's properties
//! as `properties_to_string(string_to_properties(...))` writes them with the batch's own (the
//! request's, `WAIT` kept, `CLUSTER` appended) after them, the records appended at once in one
//! segment with consecutive queue offsets, and the response's message id the comma-joined offset
//! ids of every record. A malformed body answers None too: the reference then answers the error.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use std::borrow::Cow;
use std::collections::HashMap;

use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::java::{parse_java_int, I32_RANGE, I64_RANGE};
use crate::record::{self, property_items, NewRecord, END_FILE_MIN_BLANK_LENGTH};
use crate::remoting::{self, encode_json_header};

const MAX_TOPIC_LENGTH_V1: usize = 127;
const RPC_TYPE_RESPONSE: i64 = 1;
const SUCCESS: i64 = 0;
/// RequestCode.SEND_MESSAGE_V2, the one request code `PlainSend::serve_frames` serves.
const SEND_MESSAGE_V2: i32 = 310;

/// Appends to `out` the items of `text` that `string_to_properties` keeps, each followed by
/// `\x02`; None when a name comes twice (the reference keeps the first one's place and the last
/// one's value), a `refused` name is present, or, with `drop_wait_true`, `WAIT` has a value other
/// than `true` (kept and acted upon there); `WAIT=true` itself is then left out. Items
/// `string_to_properties` skips (shorter than 3 characters, no non-empty name and value around
/// the first `\x01`) are skipped here too.
fn push_items(out: &mut String, text: &str, refused: &[String], drop_wait_true: bool) -> Option<()> {
    let mut names: Vec<&str> = Vec::with_capacity(8);
    for (item, name, value) in property_items(text) {
        if names.contains(&name) || refused.iter().any(|r| r == name) {
            return None;
        }
        names.push(name);
        if drop_wait_true && name == "WAIT" {
            if value != "true" {
                return None;
            }
            continue;
        }
        out.push_str(item);
        out.push('\u{2}');
    }
    Some(())
}

/// The stored properties of a plain send, or None when the request's properties are not plain
/// (see [`push_items`]), with `CLUSTER` appended. A single send's drop `WAIT=true` (4.9.8 does not
/// store the default); a batch's keep `WAIT` as the client sent it, as the reference's batch put
/// does.
pub fn stored_properties(text: &str, cluster: &str, refused: &[String], batch: bool) -> Option<String> {
    let mut out = String::with_capacity(text.len() + cluster.len() + 9);
    push_items(&mut out, text, refused, !batch)?;
    out.push_str("CLUSTER\u{1}");
    out.push_str(cluster);
    Some(out)
}

/// One message of a plain batch body: its flag, its body, and its record's properties (its own,
/// then the batch's).
pub struct BatchItem<'a> {
    pub flag: i32,
    pub body: &'a [u8],
    pub properties: String,
}

fn be_i32(data: &[u8], pos: usize) -> i32 {
    i32::from_be_bytes(data[pos..pos + 4].try_into().expect("4 bytes"))
}

/// The items of a batch body and the batch's wire size (per item 20 + body + 2 + its own stored
/// properties, what the reference holds against maxMessageSize); None when the body is malformed
/// as `decode_batch` finds it (truncated, inconsistent sizes, properties not UTF-8) or an item's
/// properties name one property twice (the reference keeps the first place and the last value).
/// Each item's own properties are the ones `string_to_properties` keeps, and `batch_properties`
/// follow them after a separator.
pub fn batch_items<'a>(data: &'a [u8], batch_properties: &str) -> Option<(Vec<BatchItem<'a>>, usize)> {
    let mut items = Vec::new();
    let mut wire_size = 0usize;
    let mut pos = 0usize;
    while pos < data.len() {
        if pos + 20 > data.len() {
            return None;
        }
        let (size, flag, body_length) = (be_i32(data, pos), be_i32(data, pos + 12), be_i32(data, pos + 16));
        let end = pos as i64 + i64::from(size);
        if size < 22 || end > data.len() as i64 || body_length < 0 || pos as i64 + 22 + i64::from(body_length) > end {
            return None;
        }
        let end = end as usize;
        let body_start = pos + 20;
        let body_end = body_start + body_length as usize;
        let properties_length = i16::from_be_bytes([data[body_end], data[body_end + 1]]);
        if properties_length < 0 || body_end + 2 + properties_length as usize != end {
            return None;
        }
        let text = std::str::from_utf8(&data[body_end + 2..end]).ok()?;
        let mut properties = String::with_capacity(text.len() + batch_properties.len() + 1);
        push_items(&mut properties, text, &[], false)?;
        wire_size += 22 + body_length as usize + properties.len().saturating_sub(1);
        properties.push_str(batch_properties);
        items.push(BatchItem {
            flag,
            body: &data[body_start..body_end],
            properties,
        });
        pos = end;
    }
    Some((items, wire_size))
}

/// RocketMQ's offset message id: the store host's address and port, then the offset, in upper hex.
pub fn message_id(store_host: &[u8], offset: i64) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut id = String::with_capacity(2 * (store_host.len() + 8));
    for &b in store_host.iter().chain(offset.to_be_bytes().iter()) {
        id.push(HEX[usize::from(b >> 4)] as char);
        id.push(HEX[usize::from(b & 0xF)] as char);
    }
    id
}

/// The SEND_OK response frame: the processor's region and trace fields, then the message id,
/// queue and queue offset, as `SendMessageProcessor.respond` orders them.
#[allow(clippy::too_many_arguments)]
pub fn response_frame(
    region: &str,
    trace: &str,
    msg_id: &str,
    queue_id: i32,
    queue_offset: i64,
    language: &str,
    opaque: i64,
    version: i64,
) -> Vec<u8> {
    let queue_id = queue_id.to_string();
    let queue_offset = queue_offset.to_string();
    let fields = [
        ("MSG_REGION", region),
        ("TRACE_ON", trace),
        ("msgId", msg_id),
        ("queueId", queue_id.as_str()),
        ("queueOffset", queue_offset.as_str()),
    ];
    let header = encode_json_header(SUCCESS, &fields, RPC_TYPE_RESPONSE, language, opaque, None, version);
    let mut frame = Vec::with_capacity(8 + header.len());
    frame.extend_from_slice(&(4 + header.len() as i32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as i32).to_be_bytes()); // serialize type JSON: 0
    frame.extend_from_slice(&header);
    frame
}

/// A put's outcome: bytes written, records written, the response frame, the message id(s).
type Put<'py> = (usize, usize, Bound<'py, PyBytes>, String);

/// What stays the same for every send of one broker: set up once, used per send.
#[pyclass(module = "rocketstore.common._native", frozen)]
pub struct PlainSend {
    cluster: String,
    store_host: Vec<u8>,
    refused: Vec<String>,
    region: String,
    trace: String,
    /// LanguageCode names, which a request's JSON header names and its response repeats; a
    /// request naming another language is not served by `serve_frames` (Python answers it OTHER).
    languages: Vec<String>,
}

/// The field's text; None when it is missing or not a `str`. Names are interned strings: a
/// lookup by a Rust `&str` would make a Python string of it on every send.
fn text<'py>(fields: &Bound<'py, PyDict>, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyString>>> {
    Ok(match fields.get_item(name)? {
        Some(value) => value.cast_exact::<PyString>().ok().cloned(),
        None => None,
    })
}

#[pymethods]
impl PlainSend {
    /// `refused`: the property names whose presence makes a send not plain (a delay level, a
    /// timer, a transaction, a CLUSTER of the client's own). `languages`: the LanguageCode names.
    #[new]
    fn new(
        cluster: String,
        store_host: Vec<u8>,
        refused: Vec<String>,
        region: String,
        trace_on: bool,
        languages: Vec<String>,
    ) -> PyResult<Self> {
        if store_host.len() != 8 {
            return Err(PyValueError::new_err(
                "the plain send path stores from an IPv4 store host (8 bytes)",
            ));
        }
        Ok(Self {
            cluster,
            store_host,
            refused,
            region,
            trace: if trace_on { "true" } else { "false" }.into(),
            languages,
        })
    }

    /// Put one plain SEND_MESSAGE_V2 at `position` of `mapping` (a segment starting at CommitLog
    /// offset `file_from_offset`, `room` bytes left to its end): (bytes written, records written
    /// (1), the response frame, the offset message id), or None with nothing written when the
    /// send is not plain after all.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (fields, body, topic, queue_id, sys_flag_bits, born_host, mapping, position, room,
                        file_from_offset, queue_offset, store_timestamp, max_body, language, opaque, version))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        fields: &Bound<'py, PyAny>,
        body: &[u8],
        topic: &str,
        queue_id: i32,
        sys_flag_bits: i32,
        born_host: &[u8],
        mapping: &Bound<'py, PyAny>,
        position: usize,
        room: usize,
        file_from_offset: i64,
        queue_offset: i64,
        store_timestamp: i64,
        max_body: usize,
        language: &str,
        opaque: i64,
        version: i64,
    ) -> PyResult<Option<Put<'py>>> {
        let Some((header, properties)) = plain_header(py, fields, false, topic, born_host)? else {
            return Ok(None);
        };
        let Some(properties) = properties_text(&properties) else {
            return Ok(None);
        };
        let mut view = PyBuffer::<u8>::get(mapping)?;
        let dst = writable(&mut view)?;
        let send = OneSend {
            header: &header,
            properties,
            body,
            topic,
            queue_id,
            sys_flag_bits,
            born_host,
        };
        let at = At {
            position,
            room,
            file_from_offset,
            queue_offset,
            store_timestamp,
            max_body,
        };
        Ok(self
            .put_one(&send, &at, dst, language, opaque, version)?
            .map(|(length, msg_id, frame)| (length, 1, PyBytes::new(py, &frame), msg_id)))
    }

    /// Put one plain SEND_BATCH_MESSAGE's records back to back at `position` of `mapping` (as
    /// [`PlainSend::put`]; queue offsets from `queue_offset` on, one per record): (bytes written,
    /// records written, the response frame, the comma-joined offset message ids), or None with
    /// nothing written when the batch is not plain after all, its body is malformed or empty, it
    /// is over `max_body` on the wire or its records do not fit the segment's room.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (fields, body, topic, queue_id, sys_flag_bits, born_host, mapping, position, room,
                        file_from_offset, queue_offset, store_timestamp, max_body, language, opaque, version))]
    fn put_batch<'py>(
        &self,
        py: Python<'py>,
        fields: &Bound<'py, PyAny>,
        body: &[u8],
        topic: &str,
        queue_id: i32,
        sys_flag_bits: i32,
        born_host: &[u8],
        mapping: &Bound<'py, PyAny>,
        position: usize,
        room: usize,
        file_from_offset: i64,
        queue_offset: i64,
        store_timestamp: i64,
        max_body: usize,
        language: &str,
        opaque: i64,
        version: i64,
    ) -> PyResult<Option<Put<'py>>> {
        let Some((header, properties)) = plain_header(py, fields, true, topic, born_host)? else {
            return Ok(None);
        };
        let Some(properties) = properties_text(&properties) else {
            return Ok(None);
        };
        let Some(batch_properties) = stored_properties(properties, &self.cluster, &self.refused, true) else {
            return Ok(None);
        };
        if batch_properties.len() > i16::MAX as usize {
            return Ok(None);
        }
        let Some((items, wire_size)) = batch_items(body, &batch_properties) else {
            return Ok(None);
        };
        if items.is_empty() || wire_size > max_body {
            return Ok(None);
        }
        let send = OneSend {
            header: &header,
            properties,
            body,
            topic,
            queue_id,
            sys_flag_bits,
            born_host,
        };
        let mut records = Vec::with_capacity(items.len());
        let mut total = 0usize;
        for item in &items {
            let new = send.record(&self.store_host, item.body, item.properties.as_bytes(), item.flag);
            let Ok(length) = record::encoded_length(&new) else {
                return Ok(None);
            };
            total += length;
            records.push((new, length));
        }
        if total + END_FILE_MIN_BLANK_LENGTH > room {
            return Ok(None);
        }
        let physical_offset = file_from_offset + position as i64;
        // encoded and stamped off the mapping, then copied in at once
        let mut encoded = vec![0u8; total];
        let mut msg_ids = String::with_capacity(records.len() * 33);
        let mut pos = 0;
        for (new, length) in &records {
            record::encode_into(new, &mut encoded[pos..pos + length]);
            if pos > 0 {
                msg_ids.push(',');
            }
            msg_ids.push_str(&message_id(&self.store_host, physical_offset + pos as i64));
            pos += length;
        }
        record::stamp_records(
            &mut encoded,
            records.len(),
            queue_offset,
            physical_offset,
            store_timestamp,
            send.sys_flag(),
            true,
        );
        let mut view = PyBuffer::<u8>::get(mapping)?;
        copy_into(writable(&mut view)?, position, &encoded)?;
        let frame = self.frame(&msg_ids, queue_id, queue_offset, language, opaque, version);
        Ok(Some((total, records.len(), PyBytes::new(py, &frame), msg_ids)))
    }

    /// Serve the plain SEND_MESSAGE_V2 requests at the head of `data[start..]` (whole remoting
    /// frames, each after its 4-byte length, as a connection read them), one after the other,
    /// until a frame that is not one: each stored at the end of the segment in `mapping` as
    /// [`PlainSend::put`] stores it (the first at `position`, each after the one before, `room`
    /// bytes left from `position` to the segment's end), its SEND_OK frame appended to the
    /// responses. What Python decided stays Python's: `topics` maps a topic to its sysFlag bits
    /// and queue-id bound, or to None when its sends are not plain; `queue_offsets` is the
    /// CommitLog's queue-offset table, read here, not written.
    ///
    /// Returns (bytes of `data` served from `start`, bytes written to the segment, the response
    /// frames back to back, the queue-offset table's new entries, one (topic, requests, bytes)
    /// per run of sends to one topic, and the topic `topics` does not know when that is what
    /// stopped it, else None). It stops, writing nothing of it, at a frame that is incomplete,
    /// whose length is outside 4..`max_frame` (the caller's decoder reports it), that is not a
    /// JSON-headed SEND_MESSAGE_V2 request expecting an answer from a known language, whose send
    /// is not plain (as `put` decides, and `topics` and the queue bound), or that does not fit.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (data, start, max_frame, topics, queue_offsets, born_host, mapping, position, room,
                        file_from_offset, store_timestamp, max_body))]
    fn serve_frames<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        start: usize,
        max_frame: usize,
        topics: &Bound<'py, PyDict>,
        queue_offsets: &Bound<'py, PyDict>,
        born_host: &[u8],
        mapping: &Bound<'py, PyAny>,
        position: usize,
        room: usize,
        file_from_offset: i64,
        store_timestamp: i64,
        max_body: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut view = PyBuffer::<u8>::get(mapping)?;
        let dst = writable(&mut view)?;
        let mut pos = start.min(data.len());
        let mut wrote = 0usize;
        let mut responses: Vec<u8> = Vec::new();
        let mut offsets: HashMap<String, i64> = HashMap::new();
        let mut runs: Vec<(String, usize, usize)> = Vec::new();
        let mut unknown: Option<String> = None;
        // the last topic's (sysFlag bits, queue bound): a connection's sends mostly go to one
        let mut last: Option<(String, i32, u64)> = None;
        while data.len() - pos >= 4 {
            let Some((length, h, body, language)) =
                remoting::served_request(data, pos, max_frame, SEND_MESSAGE_V2, &self.languages)
            else {
                break;
            };
            let texts = FieldTexts::of(&h.ext_fields);
            let (Some(topic), Some(queue_text)) = (texts.b, texts.e) else {
                break;
            };
            // Python's int(text) of ASCII digits, then its bound: a number past u64 is past it too
            let Some(queue) = (if !queue_text.is_empty() && queue_text.bytes().all(|b| b.is_ascii_digit()) {
                queue_text
                    .bytes()
                    .try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            } else {
                None
            }) else {
                break;
            };
            if last.as_ref().is_none_or(|(name, _, _)| name != topic) {
                let Some(entry) = topics.get_item(topic)? else {
                    unknown = Some(topic.to_owned());
                    break;
                };
                if entry.is_none() {
                    break;
                }
                let (bits, bound): (i32, u64) = entry.extract()?;
                last = Some((topic.to_owned(), bits, bound));
            }
            let (_, sys_flag_bits, bound) = last.as_ref().expect("set above");
            if queue >= *bound {
                break;
            }
            let queue_id = queue as i32;
            let Some(fields) = texts.check(false, topic, born_host) else {
                break;
            };
            let key = format!("{topic}-{queue_id}");
            let queue_offset = match offsets.get(&key) {
                Some(next) => *next,
                None => match queue_offsets.get_item(&key)? {
                    Some(value) => value.extract()?,
                    None => 0,
                },
            };
            let send = OneSend {
                header: &fields,
                properties: texts.i.unwrap_or(""),
                body,
                topic,
                queue_id,
                sys_flag_bits: *sys_flag_bits,
                born_host,
            };
            let at = At {
                position: position + wrote,
                room: room.saturating_sub(wrote),
                file_from_offset,
                queue_offset,
                store_timestamp,
                max_body,
            };
            let Some((stored, _, response)) =
                self.put_one(&send, &at, dst, language, i64::from(h.opaque), i64::from(h.version))?
            else {
                break;
            };
            responses.extend_from_slice(&response);
            offsets.insert(key, queue_offset + 1);
            match runs.last_mut() {
                Some((name, requests, size)) if name == topic => {
                    *requests += 1;
                    *size += stored;
                }
                _ => runs.push((topic.to_owned(), 1, stored)),
            }
            wrote += stored;
            pos += length;
        }
        let new_offsets = PyDict::new(py);
        for (key, next) in &offsets {
            new_offsets.set_item(key, next)?;
        }
        (
            pos - start.min(data.len()),
            wrote,
            PyBytes::new(py, &responses),
            new_offsets,
            PyList::new(py, runs)?,
            unknown,
        )
            .into_pyobject(py)
    }
}

/// One send to store (a single message, or a batch): its checked header fields and properties
/// text, its body, and where Python decided it goes.
struct OneSend<'a> {
    header: &'a SendFields,
    properties: &'a str,
    body: &'a [u8],
    topic: &'a str,
    queue_id: i32,
    sys_flag_bits: i32,
    born_host: &'a [u8],
}

impl<'a> OneSend<'a> {
    /// The stored sysFlag: the header's, with the bits Python decided on (e.g. the batch bit).
    fn sys_flag(&self) -> i32 {
        self.header.sys_flag | self.sys_flag_bits
    }

    /// The record of one of its messages (a single send's own body and flag, or a batch item's),
    /// stored by `store_host` with `properties`, its offsets left for stamping.
    fn record(&self, store_host: &'a [u8], body: &'a [u8], properties: &'a [u8], flag: i32) -> NewRecord<'a> {
        NewRecord {
            topic: self.topic.as_bytes(),
            body,
            properties,
            queue_id: self.queue_id,
            flag,
            sys_flag: self.sys_flag(),
            born_timestamp: self.header.born_timestamp,
            born_host: self.born_host,
            store_host,
            reconsume_times: self.header.reconsume_times,
            prepared_transaction_offset: 0,
            crc: None,
        }
    }
}

/// Where a put goes: `position` in the segment starting at CommitLog offset `file_from_offset`,
/// `room` bytes left to its end, the queue offset it takes, and the store's limits and clock.
struct At {
    position: usize,
    room: usize,
    file_from_offset: i64,
    queue_offset: i64,
    store_timestamp: i64,
    max_body: usize,
}

impl PlainSend {
    /// Store one single send into `dst` (the whole segment) as `put` describes: (bytes written,
    /// the offset message id, the SEND_OK frame), or None with nothing written when it is not
    /// plain after all or does not fit.
    fn put_one(
        &self,
        send: &OneSend<'_>,
        at: &At,
        dst: &mut [u8],
        language: &str,
        opaque: i64,
        version: i64,
    ) -> PyResult<Option<(usize, String, Vec<u8>)>> {
        if send.body.len() > at.max_body {
            return Ok(None);
        }
        let Some(properties) = stored_properties(send.properties, &self.cluster, &self.refused, false) else {
            return Ok(None);
        };
        let new = send.record(&self.store_host, send.body, properties.as_bytes(), send.header.flag);
        let Ok(length) = record::encoded_length(&new) else {
            return Ok(None);
        };
        if length + END_FILE_MIN_BLANK_LENGTH > at.room || length > at.max_body + record::ENCODE_HEADROOM {
            return Ok(None);
        }
        let physical_offset = at.file_from_offset + at.position as i64;
        // encoded and stamped off the mapping, then copied in at once
        let mut encoded = vec![0u8; length];
        record::encode_into(&new, &mut encoded);
        record::stamp_records(
            &mut encoded,
            1,
            at.queue_offset,
            physical_offset,
            at.store_timestamp,
            new.sys_flag,
            true,
        );
        copy_into(dst, at.position, &encoded)?;
        let msg_id = message_id(&self.store_host, physical_offset);
        let frame = self.frame(&msg_id, send.queue_id, at.queue_offset, language, opaque, version);
        Ok(Some((length, msg_id, frame)))
    }

    fn frame(
        &self,
        msg_id: &str,
        queue_id: i32,
        queue_offset: i64,
        language: &str,
        opaque: i64,
        version: i64,
    ) -> Vec<u8> {
        response_frame(
            &self.region,
            &self.trace,
            msg_id,
            queue_id,
            queue_offset,
            language,
            opaque,
            version,
        )
    }
}

/// The header fields of a plain send, as the reference decodes them.
struct SendFields {
    sys_flag: i32,
    born_timestamp: i64,
    flag: i32,
    reconsume_times: i32,
}

/// The texts of the SendMessageRequestHeaderV2 fields a plain send reads, by their V2 names:
/// producerGroup, topic, defaultTopic, defaultTopicQueueNums, queueId, sysFlag, bornTimestamp,
/// flag, properties, reconsumeTimes, unitMode, maxReconsumeTimes, batch. (Python's dict of the
/// header gives topic and queueId to the per-send puts as arguments: `b` and `e` stay None there.)
#[derive(Default)]
struct FieldTexts<'a> {
    a: Option<&'a str>,
    b: Option<&'a str>,
    c: Option<&'a str>,
    d: Option<&'a str>,
    e: Option<&'a str>,
    f: Option<&'a str>,
    g: Option<&'a str>,
    h: Option<&'a str>,
    i: Option<&'a str>,
    j: Option<&'a str>,
    k: Option<&'a str>,
    l: Option<&'a str>,
    m: Option<&'a str>,
}

impl<'a> FieldTexts<'a> {
    /// The texts of a header the native decoder decoded (every extField a string), in one pass: a
    /// name given twice keeps its last value, as Python's dict of the header does.
    fn of(ext: &'a [(Cow<'a, str>, Cow<'a, str>)]) -> Self {
        let mut texts = Self::default();
        for (key, value) in ext {
            let slot = match key.as_ref() {
                "a" => &mut texts.a,
                "b" => &mut texts.b,
                "c" => &mut texts.c,
                "d" => &mut texts.d,
                "e" => &mut texts.e,
                "f" => &mut texts.f,
                "g" => &mut texts.g,
                "h" => &mut texts.h,
                "i" => &mut texts.i,
                "j" => &mut texts.j,
                "k" => &mut texts.k,
                "l" => &mut texts.l,
                "m" => &mut texts.m,
                _ => continue,
            };
            *slot = Some(value.as_ref());
        }
        texts
    }

    /// The fields of a plain send (`batch`: a plain batch, whose header says so), or None when
    /// the reference would decode or treat them otherwise: a required field missing or not a
    /// number, a flag of the other kind of send, a transactional or IPv6 sysFlag, an IPv6
    /// producer, a topic too long.
    fn check(&self, batch: bool, topic: &str, born_host: &[u8]) -> Option<SendFields> {
        let number = |value: Option<&str>, (low, high): (i64, i64), required: bool| match value {
            Some(text) => parse_java_int(text, low, high),
            None if required => None,
            None => Some(0),
        };
        self.a?;
        self.c?;
        number(self.d, I32_RANGE, true)?;
        let sys_flag = number(self.f, I32_RANGE, true)? as i32;
        let born_timestamp = number(self.g, I64_RANGE, true)?;
        let flag = number(self.h, I32_RANGE, true)? as i32;
        let reconsume_times = number(self.j, I32_RANGE, false)? as i32;
        number(self.l, I32_RANGE, false)?;
        // unitMode and batch are bools the reference lowercases: ASCII only here; the batch flag
        // must say what kind of send this is
        for (value, is_batch_flag) in [(self.k, false), (self.m, true)] {
            let value = match value {
                Some(text) if !text.is_ascii() => return None,
                Some(text) => text.eq_ignore_ascii_case("true"),
                None => false,
            };
            if is_batch_flag && value != batch {
                return None;
            }
        }
        if sys_flag & (record::TRANSACTION_TYPE_MASK | record::SYS_FLAG_BORNHOST_V6 | record::SYS_FLAG_STOREHOST_V6)
            != 0
            || born_host.len() != 8
            || topic.len() > MAX_TOPIC_LENGTH_V1
        {
            return None;
        }
        Some(SendFields {
            sys_flag,
            born_timestamp,
            flag,
            reconsume_times,
        })
    }
}

/// A plain send's fields from Python's dict of its header (see [`FieldTexts::check`]) and its
/// properties text (None when absent), or None when not plain. A value that is not a `str`
/// counts as absent, except for properties, unitMode and batch, where it makes the send not
/// plain; so does a value that is not valid UTF-8 where a number, a bool or properties are read.
fn plain_header<'py>(
    py: Python<'py>,
    fields: &Bound<'py, PyAny>,
    batch: bool,
    topic: &str,
    born_host: &[u8],
) -> PyResult<Option<(SendFields, Option<Bound<'py, PyString>>)>> {
    let Ok(fields) = fields.cast_exact::<PyDict>() else {
        return Ok(None);
    };
    for name in [intern!(py, "i"), intern!(py, "k"), intern!(py, "m")] {
        if fields.contains(name)? && text(fields, name)?.is_none() {
            return Ok(None);
        }
    }
    let names = [
        intern!(py, "a"),
        intern!(py, "c"),
        intern!(py, "d"),
        intern!(py, "f"),
        intern!(py, "g"),
        intern!(py, "h"),
        intern!(py, "i"),
        intern!(py, "j"),
        intern!(py, "k"),
        intern!(py, "l"),
        intern!(py, "m"),
    ];
    let mut values: [Option<Bound<'py, PyString>>; 11] = Default::default();
    for (value, name) in values.iter_mut().zip(names) {
        *value = text(fields, name)?;
    }
    let mut texts: [Option<&str>; 11] = [None; 11];
    for (at, (slot, value)) in texts.iter_mut().zip(&values).enumerate() {
        if let Some(value) = value {
            match value.to_str() {
                Ok(text) => *slot = Some(text),
                // a producer group (a) or default topic (c) is only required to be there
                Err(_) if at < 2 => *slot = Some(""),
                Err(_) => return Ok(None),
            }
        }
    }
    let [a, c, d, f, g, h, i, j, k, l, m] = texts;
    let texts = FieldTexts {
        a,
        c,
        d,
        f,
        g,
        h,
        i,
        j,
        k,
        l,
        m,
        ..FieldTexts::default()
    };
    let Some(header) = texts.check(batch, topic, born_host) else {
        return Ok(None);
    };
    let properties = values[6].clone();
    Ok(Some((header, properties)))
}

/// A header's properties text from Python: "" when absent, None when it is not valid UTF-8 (then
/// the send is not plain).
fn properties_text<'a>(value: &'a Option<Bound<'_, PyString>>) -> Option<&'a str> {
    match value {
        Some(text) => text.to_str().ok(),
        None => Some(""),
    }
}

/// The writable bytes of a segment's mapping.
fn writable(view: &mut PyBuffer<u8>) -> PyResult<&mut [u8]> {
    if view.readonly() || !view.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "the segment mapping must be a writable contiguous buffer",
        ));
    }
    // SAFETY: the buffer stays exported while `view` lives and the interpreter lock is held
    // throughout (the caller also holds the CommitLog's put lock): nobody else touches it.
    Ok(unsafe { std::slice::from_raw_parts_mut(view.buf_ptr() as *mut u8, view.len_bytes()) })
}

/// Copy stamped records into the segment `dst` at `position`.
fn copy_into(dst: &mut [u8], position: usize, encoded: &[u8]) -> PyResult<()> {
    let Some(target) = dst.get_mut(position..position + encoded.len()) else {
        return Err(PyValueError::new_err(
            "the segment mapping must be a writable buffer holding the record",
        ));
    };
    target.copy_from_slice(encoded);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_drop_wait_true_and_append_the_cluster() {
        let refused = vec!["DELAY".to_string()];
        assert_eq!(
            stored_properties(
                "UNIQ_KEY\u{1}ab\u{2}WAIT\u{1}true\u{2}TAGS\u{1}T\u{2}",
                "C",
                &refused,
                false
            )
            .as_deref(),
            Some("UNIQ_KEY\u{1}ab\u{2}TAGS\u{1}T\u{2}CLUSTER\u{1}C")
        );
        assert_eq!(
            stored_properties("", "C", &refused, false).as_deref(),
            Some("CLUSTER\u{1}C")
        );
        assert_eq!(
            stored_properties("x\u{2}\u{1}ab\u{2}TAGS\u{1}T", "C", &refused, false).as_deref(),
            Some("TAGS\u{1}T\u{2}CLUSTER\u{1}C")
        );
        assert_eq!(stored_properties("DELAY\u{1}3", "C", &refused, false), None);
        assert_eq!(stored_properties("WAIT\u{1}false", "C", &refused, false), None);
        assert_eq!(stored_properties("A\u{1}1\u{2}A\u{1}2", "C", &refused, false), None);
    }

    #[test]
    fn a_batch_keeps_wait() {
        assert_eq!(
            stored_properties("WAIT\u{1}false\u{2}K\u{1}v", "C", &[], true).as_deref(),
            Some("WAIT\u{1}false\u{2}K\u{1}v\u{2}CLUSTER\u{1}C")
        );
    }

    fn item(flag: i32, body: &[u8], properties: &[u8]) -> Vec<u8> {
        let size = (20 + body.len() + 2 + properties.len()) as i32;
        let mut out = Vec::new();
        for field in [size, 0, 0, flag, body.len() as i32] {
            out.extend_from_slice(&field.to_be_bytes());
        }
        out.extend_from_slice(body);
        out.extend_from_slice(&(properties.len() as i16).to_be_bytes());
        out.extend_from_slice(properties);
        out
    }

    #[test]
    fn batch_items_append_the_batch_properties_and_count_the_wire_size() {
        let mut body = item(3, b"abc", b"TAGS\x01T\x02x\x02");
        body.extend(item(0, b"", b""));
        let (items, wire_size) = batch_items(&body, "CLUSTER\u{1}C").expect("well formed");
        assert_eq!(items.len(), 2);
        assert_eq!((items[0].flag, items[0].body), (3, &b"abc"[..]));
        assert_eq!(items[0].properties, "TAGS\u{1}T\u{2}CLUSTER\u{1}C");
        assert_eq!(items[1].properties, "CLUSTER\u{1}C");
        assert_eq!(wire_size, (22 + 3 + 6) + 22);
    }

    #[test]
    fn malformed_batch_bodies_are_none() {
        let good = item(0, b"abc", b"K\x01v");
        assert!(batch_items(&good[..good.len() - 1], "").is_none()); // truncated
        assert!(batch_items(&good[..19], "").is_none()); // a header cut short
        let mut negative = good.clone();
        negative[16..20].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(batch_items(&negative, "").is_none());
        assert!(batch_items(&item(0, b"", b"K\x01\xff"), "").is_none()); // not UTF-8
        assert!(batch_items(&item(0, b"", b"K\x011\x02K\x012"), "").is_none()); // a name twice
        assert_eq!(batch_items(b"", "").map(|(items, _)| items.len()), Some(0));
    }

    #[test]
    fn message_id_is_host_then_offset_in_upper_hex() {
        assert_eq!(
            message_id(&[127, 0, 0, 1, 0, 0, 0x27, 0x11], 0x1234),
            "7F00000100002711".to_owned() + "0000000000001234"
        );
    }
}
