//! The PULL_MESSAGE requests a connection's read starts with, served before they become
//! commands: `PullServe::serve_frames`, the pull's twin of `PlainSend::serve_frames` (send.rs).
//!
//! A pull served here is one the usual path (`rocketstore.broker.processor.pull`) would answer
//! SUCCESS from a tag subscription at once: the frame is decoded and its header read here, the
//! decisions about its group, topic and subscription are Python's (made once per key, kept in the
//! `plain` table the caller passes), and the store read that builds the SUCCESS frame is the one
//! the usual path makes (the caller's `read`). Whatever else a pull needs (long polling when
//! nothing is found, SQL92 and retry filters, refusals, a frame this decoder does not take) ends
//! the serving at that frame, untouched: the usual path takes it and the rest of the read.

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyTuple};

use crate::java::{parse_java_int, I32_RANGE, I64_RANGE};
use crate::remoting;

/// RequestCode.PULL_MESSAGE
const PULL_MESSAGE: i32 = 11;
/// PullSysFlag.COMMIT_OFFSET
const FLAG_COMMIT_OFFSET: i64 = 0x1;
/// PullSysFlag.SUBSCRIPTION
const FLAG_SUBSCRIPTION: i64 = 0x4;

/// A PullMessageRequestHeader as `rocketstore.remoting.headers` decodes it: every field it
/// requires present and in its Java type's range (else None: Python decodes and refuses it).
struct PullHeader<'a> {
    group: &'a str,
    topic: &'a str,
    queue_id: i64,
    queue_offset: i64,
    max_msg_nums: i64,
    sys_flag: i64,
    commit_offset: i64,
    subscription: Option<&'a str>,
    expression_type: Option<&'a str>,
}

impl<'a> PullHeader<'a> {
    /// From the extFields the native decoder read (all strings); a name given twice keeps its
    /// last value, as Python's dict of the header does. Fields the header does not have are
    /// ignored, as Python's decoder ignores them.
    fn of(ext: &'a [(Cow<'a, str>, Cow<'a, str>)]) -> Option<Self> {
        let mut texts: [Option<&'a str>; 11] = [None; 11];
        for (key, value) in ext {
            let slot = match key.as_ref() {
                "consumerGroup" => 0,
                "topic" => 1,
                "queueId" => 2,
                "queueOffset" => 3,
                "maxMsgNums" => 4,
                "sysFlag" => 5,
                "commitOffset" => 6,
                "suspendTimeoutMillis" => 7,
                "subVersion" => 8,
                "subscription" => 9,
                "expressionType" => 10,
                _ => continue,
            };
            texts[slot] = Some(value.as_ref());
        }
        let number = |slot: usize, (low, high): (i64, i64)| parse_java_int(texts[slot]?, low, high);
        // suspendTimeoutMillis and subVersion are required and checked, though not used here
        number(7, I64_RANGE)?;
        number(8, I64_RANGE)?;
        Some(Self {
            group: texts[0]?,
            topic: texts[1]?,
            queue_id: number(2, I32_RANGE)?,
            queue_offset: number(3, I64_RANGE)?,
            max_msg_nums: number(4, I32_RANGE)?,
            sys_flag: number(5, I32_RANGE)?,
            commit_offset: number(6, I64_RANGE)?,
            subscription: texts[9],
            expression_type: texts[10],
        })
    }
}

/// A key of the `plain` table, kept while the pulls that follow share it.
struct Key {
    group: String,
    topic: String,
    flagged: bool,
    subscription: Option<String>,
    expression_type: Option<String>,
}

impl Key {
    fn of(pull: &PullHeader<'_>, flagged: bool) -> Self {
        Self {
            group: pull.group.to_owned(),
            topic: pull.topic.to_owned(),
            flagged,
            subscription: pull.subscription.map(str::to_owned),
            expression_type: pull.expression_type.map(str::to_owned),
        }
    }

    fn matches(&self, pull: &PullHeader<'_>, flagged: bool) -> bool {
        self.group == pull.group
            && self.topic == pull.topic
            && self.flagged == flagged
            && self.subscription.as_deref() == pull.subscription
            && self.expression_type.as_deref() == pull.expression_type
    }
}

/// What Python decided for a key of the `plain` table: the topic's readQueueNums, the tag
/// codes to match (None for all) and the broker ids to suggest when the consumer reads far
/// behind the end and otherwise.
struct Plain<'py> {
    read_queue_nums: i64,
    tag_codes: Bound<'py, PyAny>,
    suggest_when_slow: i64,
    suggest_otherwise: i64,
}

#[pyclass(module = "rocketstore.common._native", frozen)]
pub struct PullServe {
    /// LanguageCode names, which a request's JSON header names and its response repeats; a
    /// request naming another language is left to Python.
    languages: Vec<String>,
}

#[pymethods]
impl PullServe {
    #[new]
    fn new(languages: Vec<String>) -> Self {
        Self { languages }
    }

    /// Serve the PULL_MESSAGE requests at the head of `data[start..]` (whole remoting frames,
    /// each after its 4-byte length, as a connection read them), one after the other, until one
    /// that is not served.
    ///
    /// `plain` maps (group, topic, whether the SUBSCRIPTION sysFlag bit is set, subscription,
    /// expressionType) to (readQueueNums, tag codes or None, suggested broker id when slow,
    /// otherwise), or to None when such pulls take the usual path. `read(topic, queue id, queue
    /// offset, maxMsgNums, tag codes, opaque, language, version, suggest when slow, otherwise)`
    /// is the store read: (the SUCCESS frame, messages, bytes) when it found messages, else None.
    ///
    /// It serves no more once the response frames reach `budget` bytes: the usual path, which
    /// pauses a connection whose client does not read, takes the rest.
    ///
    /// Returns (bytes of `data` served from `start`, the response frames, per served pull
    /// (group, topic, queue id, messages, bytes, the offset to commit or None), and the key
    /// `plain` does not have when that is what stopped it, else None). It stops, taking nothing
    /// of it, at a frame that is incomplete, whose length is outside 4..`max_frame`, that is not
    /// a JSON-headed PULL_MESSAGE request expecting an answer from a known language with a whole
    /// header, whose key `plain` refuses or lacks, whose queue id is out of bound, or whose read
    /// found nothing.
    #[allow(clippy::too_many_arguments)]
    fn serve_frames<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        start: usize,
        max_frame: usize,
        plain: &Bound<'py, PyDict>,
        read: &Bound<'py, PyAny>,
        budget: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut pos = start.min(data.len());
        let frames = PyList::empty(py);
        let served = PyList::empty(py);
        let mut unknown: Option<Bound<'py, PyTuple>> = None;
        // the last key and its decision: a connection's pulls mostly share one
        let mut last: Option<(Key, Plain<'py>)> = None;
        let mut out_bytes = 0usize;
        while data.len() - pos >= 4 && out_bytes < budget {
            let Some((length, h, _, language)) =
                remoting::served_request(data, pos, max_frame, PULL_MESSAGE, &self.languages)
            else {
                break;
            };
            let Some(pull) = PullHeader::of(&h.ext_fields) else {
                break;
            };
            let flagged = pull.sys_flag & FLAG_SUBSCRIPTION != 0;
            if !last.as_ref().is_some_and(|(key, _)| key.matches(&pull, flagged)) {
                let key = PyTuple::new(
                    py,
                    [
                        pull.group.into_pyobject(py)?.into_any(),
                        pull.topic.into_pyobject(py)?.into_any(),
                        PyBool::new(py, flagged).to_owned().into_any(),
                        pull.subscription.into_pyobject(py)?.into_any(),
                        pull.expression_type.into_pyobject(py)?.into_any(),
                    ],
                )?;
                let Some(entry) = plain.get_item(&key)? else {
                    unknown = Some(key);
                    break;
                };
                if entry.is_none() {
                    break;
                }
                let (read_queue_nums, tag_codes, suggest_when_slow, suggest_otherwise): (
                    i64,
                    Bound<'py, PyAny>,
                    i64,
                    i64,
                ) = entry.extract()?;
                last = Some((
                    Key::of(&pull, flagged),
                    Plain {
                        read_queue_nums,
                        tag_codes,
                        suggest_when_slow,
                        suggest_otherwise,
                    },
                ));
            }
            let decided = &last.as_ref().expect("set above").1;
            if !(0..decided.read_queue_nums).contains(&pull.queue_id) {
                break;
            }
            let found = read.call1((
                pull.topic,
                pull.queue_id,
                pull.queue_offset,
                pull.max_msg_nums,
                &decided.tag_codes,
                h.opaque,
                language,
                h.version,
                decided.suggest_when_slow,
                decided.suggest_otherwise,
            ))?;
            if found.is_none() {
                break;
            }
            let (response, messages, size): (Bound<'py, PyBytes>, i64, i64) = found.extract()?;
            out_bytes += response.as_bytes().len();
            frames.append(response)?;
            let commit = (pull.sys_flag & FLAG_COMMIT_OFFSET != 0).then_some(pull.commit_offset);
            served.append((pull.group, pull.topic, pull.queue_id, messages, size, commit))?;
            pos += length;
        }
        PyTuple::new(
            py,
            [
                (pos - start.min(data.len())).into_pyobject(py)?.into_any(),
                frames.into_any(),
                served.into_any(),
                unknown.map_or_else(|| py.None().into_bound(py), Bound::into_any),
            ],
        )
    }
}
