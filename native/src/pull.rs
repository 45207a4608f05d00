//! A tag-subscription pull in one pass: the ConsumeQueue walk, the tag-hash filter, the gathering
//! of the records and the PULL_MESSAGE SUCCESS frame around them. Twin of
//! `rocketstore.store.pull_transfer.pull_messages_python` (the store's `walk_queue` followed by
//! `encode_frame_python`); the glue that reads the mapped CommitLog segments is in lib.rs.
//!
//! Every comparison is made in i128: Python's integers do not overflow, and a corrupt entry or
//! an extreme configuration value must decide the same way here as there.

use crate::remoting;

pub const CQ_STORE_UNIT_SIZE: usize = 20;

/// How a walk ended; the numbers index `WALK_STATUSES` in `rocketstore.store.pull_transfer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkStatus {
    Found = 0,
    NoMatchedMessage = 1,
    MessageWasRemoving = 2,
}

/// `TransferLimits` of `rocketstore.store.pull_transfer`: what bounds one pull.
pub struct Limits {
    pub max_msg_nums: i64,
    pub max_bytes_in_memory: i64,
    pub max_count_in_memory: i64,
    pub max_bytes_in_disk: i64,
    pub max_count_in_disk: i64,
    /// The CommitLog's end when the pull began.
    pub max_offset_py: i64,
    /// Records further than this behind the end count as in disk (accessMessageInMemoryMaxRatio).
    pub in_memory_bytes: i64,
}

/// Where one picked record lies: which segment (a handle of the caller's), where in it, how long.
pub struct Picked {
    pub segment: usize,
    pub start: usize,
    pub len: usize,
}

/// What a walk found.
pub struct Walk {
    pub status: WalkStatus,
    /// Entries walked past, taken or not: the next begin offset is the first one plus this.
    pub consumed: i64,
    pub picked: Vec<Picked>,
    pub total: i64,
    /// The CommitLog offset of the last entry looked at (suggestPullingFromSlave).
    pub max_phy_pulling: i64,
}

/// The CommitLog segments a walk reads, found by offset.
pub trait Segments {
    /// The handle and read position of the segment holding `offset`; None when there is none or
    /// it is being destroyed (the Python path's read then returns None too).
    fn find(&mut self, offset: i64) -> Option<(usize, i64)>;
}

fn batch_full(size: i128, total: i128, count: i128, in_disk: bool, limits: &Limits) -> bool {
    if total == 0 || count == 0 {
        return false;
    }
    if i128::from(limits.max_msg_nums) <= count {
        return true;
    }
    let (bytes, messages) = if in_disk {
        (limits.max_bytes_in_disk, limits.max_count_in_disk)
    } else {
        (limits.max_bytes_in_memory, limits.max_count_in_memory)
    };
    total + size > i128::from(bytes) || count > i128::from(messages) - 1
}

/// Walk `entries` (whole 20-byte ConsumeQueue entries), picking the records that pass the
/// tag-hash filter (`tag_codes`, None for all) until a limit is reached.
pub fn walk(
    entries: &[u8],
    tag_codes: Option<&[i64]>,
    limits: &Limits,
    file_size: i64,
    segments: &mut impl Segments,
) -> Walk {
    let mut status = WalkStatus::NoMatchedMessage;
    let mut consumed = 0i64;
    let mut picked = Vec::new();
    let mut total = 0i128;
    let mut next_phy_file_start = -1i128;
    let mut max_phy_pulling = 0i64;
    let file_size_wide = i128::from(file_size);
    for entry in entries.chunks_exact(CQ_STORE_UNIT_SIZE) {
        let offset = i64::from_be_bytes(entry[0..8].try_into().expect("8 bytes"));
        let size = i32::from_be_bytes(entry[8..12].try_into().expect("4 bytes"));
        let code = i64::from_be_bytes(entry[12..20].try_into().expect("8 bytes"));
        let offset_wide = i128::from(offset);
        max_phy_pulling = offset;
        if next_phy_file_start != -1 && offset_wide < next_phy_file_start {
            consumed += 1;
            continue;
        }
        let in_disk = i128::from(limits.max_offset_py) - offset_wide > i128::from(limits.in_memory_bytes);
        if batch_full(i128::from(size), total, picked.len() as i128, in_disk, limits) {
            break;
        }
        consumed += 1;
        if let Some(codes) = tag_codes {
            if !codes.contains(&code) {
                if total == 0 {
                    status = WalkStatus::NoMatchedMessage;
                }
                continue;
            }
        }
        let position = offset_wide.rem_euclid(file_size_wide);
        let found = segments.find(offset).and_then(|(segment, read_position)| {
            let fits = size >= 0 && position + i128::from(size) <= i128::from(read_position);
            fits.then_some(Picked {
                segment,
                start: position as usize,
                len: size as usize,
            })
        });
        match found {
            Some(record) => {
                total += record.len as i128;
                picked.push(record);
                status = WalkStatus::Found;
                next_phy_file_start = -1;
            }
            None => {
                if total == 0 {
                    status = WalkStatus::MessageWasRemoving;
                }
                next_phy_file_start = offset_wide + file_size_wide - position;
            }
        }
    }
    Walk {
        status,
        consumed,
        picked,
        total: total as i64,
        max_phy_pulling,
    }
}

/// Whether the consumer should be told to pull from a slave next: the walk read far behind the end.
pub fn suggest_pulling_from_slave(walk: &Walk, limits: &Limits) -> bool {
    i128::from(limits.max_offset_py) - i128::from(walk.max_phy_pulling) > i128::from(limits.in_memory_bytes)
}

/// `PullFrame` of `rocketstore.store.pull_transfer`: the request's side of the response header.
pub struct FrameHeader {
    pub opaque: i64,
    pub language: String,
    pub version: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub suggest_when_slow: i64,
    pub suggest_otherwise: i64,
}

/// The JSON header of the SUCCESS response (remark FOUND) to a pull from `queue_offset` that `walk` answers.
pub fn response_header(walk: &Walk, queue_offset: i64, from_slave: bool, frame: &FrameHeader) -> Vec<u8> {
    let suggest = if from_slave {
        frame.suggest_when_slow
    } else {
        frame.suggest_otherwise
    };
    let next_begin_offset = (i128::from(queue_offset) + i128::from(walk.consumed)).to_string();
    let (suggest, min_offset, max_offset) = (
        suggest.to_string(),
        frame.min_offset.to_string(),
        frame.max_offset.to_string(),
    );
    let fields = [
        ("suggestWhichBrokerId", suggest.as_str()),
        ("nextBeginOffset", next_begin_offset.as_str()),
        ("minOffset", min_offset.as_str()),
        ("maxOffset", max_offset.as_str()),
    ];
    // code SUCCESS (0), flag RPC_TYPE_RESPONSE (1)
    remoting::encode_json_header(
        0,
        &fields,
        1,
        &frame.language,
        frame.opaque,
        Some("FOUND"),
        frame.version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct One {
        read_position: i64,
    }

    impl Segments for One {
        fn find(&mut self, offset: i64) -> Option<(usize, i64)> {
            (0..1000).contains(&offset).then_some((0, self.read_position))
        }
    }

    fn entry(offset: i64, size: i32, code: i64) -> Vec<u8> {
        let mut out = offset.to_be_bytes().to_vec();
        out.extend_from_slice(&size.to_be_bytes());
        out.extend_from_slice(&code.to_be_bytes());
        out
    }

    fn limits(max_msg_nums: i64) -> Limits {
        Limits {
            max_msg_nums,
            max_bytes_in_memory: 1 << 20,
            max_count_in_memory: 32,
            max_bytes_in_disk: 1 << 16,
            max_count_in_disk: 8,
            max_offset_py: 1000,
            in_memory_bytes: 1 << 30,
        }
    }

    #[test]
    fn filters_by_tag_code_and_stops_at_max_msg_nums() {
        let entries = [entry(0, 10, 7), entry(10, 10, 8), entry(20, 10, 7), entry(30, 10, 7)].concat();
        let found = walk(&entries, Some(&[7]), &limits(2), 100, &mut One { read_position: 100 });
        assert_eq!(found.status, WalkStatus::Found);
        assert_eq!(found.consumed, 3);
        assert_eq!(found.picked.iter().map(|p| p.start).collect::<Vec<_>>(), vec![0, 20]);
        assert_eq!(found.total, 20);
    }

    #[test]
    fn a_record_past_the_read_position_skips_the_rest_of_its_segment() {
        let entries = [entry(0, 10, 1), entry(10, 10, 1), entry(100, 10, 1)].concat();
        let found = walk(&entries, None, &limits(32), 100, &mut One { read_position: 5 });
        assert_eq!(found.status, WalkStatus::MessageWasRemoving);
        assert_eq!(found.consumed, 3);
        assert!(found.picked.is_empty());
    }
}
