//! A plain SEND_MESSAGE_V2 in one call: from the request's extFields and body to the stamped
//! record in the mapped CommitLog segment and the encoded SEND_OK response frame.
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

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::java::parse_java_int;
use crate::record::{self, property_items, NewRecord, END_FILE_MIN_BLANK_LENGTH};
use crate::remoting::encode_json_header;

const I32_RANGE: (i64, i64) = (i32::MIN as i64, i32::MAX as i64);
const I64_RANGE: (i64, i64) = (i64::MIN, i64::MAX);
const MAX_TOPIC_LENGTH_V1: usize = 127;
const RPC_TYPE_RESPONSE: i64 = 1;
const SUCCESS: i64 = 0;

/// The stored properties of a plain send, or None when the request's properties are not plain:
/// one of `refused` names present, a name twice (the reference keeps the first one's place and
/// the last one's value), or `WAIT` with a value other than `true` (kept and acted upon there).
/// Items `string_to_properties` skips (shorter than 3 characters, no non-empty name and value
/// around the first `\x01`) are skipped here too.
pub fn stored_properties(text: &str, cluster: &str, refused: &[String]) -> Option<String> {
    let mut out = String::with_capacity(text.len() + cluster.len() + 9);
    let mut names: Vec<&str> = Vec::with_capacity(8);
    for (item, name, value) in property_items(text) {
        if names.contains(&name) || refused.iter().any(|r| r == name) {
            return None;
        }
        names.push(name);
        if name == "WAIT" {
            if value != "true" {
                return None;
            }
            continue;
        }
        out.push_str(item);
        out.push('\u{2}');
    }
    out.push_str("CLUSTER\u{1}");
    out.push_str(cluster);
    Some(out)
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

/// What stays the same for every send of one broker: set up once, used per send.
#[pyclass(module = "rocketstore.common._native", frozen)]
pub struct PlainSend {
    cluster: String,
    store_host: Vec<u8>,
    refused: Vec<String>,
    region: String,
    trace: String,
}

/// The field's text; None when it is missing or not a `str`. Names are interned strings: a
/// lookup by a Rust `&str` would make a Python string of it on every send.
fn text<'py>(fields: &Bound<'py, PyDict>, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyString>>> {
    Ok(match fields.get_item(name)? {
        Some(value) => value.cast_exact::<PyString>().ok().cloned(),
        None => None,
    })
}

fn number<'py>(
    fields: &Bound<'py, PyDict>,
    name: &Bound<'py, PyString>,
    (low, high): (i64, i64),
    required: bool,
) -> PyResult<Option<i64>> {
    match text(fields, name)? {
        Some(value) => Ok(value.to_str().ok().and_then(|t| parse_java_int(t, low, high))),
        None if required => Ok(None),
        None => Ok(Some(0)),
    }
}

#[pymethods]
impl PlainSend {
    /// `refused`: the property names whose presence makes a send not plain (a delay level, a
    /// timer, a transaction, a CLUSTER of the client's own).
    #[new]
    fn new(
        cluster: String,
        store_host: Vec<u8>,
        refused: Vec<String>,
        region: String,
        trace_on: bool,
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
        })
    }

    /// Put one plain SEND_MESSAGE_V2 at `position` of `mapping` (a segment starting at CommitLog
    /// offset `file_from_offset`, `room` bytes left to its end): (bytes written, the response
    /// frame, the offset message id), or None with nothing written when the send is not plain
    /// after all.
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
    ) -> PyResult<Option<(usize, Bound<'py, PyBytes>, String)>> {
        let Ok(fields) = fields.cast_exact::<PyDict>() else {
            return Ok(None);
        };
        // the required fields of SendMessageRequestHeaderV2 the reference decodes
        for name in [intern!(py, "a"), intern!(py, "c")] {
            if text(fields, name)?.is_none() {
                return Ok(None);
            }
        }
        let (Some(_), Some(sys_flag), Some(born_timestamp), Some(flag), Some(reconsume_times)) = (
            number(fields, intern!(py, "d"), I32_RANGE, true)?,
            number(fields, intern!(py, "f"), I32_RANGE, true)?,
            number(fields, intern!(py, "g"), I64_RANGE, true)?,
            number(fields, intern!(py, "h"), I32_RANGE, true)?,
            number(fields, intern!(py, "j"), I32_RANGE, false)?,
        ) else {
            return Ok(None);
        };
        if number(fields, intern!(py, "l"), I32_RANGE, false)?.is_none() {
            return Ok(None);
        }
        // unitMode and batch are bools the reference lowercases: ASCII only here, and no batch
        for (name, batch) in [(intern!(py, "k"), false), (intern!(py, "m"), true)] {
            if !fields.contains(name)? {
                continue;
            }
            let Some(value) = text(fields, name)? else {
                return Ok(None);
            };
            let Ok(value) = value.to_str() else { return Ok(None) };
            if !value.is_ascii() || batch && value.eq_ignore_ascii_case("true") {
                return Ok(None);
            }
        }
        let sys_flag = sys_flag as i32;
        if sys_flag & (record::TRANSACTION_TYPE_MASK | record::SYS_FLAG_BORNHOST_V6 | record::SYS_FLAG_STOREHOST_V6)
            != 0
            || born_host.len() != 8
            || topic.len() > MAX_TOPIC_LENGTH_V1
            || body.len() > max_body
        {
            return Ok(None);
        }
        let properties_name = intern!(py, "i");
        let properties = match text(fields, properties_name)? {
            Some(value) => {
                let Ok(value) = value.to_str() else { return Ok(None) };
                stored_properties(value, &self.cluster, &self.refused)
            }
            None if fields.contains(properties_name)? => None,
            None => stored_properties("", &self.cluster, &self.refused),
        };
        let Some(properties) = properties else { return Ok(None) };
        let new = NewRecord {
            topic: topic.as_bytes(),
            body,
            properties: properties.as_bytes(),
            queue_id,
            flag: flag as i32,
            sys_flag: sys_flag | sys_flag_bits,
            born_timestamp,
            born_host,
            store_host: &self.store_host,
            reconsume_times: reconsume_times as i32,
            prepared_transaction_offset: 0,
            crc: None,
        };
        let Ok(length) = record::encoded_length(&new) else {
            return Ok(None);
        };
        if length + END_FILE_MIN_BLANK_LENGTH > room || length > max_body + record::ENCODE_HEADROOM {
            return Ok(None);
        }
        let physical_offset = file_from_offset + position as i64;
        // encoded and stamped off the mapping, then copied in at once
        let mut encoded = vec![0u8; length];
        record::encode_into(&new, &mut encoded);
        record::stamp_records(
            &mut encoded,
            1,
            queue_offset,
            physical_offset,
            store_timestamp,
            new.sys_flag,
            true,
        );
        let view = PyBuffer::<u8>::get(mapping)?;
        if view.readonly() || !view.is_c_contiguous() || position + length > view.len_bytes() {
            return Err(PyValueError::new_err(
                "the segment mapping must be a writable buffer holding the record",
            ));
        }
        // SAFETY: the buffer stays exported while `view` lives, the interpreter lock is held
        // throughout and the range was checked against its length.
        unsafe {
            std::ptr::copy_nonoverlapping(encoded.as_ptr(), (view.buf_ptr() as *mut u8).add(position), length);
        }
        let msg_id = message_id(&self.store_host, physical_offset);
        let frame = response_frame(
            &self.region,
            &self.trace,
            &msg_id,
            queue_id,
            queue_offset,
            language,
            opaque,
            version,
        );
        Ok(Some((length, PyBytes::new(py, &frame), msg_id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_drop_wait_true_and_append_the_cluster() {
        let refused = vec!["DELAY".to_string()];
        assert_eq!(
            stored_properties("UNIQ_KEY\u{1}ab\u{2}WAIT\u{1}true\u{2}TAGS\u{1}T\u{2}", "C", &refused).as_deref(),
            Some("UNIQ_KEY\u{1}ab\u{2}TAGS\u{1}T\u{2}CLUSTER\u{1}C")
        );
        assert_eq!(stored_properties("", "C", &refused).as_deref(), Some("CLUSTER\u{1}C"));
        assert_eq!(
            stored_properties("x\u{2}\u{1}ab\u{2}TAGS\u{1}T", "C", &refused).as_deref(),
            Some("TAGS\u{1}T\u{2}CLUSTER\u{1}C")
        );
        assert_eq!(stored_properties("DELAY\u{1}3", "C", &refused), None);
        assert_eq!(stored_properties("WAIT\u{1}false", "C", &refused), None);
        assert_eq!(stored_properties("A\u{1}1\u{2}A\u{1}2", "C", &refused), None);
    }

    #[test]
    fn message_id_is_host_then_offset_in_upper_hex() {
        assert_eq!(
            message_id(&[127, 0, 0, 1, 0, 0, 0x27, 0x11], 0x1234),
            "7F00000100002711".to_owned() + "0000000000001234"
        );
    }
}
