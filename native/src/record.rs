//! CommitLog records: the encoder of `put`, and the decoder dispatch reads them back with.
//!
//! Twins of `encode_record` and `decode_record` in `rocketstore.common.message`, which document
//! the layout; the differential tests hold the two byte-identical. Every read here is bounds
//! checked: a corrupt or hostile log yields [`Decoded::Corrupt`] with the reason, never a panic.

pub const MESSAGE_MAGIC_CODE: i32 = -626_843_481; // 0xDAA320A7
pub const MESSAGE_MAGIC_CODE_V2: i32 = -626_843_477; // 0xDAA320AB
pub const BLANK_MAGIC_CODE: i32 = -875_286_124; // 0xCBD43194

pub const SYS_FLAG_BORNHOST_V6: i32 = 0x10;
pub const SYS_FLAG_STOREHOST_V6: i32 = 0x20;
pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
pub const TRANSACTION_COMMIT: i32 = 0x8;
pub const TRANSACTION_ROLLBACK: i32 = 0xC;

/// Room a segment keeps after its last record for the blank that ends it.
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;
/// RocketMQ's encoder allows a record the body limit plus this much (`_ENCODE_HEADROOM`).
pub const ENCODE_HEADROOM: usize = 64 * 1024;

const QUEUE_OFFSET_POS: usize = 20;
const PHYSICAL_OFFSET_POS: usize = 28;
const SYS_FLAG_POS: usize = 36;
const BORN_HOST_POS: usize = 48;

/// The smallest possible v1 record: IPv4 hosts, empty body, topic and properties.
pub const MIN_RECORD_LENGTH: usize = fixed_length(0) + 1 + 2;

/// Bytes from totalSize through bodyLength, for the host sizes `sys_flag` selects.
pub const fn fixed_length(sys_flag: i32) -> usize {
    BORN_HOST_POS + host_length(sys_flag, SYS_FLAG_BORNHOST_V6) + 8 + host_length(sys_flag, SYS_FLAG_STOREHOST_V6) + 16
}

/// Bytes of a host field: 8 for IPv4, 20 for IPv6, as the sysFlag's `v6_bit` says.
const fn host_length(sys_flag: i32, v6_bit: i32) -> usize {
    if sys_flag & v6_bit != 0 {
        20
    } else {
        8
    }
}

/// Whether dispatch gives a record with this sysFlag a ConsumeQueue entry (not prepared, not rolled back).
pub fn gets_consume_queue_entry(sys_flag: i32) -> bool {
    let tx = sys_flag & TRANSACTION_TYPE_MASK;
    tx == 0 || tx == TRANSACTION_COMMIT
}

/// The fields of one record that dispatch needs, borrowed from the log.
pub struct Record<'a> {
    pub total_size: usize,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub store_timestamp: i64,
    pub topic: &'a [u8],
    pub properties: &'a [u8],
}

pub enum Decoded<'a> {
    Message(Record<'a>),
    Blank,
    Corrupt(String),
}

fn i16_at(buf: &[u8], pos: usize) -> Option<i16> {
    Some(i16::from_be_bytes(buf.get(pos..pos.checked_add(2)?)?.try_into().ok()?))
}

fn i32_at(buf: &[u8], pos: usize) -> Option<i32> {
    Some(i32::from_be_bytes(buf.get(pos..pos.checked_add(4)?)?.try_into().ok()?))
}

fn i64_at(buf: &[u8], pos: usize) -> Option<i64> {
    Some(i64::from_be_bytes(buf.get(pos..pos.checked_add(8)?)?.try_into().ok()?))
}

/// Decode the record at `pos` of `buf` without checking the body CRC (dispatch trusts what
/// recovery or the writer checked), classifying it as `decode_record` does.
pub fn decode(buf: &[u8], pos: usize) -> Decoded<'_> {
    let limit = buf.len();
    if pos.saturating_add(8) > limit {
        return Decoded::Corrupt(format!(
            "only {} bytes left at {pos}, a header needs 8",
            limit.saturating_sub(pos)
        ));
    }
    let (Some(total_size), Some(magic)) = (i32_at(buf, pos), i32_at(buf, pos + 4)) else {
        return Decoded::Corrupt(format!("unreadable header at {pos}"));
    };
    if magic == BLANK_MAGIC_CODE {
        return Decoded::Blank;
    }
    if magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2 {
        return Decoded::Corrupt(format!("illegal magic code 0x{:08X} at {pos}", magic as u32));
    }
    if total_size < MIN_RECORD_LENGTH as i32 || pos + total_size as usize > limit {
        return Decoded::Corrupt(format!(
            "record size {total_size} at {pos} runs past the data ({} bytes)",
            limit - pos
        ));
    }
    let total = total_size as usize;
    match decode_message(buf, pos, total, magic) {
        Some(Ok(record)) => Decoded::Message(record),
        Some(Err(reason)) => Decoded::Corrupt(reason),
        None => Decoded::Corrupt(format!("undecodable record at {pos}")),
    }
}

fn decode_message(buf: &[u8], pos: usize, total: usize, magic: i32) -> Option<Result<Record<'_>, String>> {
    let end = pos + total;
    let sys_flag = i32_at(buf, pos + SYS_FLAG_POS)?;
    let fixed = fixed_length(sys_flag);
    if pos + fixed > end {
        return Some(Err(format!(
            "record at {pos} is shorter ({total}) than its fixed fields ({fixed})"
        )));
    }
    let born_length = host_length(sys_flag, SYS_FLAG_BORNHOST_V6);
    let queue_id = i32_at(buf, pos + 12)?;
    let queue_offset = i64_at(buf, pos + QUEUE_OFFSET_POS)?;
    let physical_offset = i64_at(buf, pos + PHYSICAL_OFFSET_POS)?;
    let store_timestamp = i64_at(buf, pos + BORN_HOST_POS + born_length)?;
    let body_length = i32_at(buf, pos + fixed - 4)?;
    let mut p = pos + fixed;
    if body_length < 0 || p + body_length as usize > end {
        return Some(Err(format!("body length {body_length} at {pos} runs past the record")));
    }
    p += body_length as usize;
    let topic_length = if magic == MESSAGE_MAGIC_CODE_V2 {
        let length = i16_at(buf, p)?;
        p += 2;
        if length < 0 {
            return Some(Err(format!("negative topic length {length} at {pos}")));
        }
        length as usize
    } else {
        let length = *buf.get(p)? as usize;
        p += 1;
        length
    };
    let mismatch = || Err(format!("record at {pos} says {total} bytes, its fields run past it"));
    if p + topic_length > end {
        return Some(mismatch());
    }
    let topic = &buf[p..p + topic_length];
    p += topic_length;
    if p + 2 > end {
        return Some(mismatch());
    }
    let properties_length = i16_at(buf, p)?.max(0) as usize;
    p += 2;
    if p + properties_length > end {
        return Some(mismatch());
    }
    let properties = &buf[p..p + properties_length];
    p += properties_length;
    if p != end {
        return Some(Err(format!(
            "record at {pos} says {total} bytes, its fields add up to {}",
            p - pos
        )));
    }
    Some(Ok(Record {
        total_size: total,
        queue_id,
        queue_offset,
        physical_offset,
        sys_flag,
        store_timestamp,
        topic,
        properties,
    }))
}

/// The properties dispatch reads (TAGS, KEYS, UNIQ_KEY, DELAY), parsed as `string_to_properties` parses:
/// items split on `\x02`, skipped when shorter than 3 characters or without a non-empty name and
/// value around the first `\x01`; a later item of the same name wins.
#[derive(Default)]
pub struct DispatchProperties<'a> {
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
    pub delay: Option<&'a str>,
}

/// The items of a properties string as `string_to_properties` keeps them, in order: split on
/// `\x02`, each item kept only when it has at least 3 characters and a non-empty name and value
/// around its first `\x01`. Yields (item, name, value); the item is name `\x01` value.
pub fn property_items(text: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    text.split('\u{2}').filter_map(|item| {
        item.chars().nth(2)?;
        let sep = item.find('\u{1}')?;
        if sep == 0 || sep + 1 >= item.len() {
            return None;
        }
        Some((item, &item[..sep], &item[sep + 1..]))
    })
}

pub fn dispatch_properties(text: &str) -> DispatchProperties<'_> {
    let mut found = DispatchProperties::default();
    for (_, name, value) in property_items(text) {
        match name {
            "TAGS" => found.tags = Some(value),
            "KEYS" => found.keys = Some(value),
            "UNIQ_KEY" => found.uniq_key = Some(value),
            "DELAY" => found.delay = Some(value),
            _ => {}
        }
    }
    found
}

/// The fields of a record before the put lock: queueOffset, physicalOffset and storeTimestamp stay 0.
pub struct NewRecord<'a> {
    pub topic: &'a [u8],
    pub body: &'a [u8],
    pub properties: &'a [u8],
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: &'a [u8],
    pub store_host: &'a [u8],
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub crc: Option<i32>,
}

/// Length of `record`'s encoding, or why it cannot be encoded.
pub fn encoded_length(record: &NewRecord<'_>) -> Result<usize, String> {
    for (name, host) in [("born_host", record.born_host), ("store_host", record.store_host)] {
        if host.len() != 8 && host.len() != 20 {
            return Err(format!(
                "{name} must be 8 (IPv4) or 20 (IPv6) bytes, got {}",
                host.len()
            ));
        }
    }
    if record.topic.len() > 255 {
        return Err(format!(
            "topic of {} bytes does not fit its 1-byte length",
            record.topic.len()
        ));
    }
    if record.properties.len() > i16::MAX as usize {
        return Err(format!(
            "properties of {} bytes do not fit their 2-byte length",
            record.properties.len()
        ));
    }
    let fixed = BORN_HOST_POS + record.born_host.len() + 8 + record.store_host.len() + 4 + 8 + 4;
    let length = fixed + record.body.len() + 1 + record.topic.len() + 2 + record.properties.len();
    if length > i32::MAX as usize {
        return Err(format!("a record of {length} bytes does not fit its 4-byte size"));
    }
    Ok(length)
}

/// RocketMQ's UtilAll.crc32 of a body: zlib's CRC32, masked to a non-negative int.
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// Encode `record` into `out`, which is exactly `encoded_length` bytes long.
pub fn encode_into(record: &NewRecord<'_>, out: &mut [u8]) {
    let total = out.len() as i32;
    let mut p = 0;
    let mut put = |bytes: &[u8]| {
        out[p..p + bytes.len()].copy_from_slice(bytes);
        p += bytes.len();
    };
    let crc = record.crc.unwrap_or_else(|| body_crc(record.body));
    put(&total.to_be_bytes());
    put(&MESSAGE_MAGIC_CODE.to_be_bytes());
    put(&crc.to_be_bytes());
    put(&record.queue_id.to_be_bytes());
    put(&record.flag.to_be_bytes());
    put(&0i64.to_be_bytes()); // queueOffset: stamped under the put lock
    put(&0i64.to_be_bytes()); // physicalOffset: stamped under the put lock
    put(&record.sys_flag.to_be_bytes());
    put(&record.born_timestamp.to_be_bytes());
    put(record.born_host);
    put(&0i64.to_be_bytes()); // storeTimestamp: stamped under the put lock
    put(record.store_host);
    put(&record.reconsume_times.to_be_bytes());
    put(&record.prepared_transaction_offset.to_be_bytes());
    put(&(record.body.len() as i32).to_be_bytes());
    put(record.body);
    put(&[record.topic.len() as u8]);
    put(record.topic);
    put(&(record.properties.len() as i16).to_be_bytes());
    put(record.properties);
}

/// Stamp `count` records lying back to back in `payload` (twin of `stamp_records_python`);
/// false when the sizes do not add up inside `payload`, which is left partly stamped.
pub fn stamp_records(
    payload: &mut [u8],
    count: usize,
    queue_offset: i64,
    physical_offset: i64,
    store_timestamp: i64,
    sys_flag: i32,
    counts_in_queue: bool,
) -> bool {
    let timestamp_pos = BORN_HOST_POS + host_length(sys_flag, SYS_FLAG_BORNHOST_V6);
    let mut pos = 0usize;
    for i in 0..count {
        let Some(size) = i32_at(payload, pos) else { return false };
        if pos + timestamp_pos + 8 > payload.len() || pos + QUEUE_OFFSET_POS + 16 > payload.len() {
            return false;
        }
        let queue = if counts_in_queue {
            queue_offset.wrapping_add(i as i64)
        } else {
            0
        };
        payload[pos + QUEUE_OFFSET_POS..pos + QUEUE_OFFSET_POS + 8].copy_from_slice(&queue.to_be_bytes());
        let physical = physical_offset.wrapping_add(pos as i64);
        payload[pos + PHYSICAL_OFFSET_POS..pos + PHYSICAL_OFFSET_POS + 8].copy_from_slice(&physical.to_be_bytes());
        payload[pos + timestamp_pos..pos + timestamp_pos + 8].copy_from_slice(&store_timestamp.to_be_bytes());
        if size <= 0 {
            return false;
        }
        pos += size as usize;
    }
    true
}
