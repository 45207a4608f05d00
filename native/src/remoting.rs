//! Remoting frames: the fast path of `decode_frame` and of the JSON header encoder in
//! `rocketstore.remoting.command`.
//!
//! Only the usual case is handled here: a header every real client sends (integers in range,
//! string extFields, a known serialize type). Anything else, valid or not, yields `None`, and the
//! Python code, which stays the reference, decodes it or raises the precise ProtocolError; the
//! differential tests check that whatever this returns equals what Python makes of the frame.

use serde_json::Value;

/// One decoded header, before it becomes a RemotingCommand.
pub struct Header {
    pub code: i32,
    pub language: Language,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    pub ext_fields: Vec<(String, String)>,
}

/// JSON headers name the language, binary ones number it; Python maps names to numbers.
pub enum Language {
    Name(String),
    Code(i64),
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

fn as_i32(value: Option<&Value>, default: Option<i32>) -> Option<i32> {
    match value {
        None | Some(Value::Null) => default,
        Some(Value::Number(n)) => i32::try_from(n.as_i64()?).ok(),
        Some(_) => None,
    }
}

/// A JSON header as RocketMQ's RemotingSerializable writes it.
pub fn decode_json(header: &[u8]) -> Option<Header> {
    let Value::Object(map) = serde_json::from_slice::<Value>(header).ok()? else {
        return None;
    };
    let language = match map.get("language") {
        None => Language::Name("JAVA".to_owned()),
        Some(Value::String(name)) => Language::Name(name.clone()),
        Some(Value::Number(n)) => Language::Code(n.as_i64()?),
        Some(_) => return None,
    };
    let remark = match map.get("remark") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return None,
    };
    let ext_fields = match map.get("extFields") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(ext)) => {
            let mut out = Vec::with_capacity(ext.len());
            for (key, value) in ext {
                let Value::String(text) = value else { return None };
                out.push((key.clone(), text.clone()));
            }
            out
        }
        Some(_) => return None,
    };
    Some(Header {
        code: as_i32(map.get("code"), None)?,
        language,
        version: as_i32(map.get("version"), Some(0))?,
        opaque: as_i32(map.get("opaque"), Some(0))?,
        flag: as_i32(map.get("flag"), Some(0))?,
        remark,
        ext_fields,
    })
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
    fn text(&mut self, n: usize) -> Option<String> {
        std::str::from_utf8(self.take(n)?).ok().map(str::to_owned)
    }
}

/// A ROCKETMQ binary header (RocketMQSerializable).
pub fn decode_binary(header: &[u8]) -> Option<Header> {
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

