//! Twin of `rocketstore.broker.grpc_v2.message_convert.received_message_response_python`: a stored
//! message as one ReceiveMessage response carries it, serialized (`apache.rocketmq.v2`).
//!
//! Building the response as protobuf objects and serializing them cost about a quarter of a
//! received message's CPU; here the mapping (user properties without RocketMQ's own keys, tag,
//! keys, message id, type, group, delivery time, trace context, MD5 body digest) writes the wire
//! form directly, fields in number order as upb writes them. The mapping rules stay those of the
//! Python twin, which the differential test holds this to; what is rare is left to it (a
//! compressed body, a delivery time that is not a plain integer): `None` says so.

use md5::{Digest, Md5};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyString};

/// MessageSysFlag.COMPRESSED_FLAG
const COMPRESSED: i64 = 0x1;
/// apache.rocketmq.v2 enum values
const DIGEST_MD5: u64 = 2;
const ENCODING_IDENTITY: u64 = 1;
const TYPE_NORMAL: u64 = 1;
const TYPE_FIFO: u64 = 2;
const TYPE_DELAY: u64 = 3;
const TYPE_TRANSACTION: u64 = 4;

const VARINT: u32 = 0;
const LENGTH_DELIMITED: u32 = 2;

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from((field << 3) | wire));
}

/// A length-delimited field, written whatever its length (a set optional or a sub-message).
fn bytes_field(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(out, field, LENGTH_DELIMITED);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// A proto3 string or bytes field without presence: left out when empty.
fn implicit_bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    if !data.is_empty() {
        bytes_field(out, field, data);
    }
}

/// An integer field (negative ones as ten-byte two's complement, as protobuf writes int32/int64).
fn int_field(out: &mut Vec<u8>, field: u32, value: i64) {
    tag(out, field, VARINT);
    varint(out, value as u64);
}

/// A proto3 integer field without presence: left out when 0.
fn implicit_int(out: &mut Vec<u8>, field: u32, value: i64) {
    if value != 0 {
        int_field(out, field, value);
    }
}

/// A Timestamp or Duration of `ms` milliseconds (floored to seconds, as the Python twin divides).
fn millis_message(ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    implicit_int(&mut out, 1, ms.div_euclid(1000));
    implicit_int(&mut out, 2, ms.rem_euclid(1000) * 1_000_000);
    out
}

fn upper_hex(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut text = String::with_capacity(digest.len() * 2);
    for byte in digest {
        text.push(HEX[usize::from(byte >> 4)] as char);
        text.push(HEX[usize::from(byte & 0xF)] as char);
    }
    text
}

/// The serialized `ReceiveMessageResponse{message}` of `stored` (a `StoredMessage`) delivered with
/// `receipt_handle` for the `attempt`-th time, invisible for `invisible_ms`; `system_keys` are the
/// property names that are not user properties. `None` when the Python twin must build it.
#[pyfunction]
#[pyo3(signature = (stored, *, receipt_handle, attempt, invisible_ms, store_host, system_keys))]
pub fn received_message_response<'py>(
    py: Python<'py>,
    stored: &Bound<'py, PyAny>,
    receipt_handle: &str,
    attempt: i32,
    invisible_ms: i64,
    store_host: &str,
    system_keys: &Bound<'py, PyFrozenSet>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let sys_flag: i64 = stored.getattr(pyo3::intern!(py, "sys_flag"))?.extract()?;
    if sys_flag & COMPRESSED != 0 {
        return Ok(None);
    }
    let props_any = stored.getattr(pyo3::intern!(py, "properties"))?;
    let props = props_any.cast::<PyDict>()?;
    let get = |key: &str| -> PyResult<Option<String>> {
        match props.get_item(key)? {
            Some(value) => Ok(Some(value.extract()?)),
            None => Ok(None),
        }
    };
    let delivery_ms = match get("TIMER_DELIVER_MS")? {
        Some(text) => match text.parse::<i64>() {
            Ok(ms) => Some(ms),
            Err(_) => return Ok(None), // int() takes more forms (spaces, '+', '_'); the twin decides
        },
        None => None,
    };
    let tag_value = get("TAGS")?;
    let keys = get("KEYS")?;
    let group = get("__SHARDINGKEY")?;
    let trace = get("TRACE_CONTEXT")?;
    let message_id: String = match get("UNIQ_KEY")? {
        Some(id) if !id.is_empty() => id,
        _ => stored.getattr(pyo3::intern!(py, "msg_id"))?.extract()?,
    };
    let message_type = if get("TRAN_MSG")?.as_deref() == Some("true") {
        TYPE_TRANSACTION
    } else if group.is_some() {
        TYPE_FIFO
    } else if delivery_ms.is_some() || props.contains("DELAY")? {
        TYPE_DELAY
    } else {
        TYPE_NORMAL
    };
    let body_any = stored.getattr(pyo3::intern!(py, "body"))?;
    let body = body_any.cast::<PyBytes>()?.as_bytes();
    let topic_any = stored.getattr(pyo3::intern!(py, "topic"))?;
    let topic = topic_any.cast::<PyString>()?.to_str()?;
    let born_host_any = stored
        .getattr(pyo3::intern!(py, "born_host"))?
        .getattr(pyo3::intern!(py, "host"))?;
    let born_host = born_host_any.cast::<PyString>()?.to_str()?;
    let born_ms: i64 = stored.getattr(pyo3::intern!(py, "born_timestamp"))?.extract()?;
    let store_ms: i64 = stored.getattr(pyo3::intern!(py, "store_timestamp"))?.extract()?;
    let queue_id: i32 = stored.getattr(pyo3::intern!(py, "queue_id"))?.extract()?;
    let queue_offset: i64 = stored.getattr(pyo3::intern!(py, "queue_offset"))?.extract()?;

    let mut system = Vec::with_capacity(256 + receipt_handle.len());
    if let Some(tag_value) = &tag_value {
        bytes_field(&mut system, 1, tag_value.as_bytes());
    }
    for key in keys.as_deref().unwrap_or("").split(' ').filter(|k| !k.is_empty()) {
        bytes_field(&mut system, 2, key.as_bytes());
    }
    implicit_bytes(&mut system, 3, message_id.as_bytes());
    let mut digest = Vec::with_capacity(36);
    implicit_int(&mut digest, 1, DIGEST_MD5 as i64);
    implicit_bytes(&mut digest, 2, upper_hex(&Md5::digest(body)).as_bytes());
    bytes_field(&mut system, 4, &digest);
    implicit_int(&mut system, 5, ENCODING_IDENTITY as i64);
    implicit_int(&mut system, 6, message_type as i64);
    bytes_field(&mut system, 7, &millis_message(born_ms));
    implicit_bytes(&mut system, 8, born_host.as_bytes());
    bytes_field(&mut system, 9, &millis_message(store_ms));
    implicit_bytes(&mut system, 10, store_host.as_bytes());
    if let Some(ms) = delivery_ms {
        bytes_field(&mut system, 11, &millis_message(ms));
    }
    bytes_field(&mut system, 12, receipt_handle.as_bytes());
    implicit_int(&mut system, 13, i64::from(queue_id));
    int_field(&mut system, 14, queue_offset);
    bytes_field(&mut system, 15, &millis_message(invisible_ms));
    int_field(&mut system, 16, i64::from(attempt));
    if let Some(group) = &group {
        bytes_field(&mut system, 17, group.as_bytes());
    }
    if let Some(trace) = &trace {
        bytes_field(&mut system, 18, trace.as_bytes());
    }

    let mut message = Vec::with_capacity(system.len() + body.len() + topic.len() + 64);
    let mut resource = Vec::with_capacity(topic.len() + 2);
    implicit_bytes(&mut resource, 2, topic.as_bytes());
    bytes_field(&mut message, 1, &resource);
    let mut entry = Vec::new();
    for (key, value) in props.iter() {
        if system_keys.contains(&key)? {
            continue;
        }
        let key = key.cast::<PyString>()?.to_str()?;
        let value = value.cast::<PyString>()?.to_str()?;
        entry.clear();
        bytes_field(&mut entry, 1, key.as_bytes()); // a map entry carries both fields, as upb writes it
        bytes_field(&mut entry, 2, value.as_bytes());
        bytes_field(&mut message, 2, &entry);
    }
    bytes_field(&mut message, 3, &system);
    implicit_bytes(&mut message, 4, body);

    let mut response = Vec::with_capacity(message.len() + 6);
    bytes_field(&mut response, 2, &message);
    Ok(Some(PyBytes::new(py, &response)))
}
