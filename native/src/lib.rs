//! `rocketstore.common._native`: RocketStore's per-message hot path in Rust.
//!
//! Python keeps the logic (locks, segment rolling, recovery decisions); these functions do the
//! per-message byte work. Each has a pure-Python twin, named in its doc, that stays the
//! reference: the differential tests hold them byte-identical, and `ROCKETSTORE_NATIVE=0`
//! runs the twins instead. Work over mapped segments runs without the interpreter lock.
//!
//! `received_message_response` (grpc_convert.rs) is the gRPC port's per-message conversion, twin of
//! the Python one in `message_convert`.
//!
//! `pull_messages` (pull.rs) is a PULL_MESSAGE of a tag subscription from the ConsumeQueue entries to
//! the response frame, twin of `rocketstore.store.pull_transfer.pull_messages_python`.
//!
//! `PlainSend` (send.rs) is a plain SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE from its extFields to the
//! stamped record(s) in the mapped CommitLog and the response frame; its reference is the send path
//! it shortcuts.
//!
//! `PullServe` (pull_serve.rs) serves the PULL_MESSAGE requests a connection's read starts with, from
//! the frame to the SUCCESS response; its reference is the pull path it shortcuts.
//!
//! `GrpcFront` (grpc_front.rs) is not a per-message function but the gRPC port's transport (HTTP/2 on
//! a thread of its own); its pure-Python counterpart is grpcio, which `ROCKETSTORE_NATIVE=0` serves.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

pub mod dispatch;
mod front_thread;
pub mod grpc_convert;
pub mod grpc_front;
mod handoff;
pub mod index;
pub mod java;
pub mod pull;
pub mod pull_serve;
pub mod record;
pub mod remoting;
pub mod remoting_front;
pub mod send;

/// Work below these sizes keeps the interpreter lock. Giving it up is cheap, taking it back is
/// not: while another thread runs Python (a writer, the event loop), the taker waits for that
/// thread's switch interval (5 ms by default), and a dispatch pass would pay that twice.
/// Small passes (the steady state) finish in microseconds, so they run straight through; large
/// ones (catching up after a burst, recovery) let the writers run meanwhile.
const DETACH_MIN_SCAN_BYTES: usize = 1 << 20;
const DETACH_MIN_INDEX_ENTRIES: usize = 2048;

/// A buffer's memory as an address and length, so that it can cross into code running without
/// the interpreter lock; the `PyBuffer` it came from stays alive (and the memory exported) meanwhile.
fn contiguous(view: &PyBuffer<u8>, what: &str) -> PyResult<(usize, usize)> {
    if !view.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{what} must be a contiguous buffer")));
    }
    Ok((view.buf_ptr() as usize, view.len_bytes()))
}

/// Twin of `rocketstore.common.message.encode_record`: a record with queueOffset,
/// physicalOffset and storeTimestamp left 0 for the put lock to stamp.
#[pyfunction]
#[pyo3(signature = (*, topic_data, body, properties_data, queue_id, flag, sys_flag, born_timestamp, born_host,
                    store_host, reconsume_times, prepared_transaction_offset, crc=None))]
#[allow(clippy::too_many_arguments)]
fn encode_record<'py>(
    py: Python<'py>,
    topic_data: &[u8],
    body: &Bound<'py, PyAny>,
    properties_data: &[u8],
    queue_id: i32,
    flag: i32,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: &[u8],
    store_host: &[u8],
    reconsume_times: i32,
    prepared_transaction_offset: i64,
    crc: Option<i32>,
) -> PyResult<Bound<'py, PyByteArray>> {
    let body_view = PyBuffer::<u8>::get(body)?;
    let (ptr, len) = contiguous(&body_view, "body")?;
    // SAFETY: the exported buffer stays valid while `body_view` lives, and nothing here releases
    // the interpreter lock, so no Python code can resize the object meanwhile.
    let body_bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    let new = record::NewRecord {
        topic: topic_data,
        body: body_bytes,
        properties: properties_data,
        queue_id,
        flag,
        sys_flag,
        born_timestamp,
        born_host,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        crc,
    };
    let length = record::encoded_length(&new).map_err(PyValueError::new_err)?;
    PyByteArray::new_with(py, length, |out| {
        record::encode_into(&new, out);
        Ok(())
    })
}

/// [`remoting::leading_json_code`]: the request code of the JSON-headed frame at the head of a
/// connection's read, None for any other (a hint, see there).
#[pyfunction]
fn leading_json_code(data: &[u8]) -> Option<i64> {
    remoting::leading_json_code(data)
}

/// Twin of `rocketstore.common.message.encode_batch_records_python`: the records of a batch put
/// back to back, their count and the batch's wire size; None when an item's properties, with the
/// batch's appended, would not fit a record.
#[pyfunction]
#[pyo3(signature = (items, batch_properties, *, topic_data, queue_id, sys_flag, born_timestamp, born_host,
                    store_host, reconsume_times))]
#[allow(clippy::too_many_arguments)]
fn encode_batch_records<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyAny>,
    batch_properties: &[u8],
    topic_data: &[u8],
    queue_id: i32,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: &[u8],
    store_host: &[u8],
    reconsume_times: i32,
) -> PyResult<Option<(Bound<'py, PyByteArray>, usize, usize)>> {
    let mut bodies: Vec<PyBuffer<u8>> = Vec::new();
    let mut flags: Vec<i32> = Vec::new();
    let mut properties: Vec<Vec<u8>> = Vec::new();
    let mut wire_size = 0usize;
    for item in items.try_iter()? {
        let (body, flag, item_properties): (Bound<'py, PyAny>, i32, Bound<'py, PyString>) = item?.extract()?;
        let own = item_properties.to_str()?.as_bytes();
        let view = PyBuffer::<u8>::get(&body)?;
        contiguous(&view, "a batch item body")?;
        wire_size += 20 + view.len_bytes() + 2 + own.len();
        let mut props = own.to_vec();
        if !props.is_empty() && !batch_properties.is_empty() && props.last() != Some(&2) {
            props.push(2);
        }
        props.extend_from_slice(batch_properties);
        if props.len() > i16::MAX as usize {
            return Ok(None);
        }
        bodies.push(view);
        flags.push(flag);
        properties.push(props);
    }
    let mut records = Vec::with_capacity(bodies.len());
    let mut total = 0usize;
    for ((view, flag), props) in bodies.iter().zip(&flags).zip(&properties) {
        // SAFETY: the interpreter lock is held throughout, and `bodies` keeps each export alive.
        let body = unsafe { std::slice::from_raw_parts(view.buf_ptr() as *const u8, view.len_bytes()) };
        let new = record::NewRecord {
            topic: topic_data,
            body,
            properties: props,
            queue_id,
            flag: *flag,
            sys_flag,
            born_timestamp,
            born_host,
            store_host,
            reconsume_times,
            prepared_transaction_offset: 0,
            crc: None,
        };
        let length = record::encoded_length(&new).map_err(PyValueError::new_err)?;
        total += length;
        records.push((new, length));
    }
    let payload = PyByteArray::new_with(py, total, |out| {
        let mut pos = 0;
        for (new, length) in &records {
            record::encode_into(new, &mut out[pos..pos + length]);
            pos += length;
        }
        Ok(())
    })?;
    Ok(Some((payload, records.len(), wire_size)))
}

/// Twin of `rocketstore.common.message.stamp_records_python`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn stamp_records(
    payload: &Bound<'_, PyByteArray>,
    count: usize,
    queue_offset: i64,
    physical_offset: i64,
    store_timestamp: i64,
    sys_flag: i32,
    counts_in_queue: bool,
) -> PyResult<()> {
    // SAFETY: the interpreter lock is held and nothing here runs Python code, so the bytearray
    // cannot be resized while this slice lives.
    let data = unsafe { payload.as_bytes_mut() };
    if record::stamp_records(
        data,
        count,
        queue_offset,
        physical_offset,
        store_timestamp,
        sys_flag,
        counts_in_queue,
    ) {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "the payload does not hold {count} whole records"
        )))
    }
}

/// Twin of `rocketstore.store.dispatch_scan.scan_python`: one dispatch pass over `buf`.
#[pyfunction]
fn scan_dispatch<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    start: usize,
    limit: usize,
    max_records: usize,
    index_enabled: bool,
    delay_levels_ms: Vec<i64>,
) -> PyResult<Bound<'py, PyTuple>> {
    let view = PyBuffer::<u8>::get(buf)?;
    let (ptr, len) = contiguous(&view, "the segment")?;
    let run = move || {
        // SAFETY: `view` keeps the mapping exported (it cannot be closed or resized) until this
        // returns; the writer only appends past the published write position, above `limit`,
        // and the scan reads whole records below it.
        let data = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        dispatch::scan(data, start, limit, max_records, index_enabled, &delay_levels_ms)
    };
    let found = if limit.saturating_sub(start) >= DETACH_MIN_SCAN_BYTES {
        py.detach(run)
    } else {
        run()
    };
    let runs = PyList::empty(py);
    for run in &found.runs {
        runs.append((
            run.topic.as_str(),
            run.queue_id,
            run.first_queue_offset,
            run.count,
            PyBytes::new(py, &run.entries),
            run.last_store_timestamp,
        ))?;
    }
    (
        found.end_pos,
        found.records,
        found.end_kind,
        found.reason.as_str(),
        runs,
        PyBytes::new(py, &found.index_entries),
        found.last_queue_timestamp,
    )
        .into_pyobject(py)
}

/// Twin of `rocketstore.store.index_file.put_index_entries_python`: index keys into a mapped file.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn put_index_entries<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    hash_slot_num: i64,
    index_num: i64,
    entries: &[u8],
    start: usize,
    skip_below: i64,
    header: index::Header,
) -> PyResult<(usize, index::Header)> {
    let view = PyBuffer::<u8>::get(buf)?;
    if view.readonly() {
        return Err(PyValueError::new_err("the index file buffer is read-only"));
    }
    let (ptr, len) = contiguous(&view, "the index file")?;
    index::validate(len, hash_slot_num, index_num, entries.len(), start, &header).map_err(PyValueError::new_err)?;
    let run = move || {
        // SAFETY: as in scan_dispatch; IndexFile holds its lock around this call, so this is the
        // only writer, and readers of the file take the same lock.
        let data = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
        index::put_entries(data, hash_slot_num, index_num, entries, start, skip_below, header)
    };
    let count = (entries.len() - start) / 20;
    Ok(if count >= DETACH_MIN_INDEX_ENTRIES {
        py.detach(run)
    } else {
        run()
    })
}

/// The CommitLog segments a pull reads: found through the Python `find_segment`
/// (`MappedFileQueue.find_mapped_file_by_offset`) and held, as the Python path holds a segment
/// while it copies from it (RocketMQ's ReferenceResource), until the frame is assembled.
struct HeldSegments<'py> {
    find_segment: Bound<'py, PyAny>,
    file_size: i64,
    held: Vec<HeldSegment<'py>>,
    error: Option<PyErr>,
}

struct HeldSegment<'py> {
    mapped: Bound<'py, PyAny>,
    view: PyBuffer<u8>,
    from: i64,
    read_position: i64,
}

impl<'py> HeldSegments<'py> {
    fn hold(&mut self, offset: i64) -> PyResult<Option<(usize, i64)>> {
        let mapped = self.find_segment.call1((offset,))?;
        if mapped.is_none() || !mapped.call_method0("hold")?.extract::<bool>()? {
            return Ok(None);
        }
        let described = (|| -> PyResult<(PyBuffer<u8>, i64, i64)> {
            let view = PyBuffer::<u8>::get(&mapped.getattr("buffer")?)?;
            contiguous(&view, "a CommitLog segment")?;
            let from: i64 = mapped.getattr("file_from_offset")?.extract()?;
            let read_position: i64 = mapped.getattr("read_position")?.extract()?;
            if read_position < 0 || read_position as usize > view.len_bytes() {
                return Err(PyValueError::new_err(
                    "a CommitLog segment's read position is outside its mapping",
                ));
            }
            Ok((view, from, read_position))
        })();
        let (view, from, read_position) = match described {
            Ok(found) => found,
            Err(err) => {
                mapped.call_method0("release")?;
                return Err(err);
            }
        };
        self.held.push(HeldSegment {
            mapped,
            view,
            from,
            read_position,
        });
        Ok(Some((self.held.len() - 1, read_position)))
    }

    fn data(&self, segment: usize) -> &[u8] {
        let view = &self.held[segment].view;
        // SAFETY: the interpreter lock is held for the whole pull and the segment is held (its
        // mapping cannot be closed while `view` exports it); the writer only appends past the
        // read position, and records are read below it.
        unsafe { std::slice::from_raw_parts(view.buf_ptr() as *const u8, view.len_bytes()) }
    }

    /// Let every segment go: the buffer export first, since the last release may unmap it.
    fn release(self) -> PyResult<()> {
        let mut outcome = match self.error {
            Some(err) => Err(err),
            None => Ok(()),
        };
        for segment in self.held {
            drop(segment.view);
            if let Err(err) = segment.mapped.call_method0("release") {
                outcome = outcome.and(Err(err));
            }
        }
        outcome
    }
}

impl pull::Segments for HeldSegments<'_> {
    fn find(&mut self, offset: i64) -> Option<(usize, i64)> {
        let file_size = self.file_size;
        if let Some(index) = self
            .held
            .iter()
            .position(|s| s.from <= offset && i128::from(offset) < i128::from(s.from) + i128::from(file_size))
        {
            return Some((index, self.held[index].read_position));
        }
        if self.error.is_some() {
            return None;
        }
        self.hold(offset).unwrap_or_else(|err| {
            self.error = Some(err);
            None
        })
    }
}

/// Twin of `rocketstore.store.pull_transfer.pull_messages_python`: (walk status, entries consumed,
/// records picked, their bytes, suggest pulling from a slave, the SUCCESS frame when `frame` is given
/// and records were found; the queue's `min_offset` and `max_offset` go into its header).
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn pull_messages<'py>(
    py: Python<'py>,
    entries: &[u8],
    queue_offset: i64,
    commit_log: &Bound<'py, PyAny>,
    tag_codes: Option<Vec<i64>>,
    limits: (i64, i64, i64, i64, i64, i64, i64),
    frame: Option<(i64, String, i64, i64, i64)>,
    min_offset: i64,
    max_offset: i64,
) -> PyResult<(u8, i64, usize, i64, bool, Option<Bound<'py, PyBytes>>)> {
    let find_segment = commit_log
        .getattr("mapped_file_queue")?
        .getattr("find_mapped_file_by_offset")?;
    let file_size: i64 = commit_log.getattr("settings")?.getattr("file_size")?.extract()?;
    if file_size <= 0 {
        return Err(PyValueError::new_err("the CommitLog segment size must be positive"));
    }
    let limits = pull::Limits {
        max_msg_nums: limits.0,
        max_bytes_in_memory: limits.1,
        max_count_in_memory: limits.2,
        max_bytes_in_disk: limits.3,
        max_count_in_disk: limits.4,
        max_offset_py: limits.5,
        in_memory_bytes: limits.6,
    };
    if !entries.len().is_multiple_of(pull::CQ_STORE_UNIT_SIZE) {
        return Err(PyValueError::new_err(
            "the ConsumeQueue entries must be whole 20-byte entries",
        ));
    }
    let mut segments = HeldSegments {
        find_segment,
        file_size,
        held: Vec::new(),
        error: None,
    };
    let walk = pull::walk(entries, tag_codes.as_deref(), &limits, file_size, &mut segments);
    let from_slave = pull::suggest_pulling_from_slave(&walk, &limits);
    let assembled = match frame {
        Some((opaque, language, version, suggest_when_slow, suggest_otherwise))
            if walk.status == pull::WalkStatus::Found && segments.error.is_none() =>
        {
            let header = pull::response_header(
                &walk,
                queue_offset,
                from_slave,
                &pull::FrameHeader {
                    opaque,
                    language,
                    version,
                    min_offset,
                    max_offset,
                    suggest_when_slow,
                    suggest_otherwise,
                },
            );
            let total = 8 + header.len() + walk.total as usize;
            match (i32::try_from(total - 4), i32::try_from(header.len())) {
                (Ok(length), Ok(header_length)) => Some(PyBytes::new_with(py, total, |out| {
                    out[..4].copy_from_slice(&length.to_be_bytes());
                    out[4..8].copy_from_slice(&header_length.to_be_bytes());
                    out[8..8 + header.len()].copy_from_slice(&header);
                    let mut pos = 8 + header.len();
                    for record in &walk.picked {
                        let data = segments.data(record.segment);
                        out[pos..pos + record.len].copy_from_slice(&data[record.start..record.start + record.len]);
                        pos += record.len;
                    }
                    Ok(())
                })),
                _ => Some(Err(PyValueError::new_err("the pull's response frame would pass 2 GiB"))),
            }
        }
        _ => None,
    };
    segments.release()?;
    let frame = assembled.transpose()?;
    Ok((
        walk.status as u8,
        walk.consumed,
        walk.picked.len(),
        walk.total,
        from_slave,
        frame,
    ))
}

/// Fast path of `rocketstore.remoting.command.decode_frame`: (code, language, version, opaque,
/// flag, remark, extFields, body, serialize type) of a usual frame, or None for anything else
/// (Python then decodes it, or raises the ProtocolError that names what is wrong).
#[pyfunction]
fn decode_frame<'py>(py: Python<'py>, frame: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let view = PyBuffer::<u8>::get(frame)?;
    let (ptr, len) = contiguous(&view, "the frame")?;
    // SAFETY: the interpreter lock is held throughout, so the exporter cannot change or free it.
    let data = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    let Some((serialize, header, body)) = remoting::split(data) else {
        return Ok(None);
    };
    let Some(h) = remoting::decode_header(serialize, header) else {
        return Ok(None);
    };
    header_fields(py, &h, body, serialize).map(Some)
}

/// The fields tuple of `decode_frame` for a decoded header and its body (the remoting front hands
/// Python the same tuple).
pub(crate) fn header_fields<'py>(
    py: Python<'py>,
    h: &remoting::Header<'_>,
    body: &[u8],
    serialize: u8,
) -> PyResult<Bound<'py, PyTuple>> {
    let ext = PyDict::new(py);
    for (key, value) in &h.ext_fields {
        ext.set_item(key.as_ref(), value.as_ref())?;
    }
    let language = match &h.language {
        remoting::Language::Name(name) => PyString::new(py, name).into_any(),
        remoting::Language::Code(code) => code.into_pyobject(py)?.into_any(),
    };
    let fields = (
        h.code,
        language,
        h.version,
        h.opaque,
        h.flag,
        h.remark.as_deref(),
        ext,
        PyBytes::new(py, body),
        serialize,
    );
    fields.into_pyobject(py)
}

/// An int that is not a bool, as the JSON encoder writes it; None for anything else.
fn plain_int(value: &Bound<'_, PyAny>) -> Option<i64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return None;
    }
    value.extract().ok()
}

/// Fast path of `rocketstore.remoting.command.encode_frame` for JSON headers: the whole frame,
/// or None when a field is not of the usual type (Python's general path then encodes it).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode_json_frame<'py>(
    py: Python<'py>,
    code: &Bound<'py, PyAny>,
    ext_fields: &Bound<'py, PyAny>,
    flag: &Bound<'py, PyAny>,
    language: &str,
    opaque: &Bound<'py, PyAny>,
    remark: &Bound<'py, PyAny>,
    version: &Bound<'py, PyAny>,
    body: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let (Some(code), Some(flag), Some(opaque), Some(version)) =
        (plain_int(code), plain_int(flag), plain_int(opaque), plain_int(version))
    else {
        return Ok(None);
    };
    let Ok(ext) = ext_fields.cast_exact::<PyDict>() else {
        return Ok(None);
    };
    let mut owned: Vec<(Bound<'py, PyString>, Bound<'py, PyString>)> = Vec::with_capacity(ext.len());
    for (key, value) in ext.iter() {
        let (Ok(key), Ok(value)) = (key.cast_exact::<PyString>(), value.cast_exact::<PyString>()) else {
            return Ok(None);
        };
        owned.push((key.clone(), value.clone()));
    }
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(owned.len());
    for (key, value) in &owned {
        let (Ok(key), Ok(value)) = (key.to_str(), value.to_str()) else {
            return Ok(None);
        }; // lone surrogates
        pairs.push((key, value));
    }
    let remark_text = if remark.is_none() {
        None
    } else if let Ok(text) = remark.cast_exact::<PyString>() {
        let Ok(text) = text.to_str() else { return Ok(None) };
        Some(text)
    } else {
        return Ok(None);
    };
    let header = remoting::encode_json_header(code, &pairs, flag, language, opaque, remark_text, version);
    let body_view = PyBuffer::<u8>::get(body)?;
    let (ptr, len) = contiguous(&body_view, "body")?;
    // SAFETY: the interpreter lock is held throughout.
    let body_bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    let total = 8 + header.len() + body_bytes.len();
    let (Ok(length), Ok(header_length)) = (i32::try_from(total - 4), i32::try_from(header.len())) else {
        return Ok(None);
    };
    Ok(Some(PyBytes::new_with(py, total, |out| {
        out[..4].copy_from_slice(&length.to_be_bytes());
        out[4..8].copy_from_slice(&header_length.to_be_bytes());
        out[8..8 + header.len()].copy_from_slice(&header);
        out[8 + header.len()..].copy_from_slice(body_bytes);
        Ok(())
    })?))
}

/// Fast path of `Header._decode` in `rocketstore.remoting.header_codec`: the field values of a typed
/// header, read from `fields` (extFields) by a decode plan of (attr, wire name, kind 0 str /
/// 1 bool / 2 int, required, low, high) steps; None when any field is missing, mistyped or out
/// of range, so that Python decodes it again and raises the error naming the field.
#[pyfunction]
fn decode_header_fields<'py>(
    py: Python<'py>,
    fields: &Bound<'py, PyAny>,
    plan: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Ok(fields) = fields.cast_exact::<PyDict>() else {
        return Ok(None);
    };
    let out = PyDict::new(py);
    for step in plan.iter() {
        let (attr, name, kind, required, low, high): (Bound<'py, PyString>, Bound<'py, PyString>, u8, bool, i64, i64) =
            step.extract()?;
        let Some(raw) = fields.get_item(&name)? else {
            if required {
                return Ok(None);
            }
            continue;
        };
        let Ok(text) = raw.cast_exact::<PyString>() else {
            return Ok(None);
        };
        match kind {
            0 => out.set_item(attr, text)?,
            1 => {
                let Ok(text) = text.to_str() else { return Ok(None) };
                if !text.is_ascii() {
                    return Ok(None); // str.lower() of non-ASCII text: leave it to Python
                }
                out.set_item(attr, text.eq_ignore_ascii_case("true"))?;
            }
            _ => {
                let Ok(text) = text.to_str() else { return Ok(None) };
                let Some(value) = java::parse_java_int(text, low, high) else {
                    return Ok(None);
                };
                out.set_item(attr, value)?;
            }
        }
    }
    Ok(Some(out))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<grpc_front::GrpcFront>()?;
    m.add_class::<remoting_front::RemotingFront>()?;
    m.add_class::<send::PlainSend>()?;
    m.add_class::<pull_serve::PullServe>()?;
    m.add_function(wrap_pyfunction!(grpc_convert::received_message_response, m)?)?;
    m.add_function(wrap_pyfunction!(encode_record, m)?)?;
    m.add_function(wrap_pyfunction!(encode_batch_records, m)?)?;
    m.add_function(wrap_pyfunction!(stamp_records, m)?)?;
    m.add_function(wrap_pyfunction!(scan_dispatch, m)?)?;
    m.add_function(wrap_pyfunction!(put_index_entries, m)?)?;
    m.add_function(wrap_pyfunction!(pull_messages, m)?)?;
    m.add_function(wrap_pyfunction!(decode_frame, m)?)?;
    m.add_function(wrap_pyfunction!(leading_json_code, m)?)?;
    m.add_function(wrap_pyfunction!(encode_json_frame, m)?)?;
    m.add_function(wrap_pyfunction!(decode_header_fields, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
