"""A bounded fuzz run of the native extension against its Python twins (issue 10: bad input gets a
clear status, never a crash of the process).

The harness, ``fuzz_native.py``, runs in a subprocess: a segfault or abort there fails this test
with the input that caused it, instead of killing pytest. The seed corpus is real CommitLog bytes
(and the index keys and records they hold) and remoting frames, written here into ``tmp_path`` on every run, so that
the fuzzer starts from inputs that get past the magic codes and length checks.

The tests after it replay the divergences found while building it, one per bug.
"""

from __future__ import annotations

import dataclasses
import random
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from native_support import native_module
from test_native_differential import to_v2
from tool_support import require_module

from rocketstore.common.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SysFlag,
    encode_record_python,
    properties_to_string,
    stamp_record,
)
from rocketstore.remoting.codes import LanguageCode, RequestCode, SerializeType
from rocketstore.remoting.command import RemotingCommand, encode_frame_python
from rocketstore.store.dispatch_scan import END_CORRUPT, scan_python
from rocketstore.store.index_file import INDEX_KEY_ENTRY, index_file_size, put_index_entries_python

HARNESS = Path(__file__).with_name("fuzz_native.py")
#: libFuzzer's own bound; the subprocess gets this plus start-up and shutdown slack
FUZZ_SECONDS = 45
#: fewer executions than this means the harness did not really run (it does thousands a second)
MIN_RUNS = 1000
#: seeds per payload with random control bytes, beside the one with all-zero (typical) arguments
RANDOM_CONTROLS = 3


def _record(topic: bytes, properties: dict[str, str] | bytes, *, queue_id: int = 0, sys_flag: int = 0,
            body: bytes = b"body") -> bytearray:
    v6 = sys_flag & SysFlag.BORNHOST_V6, sys_flag & SysFlag.STOREHOST_V6
    return encode_record_python(
        topic_data=topic, body=body,
        properties_data=properties if isinstance(properties, bytes) else properties_to_string(properties).encode(),
        queue_id=queue_id, flag=0, sys_flag=sys_flag, born_timestamp=1_700_000_000_000,
        born_host=bytes(20 if v6[0] else 8), store_host=bytes(20 if v6[1] else 8), reconsume_times=0,
        prepared_transaction_offset=0)


def _log(records: list[bytearray]) -> bytes:
    """``records`` stamped as the put lock stamps them: consecutive offsets per queue, positions, times."""
    log = bytearray()
    next_offsets: dict[int, int] = {}
    for i, record in enumerate(records):
        queue_id, sys_flag = struct.unpack_from(">i", record, 12)[0], struct.unpack_from(">i", record, 36)[0]
        offset = next_offsets.get(queue_id, 0)
        next_offsets[queue_id] = offset + 1
        stamp_record(record, 0, offset, len(log), 1_700_000_000_000 + i, sys_flag)
        log += record
    return bytes(log)


def seed_logs() -> list[bytes]:
    """CommitLog stretches that exercise each branch of the decoders when whole, cut or mutated."""
    keyed = [_record(b"TopicA", {"TAGS": f"T{i % 2}", "KEYS": f"k{i} j", "UNIQ_KEY": f"U{i}"}, queue_id=i % 3)
             for i in range(6)]
    odd = [
        _record(b"TopicB", {"KEYS": "ключ 键"}, sys_flag=SysFlag.BORNHOST_V6),
        _record(b"TopicB", {"TAGS": "x"}, sys_flag=SysFlag.STOREHOST_V6 | SysFlag.TRANSACTION_PREPARED),
        _record(b"TopicB", {"UNIQ_KEY": "u"}, sys_flag=SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
                | SysFlag.TRANSACTION_COMMIT),
        _record(b"TopicB", {"KEYS": "r"}, sys_flag=SysFlag.TRANSACTION_ROLLBACK),
        _record(b"T\xff\xfeopic", b"TAGS\x01\xc3(\x02KEYS\x01a\x01b\x02\x01x\x02"),  # not UTF-8, odd items
        _record(b"T", b"", body=b""),
    ]
    blank = struct.pack(">ii", 64, BLANK_MAGIC_CODE)
    keyed_log = _log(keyed)
    return [
        keyed_log + blank,
        _log(odd),
        _log([to_v2(_record(b"V2", {"TAGS": "t", "KEYS": "k"})), _record(b"V1", {})]),
        keyed_log[: len(keyed_log) - 7],  # a record cut short
        blank,
        b"",
    ]


def seed_frames() -> list[bytes]:
    """Remoting frames (without the length prefix) as clients send them, in both header encodings."""
    send = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=7, remark="r\u00e9", body=b"body",
                           ext_fields={"a": "TopicA", "b": "TBW102", "e": "3", "g": "1700000000000", "k": "false"})
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=-1, flag=1, language=LanguageCode.CPP,
                           ext_fields={"queueOffset": "-9223372036854775808", "maxMsgNums": "+32"})
    return [encode_frame_python(dataclasses.replace(cmd, serialize_type=serialize))[4:]
            for cmd in (send, pull) for serialize in (SerializeType.JSON, SerializeType.ROCKETMQ)]


def seed_inputs(fuzz: ModuleType) -> Iterator[bytes]:
    """Inputs for every target: scans of each log, index writes of their keys, encodes of their bytes,
    decodes of each frame, header fields picked by the control bytes alone."""
    rng = random.Random(10)
    seeds = [(fuzz.HEADER_FIELDS, b"")] + [(fuzz.FRAME, frame) for frame in seed_frames()]
    for log in seed_logs():
        keys = scan_python(log, 0, len(log), len(log), True, (1000,))[5]
        seeds += [(fuzz.SCAN, log), (fuzz.INDEX, keys), (fuzz.ENCODE, log)]
    for target, payload in seeds:
        yield fuzz.make_input(target, payload)
        for _ in range(RANDOM_CONTROLS):
            yield fuzz.make_input(target, payload, rng.randbytes(fuzz.CONTROL_SIZE - 1))


@pytest.mark.slow  # a bounded fuzz run: tens of seconds
def test_the_native_functions_survive_fuzzing_and_agree_with_python(tmp_path: Path) -> None:
    require_module("atheris", "atheris", "the fuzz harness needs it: pip install -e '.[test]'")
    native_module()
    import fuzz_native  # after the checks above: it imports atheris and the extension

    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    for i, seed in enumerate(seed_inputs(fuzz_native)):
        (corpus / f"seed-{i:03}").write_bytes(seed)
    command = [sys.executable, str(HARNESS), str(corpus), f"-max_total_time={FUZZ_SECONDS}", "-timeout=30",
               f"-artifact_prefix={artifacts}/", "-print_final_stats=1"]
    try:
        done = subprocess.run(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=FUZZ_SECONDS + 60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the fuzz run did not end in time: {' '.join(command)}") from exc
    if done.returncode != 0:
        found = "\n".join(f"{path.name} ({path.stat().st_size} bytes): {path.read_bytes().hex()}"
                          for path in sorted(artifacts.iterdir()))
        raise AssertionError(
            f"the fuzzer found a failing input (exit status {done.returncode}); replay it with\n"
            f"  {sys.executable} {HARNESS} <file with these bytes>\n{found or '(no artifact written)'}\n"
            f"--- harness output (tail) ---\n{done.stdout[-20000:]}")
    runs = re.search(r"Done (\d+) runs", done.stdout)
    assert runs is not None and int(runs.group(1)) >= MIN_RUNS, done.stdout[-3000:]


def test_a_v2_record_with_a_negative_topic_length_is_corrupt_to_both() -> None:
    """Regression (found reading the decoders for the harness; minutes of fuzzing did not reach it,
    as its lengths must add up exactly): a v2 record whose topic length is -10 while its other
    lengths add up to its size. The Python decoder used to step 10 bytes back and decode a message
    with an empty topic where the Rust one, like RocketMQ's, finds the record corrupt.
    """
    record = bytearray(103)
    struct.pack_into(">ii", record, 0, len(record), MESSAGE_MAGIC_CODE_V2)
    struct.pack_into(">h", record, 80, 21)  # read as the properties length once the topic steps back
    struct.pack_into(">h", record, 88, -10)  # the topic length, after an empty body
    log = bytes(record)
    native = native_module().scan_dispatch(log, 0, len(log), 10, True, (1000,))
    python = scan_python(log, 0, len(log), 10, True, (1000,))
    assert python[:3] == native[:3] == (0, 0, END_CORRUPT)


def test_index_writers_refuse_a_hash_slot_count_that_would_overflow() -> None:
    """Regression (found by the fuzzer): with hashSlotCount at Integer.MAX_VALUE in the header, the
    Rust writer used to wrap it to -2**31 and write that into the file while the Python one failed
    half-way (``struct.error`` packing the header after writing the entry)."""
    header = (0, 0, 0, 0, 2**31 - 1, 1)
    entry = INDEX_KEY_ENTRY.pack(1, 0, 0)
    for put in (native_module().put_index_entries, put_index_entries_python):
        buf = bytearray(index_file_size(4, 4))
        with pytest.raises(ValueError, match="overflow"):
            put(buf, 4, 4, entry, 0, 0, header)
        assert buf == bytearray(index_file_size(4, 4)), f"{put.__name__} wrote before refusing"
