//! IndexFile key writes: the twin of `put_index_entries_python` in `rocketstore.store.index_file`.

pub const INDEX_HEADER_SIZE: usize = 40;
const HASH_SLOT_SIZE: usize = 4;
const INDEX_SIZE: usize = 20;
const KEY_ENTRY_SIZE: usize = 20;

/// beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount.
pub type Header = (i64, i64, i64, i64, i32, i32);

fn i32_at(buf: &[u8], pos: usize) -> i32 {
    i32::from_be_bytes(buf[pos..pos + 4].try_into().expect("4 bytes"))
}

fn i64_at(buf: &[u8], pos: usize) -> i64 {
    i64::from_be_bytes(buf[pos..pos + 8].try_into().expect("8 bytes"))
}

/// Bytes an index file with these dimensions needs.
pub fn file_size(hash_slot_num: usize, index_num: usize) -> Option<usize> {
    INDEX_HEADER_SIZE
        .checked_add(hash_slot_num.checked_mul(HASH_SLOT_SIZE)?)?
        .checked_add(index_num.checked_mul(INDEX_SIZE)?)
}

/// Check what a caller hands over before any write, so that a bad argument is an error and
/// never an out-of-bounds write.
pub fn validate(
    buf_len: usize,
    hash_slot_num: i64,
    index_num: i64,
    entries_len: usize,
    start: usize,
    header: &Header,
) -> Result<(), String> {
    if hash_slot_num <= 0 || index_num <= 0 || hash_slot_num > i64::from(i32::MAX) || index_num > i64::from(i32::MAX) {
        return Err(format!(
            "hash_slot_num {hash_slot_num} and index_num {index_num} must be positive ints"
        ));
    }
    let needed = file_size(hash_slot_num as usize, index_num as usize).ok_or("index file size overflows")?;
    if buf_len < needed {
        return Err(format!(
            "index buffer is {buf_len} bytes, these dimensions need {needed}"
        ));
    }
    if !entries_len.is_multiple_of(KEY_ENTRY_SIZE) || !start.is_multiple_of(KEY_ENTRY_SIZE) || start > entries_len {
        return Err(format!(
            "entries ({entries_len} bytes) from {start} are not whole 20-byte key entries"
        ));
    }
    if i64::from(header.4) + (entries_len.saturating_sub(start) / KEY_ENTRY_SIZE) as i64 > i64::from(i32::MAX) {
        return Err(format!(
            "hashSlotCount {} of the header could overflow an int: the header is corrupt",
            header.4
        ));
    }
    if header.5 < 0 || header.4 < 0 {
        return Err(format!("header counts must not be negative: {header:?}"));
    }
    Ok(())
}

/// Write key entries from `start` until the file is full; returns the first entry not consumed
/// and the new header (written to the buffer when anything was). See the Python twin's doc.
/// The arguments must have passed [`validate`].
pub fn put_entries(
    buf: &mut [u8],
    hash_slot_num: i64,
    index_num: i64,
    entries: &[u8],
    start: usize,
    skip_below: i64,
    header: Header,
) -> (usize, Header) {
    let (mut begin_ts, mut end_ts, mut begin_phy, mut end_phy, mut slot_count, mut index_count) = header;
    let entries_pos = INDEX_HEADER_SIZE + hash_slot_num as usize * HASH_SLOT_SIZE;
    let mut pos = start;
    let mut wrote = false;
    while pos < entries.len() {
        let key_hash = i32_at(entries, pos);
        let phy_offset = i64_at(entries, pos + 4);
        let store_timestamp = i64_at(entries, pos + 12);
        if phy_offset < skip_below {
            pos += KEY_ENTRY_SIZE;
            continue;
        }
        if i64::from(index_count) >= index_num {
            break;
        }
        let slot = i64::from(key_hash).rem_euclid(hash_slot_num) as usize;
        let abs_slot_pos = INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE;
        let mut slot_value = i32_at(buf, abs_slot_pos);
        if slot_value <= 0 || slot_value > index_count {
            slot_value = 0;
        }
        let mut time_diff = store_timestamp.wrapping_sub(begin_ts) / 1000; // Java: truncates toward zero
        if begin_ts <= 0 || time_diff < 0 {
            time_diff = 0;
        } else if time_diff > i64::from(i32::MAX) {
            time_diff = i64::from(i32::MAX);
        }
        let at = entries_pos + index_count as usize * INDEX_SIZE;
        buf[at..at + 4].copy_from_slice(&key_hash.to_be_bytes());
        buf[at + 4..at + 12].copy_from_slice(&phy_offset.to_be_bytes());
        buf[at + 12..at + 16].copy_from_slice(&(time_diff as i32).to_be_bytes());
        buf[at + 16..at + 20].copy_from_slice(&slot_value.to_be_bytes());
        buf[abs_slot_pos..abs_slot_pos + 4].copy_from_slice(&index_count.to_be_bytes());
        if index_count <= 1 {
            begin_phy = phy_offset;
            begin_ts = store_timestamp;
        }
        if slot_value == 0 {
            slot_count += 1;
        }
        index_count += 1;
        end_phy = phy_offset;
        end_ts = store_timestamp;
        wrote = true;
        pos += KEY_ENTRY_SIZE;
    }
    if wrote {
        buf[0..8].copy_from_slice(&begin_ts.to_be_bytes());
        buf[8..16].copy_from_slice(&end_ts.to_be_bytes());
        buf[16..24].copy_from_slice(&begin_phy.to_be_bytes());
        buf[24..32].copy_from_slice(&end_phy.to_be_bytes());
        buf[32..36].copy_from_slice(&slot_count.to_be_bytes());
        buf[36..40].copy_from_slice(&index_count.to_be_bytes());
    }
    (pos, (begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count))
}
