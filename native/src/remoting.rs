//! Remoting frames: the fast path of `decode_frame` and of the JSON header encoder in
//! `rocketstore.remoting.command`.
//!
//! Only the usual case is handled here: a header every real client sends (integers in range,
//! string extFields, a known serialize type). Anything else, valid or not, yields `None`, and the
//! Python code, which stays the reference, decodes it or raises the precise ProtocolError; the
//! differential tests check that whatever this returns equals what Python makes of the frame.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// One decoded header, before it becomes a RemotingCommand. Its texts borrow from the frame where
/// they can (a JSON string without escapes, a binary header's fields); [`Header::into_owned`]
/// keeps one past the frame's buffer.
pub struct Header<'a> {
    pub code: i32,
    pub language: Language<'a>,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<Cow<'a, str>>,
    pub ext_fields: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

/// JSON headers name the language, binary ones number it; Python maps names to numbers.
pub enum Language<'a> {
    Name(Cow<'a, str>),
    Code(i64),
}

impl Header<'_> {
    /// The same header, owning its texts.
    pub fn into_owned(self) -> Header<'static> {
        Header {
            code: self.code,
            language: match self.language {
                Language::Name(name) => Language::Name(Cow::Owned(name.into_owned())),
                Language::Code(code) => Language::Code(code),
            },
            version: self.version,
            opaque: self.opaque,
            flag: self.flag,
            remark: self.remark.map(|text| Cow::Owned(text.into_owned())),
            ext_fields: self
                .ext_fields
                .into_iter()
                .map(|(key, value)| (Cow::Owned(key.into_owned()), Cow::Owned(value.into_owned())))
                .collect(),
        }
    }
}

pub const SERIALIZE_JSON: u8 = 0;
pub const SERIALIZE_ROCKETMQ: u8 = 1;

/// Split a frame (without its length prefix) into serialize type, header and body.
pub fn split(frame: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let mark = i32::from_be_bytes(frame.get(..4)?.try_into().ok()?);
    let serialize = ((mark >> 24) & 0xFF) as u8;
    let header_length = (mark & 0x00FF_FFFF) as usize;
    if header_length > frame.len() - 4 || (serialize != SERIALIZE_JSON && serialize != SERIALIZE_ROCKETMQ) {
        return None;
    }
    Some((serialize, &frame[4..4 + header_length], &frame[4 + header_length..]))
}

/// A header of either serialize type ([`split`] says which), or None when it is not usual.
pub fn decode_header(serialize: u8, header: &[u8]) -> Option<Header<'_>> {
    if serialize == SERIALIZE_JSON {
        decode_json(header)
    } else {
        decode_binary(header)
    }
}

/// The top-level JSON object as serde reads it straight off the bytes: the fields RemotingCommand
/// has, every other field skipped whatever its value (`IgnoredAny`). A field named twice makes
/// serde refuse the header (Python keeps the last one: it decodes such a header itself).
#[derive(Deserialize)]
struct JsonHeader<'a> {
    code: Option<i64>,
    #[serde(borrow, default)]
    language: JsonLanguage<'a>,
    version: Option<i64>,
    opaque: Option<i64>,
    flag: Option<i64>,
    #[serde(borrow)]
    remark: Option<Text<'a>>,
    #[serde(rename = "extFields", borrow, default)]
    ext_fields: Option<ExtFields<'a>>,
}

/// `language`: a name (RocketMQ's JSON) or a number; JAVA when the header has none (a null, or
/// a number past i64, is not usual: Python decides it).
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonLanguage<'a> {
    #[serde(borrow)]
    Name(Text<'a>),
    Code(i64),
}

impl Default for JsonLanguage<'_> {
    fn default() -> Self {
        JsonLanguage::Name(Text(Cow::Borrowed("JAVA")))
    }
}

/// `extFields`: string values only, in wire order, a name given twice kept twice (the dict built
/// from them keeps the first one's place and the last one's value, as Python's json does).
struct ExtFields<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for ExtFields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = ExtFields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(pair) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    out.push((pair.0 .0, pair.1 .0));
                }
                Ok(ExtFields(out))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

/// A JSON string, borrowed from the header when it has no escapes (`Cow<str>`'s own
/// `Deserialize` always copies).
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

fn as_i32(value: Option<i64>, default: Option<i32>) -> Option<i32> {
    match value {
        None => default,
        Some(n) => i32::try_from(n).ok(),
    }
}

/// A JSON header as RocketMQ's RemotingSerializable writes it: an object (serde would also read
/// a struct from an array), valid UTF-8 throughout (serde checks only the strings it keeps, not
/// those of the fields it skips).
pub fn decode_json(header: &[u8]) -> Option<Header<'_>> {
    let text = std::str::from_utf8(header).ok()?;
    if text.trim_start_matches([' ', '\t', '\n', '\r']).as_bytes().first() != Some(&b'{') {
        return None;
    }
    let h: JsonHeader<'_> = serde_json::from_str(text).ok()?;
    Some(Header {
        code: as_i32(h.code, None)?,
        language: match h.language {
            JsonLanguage::Name(name) => Language::Name(name.0),
            JsonLanguage::Code(code) => Language::Code(code),
        },
        version: as_i32(h.version, Some(0))?,
        opaque: as_i32(h.opaque, Some(0))?,
        flag: as_i32(h.flag, Some(0))?,
        remark: h.remark.map(|text| text.0),
        ext_fields: h.ext_fields.map_or_else(Vec::new, |e| e.0),
    })
}

/// A request served from a connection's read: the JSON-headed frame at `data[pos..]` (after its
/// 4-byte length) with request code `code`, expecting an answer (flag 0), from a language named
/// in `languages`. Returns (the frame's length with its prefix, its header, its body, the
/// language as `languages` spells it), or None when the frame is incomplete, its length is
/// outside 4..`max_frame`, or it is not such a request (the caller's usual path then takes it).
pub fn served_request<'d, 'l>(
    data: &'d [u8],
    pos: usize,
    max_frame: usize,
    code: i32,
    languages: &'l [String],
) -> Option<(usize, Header<'d>, &'d [u8], &'l str)> {
    let length = i32::from_be_bytes(data.get(pos..pos + 4)?.try_into().ok()?);
    if length < 4 || length as usize + 4 > max_frame || data.len() - pos - 4 < length as usize {
        return None;
    }
    let Some((SERIALIZE_JSON, header, body)) = split(&data[pos + 4..pos + 4 + length as usize]) else {
        return None;
    };
    let h = decode_json(header)?;
    let language = match &h.language {
        Language::Name(name) if h.code == code && h.flag == 0 => name,
        _ => return None,
    };
    let language = languages.iter().find(|known| known.as_str() == language.as_ref())?;
    Some((4 + length as usize, h, body, language.as_str()))
}

/// Only the `code` of a JSON header; serde skips every other field.
#[derive(Deserialize)]
struct JsonCode {
    code: Option<i64>,
}

/// The request code of the frame at the head of `data` (after its 4-byte length) when its header
/// is JSON and complete, else None; the body need not have arrived. A hint that spares a
/// connection's read the preparation of a path that could not take its first frame: whatever
/// path takes a frame decodes and checks it in full.
pub fn leading_json_code(data: &[u8]) -> Option<i64> {
    let mark = i32::from_be_bytes(data.get(4..8)?.try_into().ok()?);
    if (mark >> 24) & 0xFF != i32::from(SERIALIZE_JSON) {
        return None;
    }
    let header = data.get(8..8 + (mark & 0x00FF_FFFF) as usize)?;
    serde_json::from_slice::<JsonCode>(header).ok()?.code
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn text(&mut self, n: usize) -> Option<Cow<'a, str>> {
        std::str::from_utf8(self.take(n)?).ok().map(Cow::Borrowed)
    }
}

/// A ROCKETMQ binary header (RocketMQSerializable).
pub fn decode_binary(header: &[u8]) -> Option<Header<'_>> {
    let mut r = Reader { data: header, pos: 0 };
    let code = i32::from(r.i16()?);
    let language = i64::from(r.take(1)?[0]);
    let version = i32::from(r.i16()?);
    let opaque = r.i32()?;
    let flag = r.i32()?;
    let remark_length = r.i32()?;
    let remark = if remark_length > 0 {
        Some(r.text(remark_length as usize)?)
    } else {
        None
    };
    let ext_length = usize::try_from(r.i32()?).ok()?;
    let ext_end = r.pos.checked_add(ext_length)?;
    if ext_end > header.len() {
        return None;
    }
    let mut ext_fields = Vec::new();
    while r.pos < ext_end {
        if r.pos + 2 > ext_end {
            return None;
        }
        let key_length = usize::try_from(r.i16()?).ok()?;
        if r.pos + key_length > ext_end {
            return None;
        }
        let key = r.text(key_length)?;
        if r.pos + 4 > ext_end {
            return None;
        }
        let value_length = usize::try_from(r.i32()?).ok()?;
        if r.pos + value_length > ext_end {
            return None;
        }
        ext_fields.push((key, r.text(value_length)?));
    }
    Some(Header {
        code,
        language: Language::Code(language),
        version,
        opaque,
        flag,
        remark,
        ext_fields,
    })
}

/// `json.encoder.encode_basestring` (ensure_ascii=False): the string quoted, with `"`, `\`,
/// the five short escapes and `\u00xx` for the other control characters.
pub fn push_json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0C => Some(b"\\f"),
            _ => None,
        };
        if escape.is_none() && b >= 0x20 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// What `_encode_json_header_fast` writes: keys in fastjson's sorted order, null remark left out.
#[allow(clippy::too_many_arguments)]
pub fn encode_json_header(
    code: i64,
    ext_fields: &[(&str, &str)],
    flag: i64,
    language: &str,
    opaque: i64,
    remark: Option<&str>,
    version: i64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + ext_fields.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>());
    out.extend_from_slice(format!("{{\"code\":{code},\"extFields\":{{").as_bytes());
    for (i, (key, value)) in ext_fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_json_string(&mut out, key);
        out.push(b':');
        push_json_string(&mut out, value);
    }
    out.extend_from_slice(format!("}},\"flag\":{flag},\"language\":\"{language}\",\"opaque\":{opaque}").as_bytes());
    if let Some(text) = remark {
        out.extend_from_slice(b",\"remark\":");
        push_json_string(&mut out, text);
    }
    out.extend_from_slice(format!(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":{version}}}").as_bytes());
    out
}
