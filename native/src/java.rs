//! Java's `String.hashCode()`, the hash RocketMQ's on-disk formats are built on.

/// Feed `text`'s UTF-16 code units into a running `String.hashCode()` value.
///
/// Index keys are `topic#key`; hashing the parts in turn saves building the joined string.
pub fn hash_continue(mut h: i32, text: &str) -> i32 {
    for unit in text.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    h
}

/// `String.hashCode()` of `text`.
pub fn string_hash(text: &str) -> i32 {
    hash_continue(0, text)
}

/// IndexFile's key hash: `abs(hashCode)`, and 0 for `Integer.MIN_VALUE`, whose `Math.abs` stays negative.
pub fn index_key_hash(h: i32) -> i32 {
    if h == i32::MIN {
        0
    } else {
        h.abs()
    }
}

/// The range of a Java `int`, for [`parse_java_int`].
pub const I32_RANGE: (i64, i64) = (i32::MIN as i64, i32::MAX as i64);
/// The range of a Java `long`, for [`parse_java_int`].
pub const I64_RANGE: (i64, i64) = (i64::MIN, i64::MAX);

/// Java's `Integer.parseInt` / `Long.parseLong` syntax, `[+-]?[0-9]+`, within `low..=high`.
pub fn parse_java_int(text: &str, low: i64, high: i64) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut value: i128 = 0;
    for b in digits.bytes() {
        value = value * 10 + i128::from(b - b'0');
        if value > i128::from(i64::MAX) + 1 {
            return None; // beyond any range asked for; stop before i128 could overflow
        }
    }
    let value = if negative { -value } else { value };
    let value = i64::try_from(value).ok()?;
    (low..=high).contains(&value).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_java_values() {
        // values printed by a JVM for these strings
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("TagA"), 2598919);
        assert_eq!(string_hash("hello"), 99162322);
        assert_eq!(hash_continue(string_hash("Topic"), "#key"), string_hash("Topic#key"));
    }
}
