"""Record codec (store/message.py): property-based round trips, RocketMQ's parsing rules, hostile bytes.

The round trips alone cannot catch a bug that encoder and decoder share, so the layout is also
checked against bytes packed here field by field from RocketMQ's documented record format, and
java_string_hash is checked against values computed by Java and by an independent formula.
"""

from __future__ import annotations

import ipaddress
import random
import re
import socket
import struct
import zlib

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rocketstore.common.message import (
    BLANK_MAGIC_CODE,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    BatchItem,
    BlankRecord,
    CorruptRecord,
    HostAddress,
    Message,
    StoredMessage,
    SysFlag,
    body_crc,
    create_message_id,
    decode_batch,
    decode_message_id,
    decode_record,
    encode_batch,
    encode_blank,
    encode_message,
    encode_record,
    java_string_hash,
    properties_to_string,
    record_length,
    stamp_record,
    store_timestamp_pos,
    string_to_properties,
    tags_code,
    with_host_flags,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
PORTS = st.integers(0, 65535)
MAX_BODY = 4 * 1024 * 1024  # RocketMQ's default maxMessageSize
V4_V4_FIXED = 91  # record_length(0, 0, 0, 0): every field, empty body/topic/properties
HOST_BITS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


# -- strategies --------------------------------------------------------------------------------
def utf8_prefix(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits ``limit`` bytes (never cuts a character)."""
    return text.encode()[:limit].decode("utf-8", errors="ignore")


ANY_CHAR = st.characters(codec="utf-8")  # every code point except lone surrogates (not encodable)
topics = st.text(ANY_CHAR, max_size=127).map(lambda t: utf8_prefix(t, 127))
property_text = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=24)
property_maps = st.dictionaries(property_text, property_text, max_size=8)


def _random_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


# Small bodies from hypothesis itself (good shrinking), big ones from a seeded generator
# (drawing 300 KiB byte by byte through hypothesis would be far too slow).
bodies = st.one_of(
    st.binary(max_size=300),
    st.builds(_random_bytes, st.integers(0, 384 * 1024), st.integers(0, 2**32)),
)
v4_hosts = st.builds(lambda ip, port: HostAddress(str(ip), port), st.ip_addresses(v=4), PORTS)
v6_hosts = st.builds(lambda ip, port: HostAddress(str(ip), port), st.ip_addresses(v=6), PORTS)
hosts = st.one_of(v4_hosts, v6_hosts)

messages = st.builds(
    Message,
    topic=topics,
    body=bodies,
    queue_id=I32,
    flag=I32,
    properties=property_maps,
    # any low bits, including host bits that disagree with the hosts: the encoder must fix them
    sys_flag=st.integers(0, 0x7FFF),
    born_timestamp=I64,
    born_host=hosts,
    store_host=hosts,
    reconsume_times=I32,
    prepared_transaction_offset=I64,
)


def mutable_record(msg: Message) -> bytearray:
    """encode_message's output as a buffer stamp_record can fill in (it stamps where it writes)."""
    return bytearray(encode_message(msg))


def assert_decodes_to(decoded: object, msg: Message, queue_offset: int, physical_offset: int, store_ts: int) -> None:
    assert isinstance(decoded, StoredMessage), decoded
    props_len = len(properties_to_string(msg.properties).encode())
    sys_flag = with_host_flags(msg.sys_flag, msg.born_host, msg.store_host)
    assert decoded.total_size == record_length(sys_flag, len(msg.body), len(msg.topic.encode()), props_len)
    assert decoded.magic == MESSAGE_MAGIC_CODE
    assert decoded.body_crc == zlib.crc32(msg.body) & 0x7FFFFFFF
    assert decoded.topic == msg.topic
    assert decoded.body == msg.body
    assert decoded.properties == msg.properties
    assert decoded.queue_id == msg.queue_id
    assert decoded.flag == msg.flag
    assert decoded.sys_flag == sys_flag
    assert decoded.born_timestamp == msg.born_timestamp
    assert decoded.born_host == msg.born_host
    assert decoded.store_host == msg.store_host
    assert decoded.reconsume_times == msg.reconsume_times
    assert decoded.prepared_transaction_offset == msg.prepared_transaction_offset
    assert decoded.queue_offset == queue_offset
    assert decoded.physical_offset == physical_offset
    assert decoded.store_timestamp == store_ts


# -- record round trips --------------------------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(msg=messages, queue_offset=I64, physical_offset=I64, store_ts=I64,
       prefix=st.binary(max_size=40), suffix=st.binary(max_size=40))
def test_encode_stamp_decode_round_trip(
    msg: Message, queue_offset: int, physical_offset: int, store_ts: int, prefix: bytes, suffix: bytes
) -> None:
    record = mutable_record(msg)
    sys_flag = with_host_flags(msg.sys_flag, msg.born_host, msg.store_host)
    props_len = len(properties_to_string(msg.properties).encode())
    assert len(record) == record_length(sys_flag, len(msg.body), len(msg.topic.encode()), props_len)
    # the record sits in the middle of a segment: decoding at ``pos`` must ignore its neighbours
    buf = bytearray(prefix) + record + suffix
    stamp_record(buf, len(prefix), queue_offset, physical_offset, store_ts, sys_flag)
    assert_decodes_to(decode_record(bytes(buf), len(prefix)), msg, queue_offset, physical_offset, store_ts)
    assert_decodes_to(decode_record(memoryview(buf), len(prefix), check_crc=False), msg, queue_offset,
                      physical_offset, store_ts)


@pytest.mark.parametrize(
    ("born", "store", "expected_bits", "expected_fixed"),
    [
        (HostAddress("10.1.2.3", 51000), HostAddress("192.168.0.7", 10911), 0, 91),
        (HostAddress("fe80::1", 51000), HostAddress("192.168.0.7", 10911), SysFlag.BORNHOST_V6, 103),
        (HostAddress("10.1.2.3", 51000), HostAddress("2001:db8::7", 10911), SysFlag.STOREHOST_V6, 103),
        (HostAddress("fe80::1", 51000), HostAddress("2001:db8::7", 10911), HOST_BITS, 115),
    ],
    ids=["v4-v4", "v6-v4", "v4-v6", "v6-v6"],
)
@pytest.mark.parametrize("declared_bits", [0, SysFlag.BORNHOST_V6, SysFlag.STOREHOST_V6, HOST_BITS])
def test_host_bits_follow_the_hosts_whatever_the_message_declares(
    born: HostAddress, store: HostAddress, expected_bits: int, expected_fixed: int, declared_bits: int
) -> None:
    msg = Message(topic="T", body=b"xyz", properties={"TAGS": "a"}, sys_flag=declared_bits | SysFlag.MULTI_TAGS,
                  born_host=born, store_host=store, born_timestamp=1_700_000_000_000)
    record = mutable_record(msg)
    sys_flag = struct.unpack_from(">i", record, 36)[0]
    assert sys_flag == expected_bits | SysFlag.MULTI_TAGS
    assert record_length(sys_flag, 0, 0, 0) == expected_fixed
    assert len(record) == expected_fixed + 3 + 1 + len(b"TAGS\x01a")
    stamp_record(record, 0, 5, 4096, 1_700_000_000_123, sys_flag)
    # storeTimestamp moves by 12 bytes when bornHost is IPv6
    ts_pos = 48 + (20 if expected_bits & SysFlag.BORNHOST_V6 else 8)
    assert store_timestamp_pos(sys_flag) == ts_pos
    assert struct.unpack_from(">q", record, ts_pos)[0] == 1_700_000_000_123
    assert_decodes_to(decode_record(bytes(record)), msg, 5, 4096, 1_700_000_000_123)


def test_layout_matches_rocketmq_field_by_field_ipv4() -> None:
    """Bytes packed here from the v1 record table, independently of encode_record."""
    body, topic, props = b"hello", "TopicTest", {"TAGS": "TagA", "KEYS": "k1 k2"}
    msg = Message(topic=topic, body=body, queue_id=3, flag=7, properties=props, sys_flag=0,
                  born_timestamp=1_700_000_000_001, born_host=HostAddress("10.0.0.1", 51234),
                  store_host=HostAddress("10.0.0.2", 10911), reconsume_times=2, prepared_transaction_offset=99)
    prop_bytes = b"TAGS\x01TagA\x02KEYS\x01k1 k2"
    total = 91 + len(body) + len(topic) + len(prop_bytes)
    expected = (
        struct.pack(">iiiiiqqiq", total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, 3, 7, 11, 8192, 0,
                    1_700_000_000_001)
        + bytes([10, 0, 0, 1]) + struct.pack(">i", 51234)
        + struct.pack(">q", 1_700_000_000_555)
        + bytes([10, 0, 0, 2]) + struct.pack(">i", 10911)
        + struct.pack(">iqi", 2, 99, len(body)) + body
        + bytes([len(topic)]) + topic.encode()
        + struct.pack(">h", len(prop_bytes)) + prop_bytes
    )
    record = mutable_record(msg)
    stamp_record(record, 0, 11, 8192, 1_700_000_000_555, 0)
    assert bytes(record) == expected


def test_layout_matches_rocketmq_field_by_field_ipv6() -> None:
    born, store = HostAddress("2001:db8::1", 40000), HostAddress("::1", 10911)
    msg = Message(topic="T6", body=b"", born_host=born, store_host=store, born_timestamp=5)
    total = 115 + 2
    expected = (
        struct.pack(">iiiiiqqiq", total, MESSAGE_MAGIC_CODE, 0, 0, 0, 1, 2, 0x30, 5)
        + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + struct.pack(">i", 40000)
        + struct.pack(">q", 6)
        + socket.inet_pton(socket.AF_INET6, "::1") + struct.pack(">i", 10911)
        + struct.pack(">iqi", 0, 0, 0)
        + b"\x02T6" + struct.pack(">h", 0)
    )
    record = mutable_record(msg)
    stamp_record(record, 0, 1, 2, 6, 0x30)
    assert bytes(record) == expected


def test_record_length_is_rocketmq_callength() -> None:
    assert record_length(0, 0, 0, 0) == V4_V4_FIXED
    assert record_length(SysFlag.BORNHOST_V6, 0, 0, 0) == V4_V4_FIXED + 12
    assert record_length(HOST_BITS, 0, 0, 0) == V4_V4_FIXED + 24
    assert record_length(SysFlag.COMPRESSED | SysFlag.TRANSACTION_ROLLBACK, 10, 20, 30) == V4_V4_FIXED + 60


def test_body_at_the_4_mib_maximum_round_trips() -> None:
    body = _random_bytes(MAX_BODY, 7)
    msg = Message(topic="Big", body=body, properties={"KEYS": "big"})
    record = mutable_record(msg)
    assert len(record) == record_length(0, MAX_BODY, 3, len(b"KEYS\x01big"))
    stamp_record(record, 0, 0, 0, 1, 0)
    assert_decodes_to(decode_record(record), msg, 0, 0, 1)


def test_empty_body_and_empty_properties() -> None:
    msg = Message(topic="T", body=b"")
    record = mutable_record(msg)
    assert len(record) == V4_V4_FIXED + 1
    assert struct.unpack_from(">i", record, 8)[0] == 0  # CRC32 of nothing
    assert_decodes_to(decode_record(record), msg, 0, 0, 0)


def test_topic_of_exactly_127_utf8_bytes() -> None:
    topic = "中" * 42 + "a"  # 42 * 3 + 1 = 127 bytes, 43 characters
    assert len(topic.encode()) == 127
    msg = Message(topic=topic, body=b"b", properties={"ключ": "значение", "🔑": "😀"})
    record = mutable_record(msg)
    assert record[88 + 1] == 127  # topic length byte, right after the 1-byte body (v4/v4: body at 88)
    assert_decodes_to(decode_record(record), msg, 0, 0, 0)


def test_read_body_false_skips_the_body_but_keeps_every_other_field() -> None:
    msg = Message(topic="T", body=b"payload", properties={"TAGS": "x"}, queue_id=4)
    record = mutable_record(msg)
    decoded = decode_record(record, check_crc=False, read_body=False)
    assert isinstance(decoded, StoredMessage)
    assert decoded.body == b""
    assert (decoded.topic, decoded.queue_id, decoded.properties, decoded.total_size) == (
        "T", 4, {"TAGS": "x"}, len(record))


def test_crc_mismatch_is_corrupt_only_when_checked() -> None:
    record = mutable_record(Message(topic="T", body=b"0123456789abcdef"))
    record[90] ^= 0xFF  # inside the body (v4/v4: body at 88..104)
    record[101] ^= 0x01
    bad = decode_record(record)
    assert isinstance(bad, CorruptRecord)
    assert "CRC" in bad.reason
    unchecked = decode_record(record, check_crc=False)
    assert isinstance(unchecked, StoredMessage)
    assert unchecked.body != b"0123456789abcdef"


def test_v2_record_with_two_byte_topic_length_decodes() -> None:
    """RocketMQ 5.x (magic 0xDAA320AB) stores the topic length as i16: rebuild a v1 record that way."""
    msg = Message(topic="T" * 200, body=b"abc", properties={"TAGS": "t"})
    v1 = bytes(encode_record(
        topic_data=b"", body=msg.body, properties_data=b"TAGS\x01t", queue_id=0, flag=0, sys_flag=0,
        born_timestamp=0, born_host=msg.born_host.to_bytes(), store_host=msg.store_host.to_bytes(),
        reconsume_times=0, prepared_transaction_offset=0,
    ))
    body_end = 88 + 3
    v2 = bytearray(v1[:body_end] + struct.pack(">h", 200) + b"T" * 200 + v1[body_end + 1:])
    struct.pack_into(">ii", v2, 0, len(v2), MESSAGE_MAGIC_CODE_V2)
    decoded = decode_record(v2)
    assert isinstance(decoded, StoredMessage)
    assert (decoded.magic, decoded.topic, decoded.body, decoded.properties) == (
        MESSAGE_MAGIC_CODE_V2, "T" * 200, b"abc", {"TAGS": "t"})


# -- properties ------------------------------------------------------------------------------------
@given(property_maps)
def test_properties_round_trip(props: dict[str, str]) -> None:
    text = properties_to_string(props)
    assert not text.endswith("\x02")
    assert text.count("\x02") == max(len(props) - 1, 0)
    assert string_to_properties(text) == props


def test_properties_to_string_is_rocketmq_format() -> None:
    assert properties_to_string({}) == ""
    assert properties_to_string({"A": "1"}) == "A\x011"
    assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("a\x01b", {"a": "b"}),
        ("a\x01", {}),  # 2 characters: skipped
        ("\x01b", {}),  # 2 characters: skipped
        ("ab", {}),  # no separator
        ("abc", {}),  # 3 characters but no separator
        ("\x01bc", {}),  # empty name
        ("key\x01", {}),  # empty value
        ("\x01\x01", {}),
        ("a\x01b\x02", {"a": "b"}),  # trailing separator
        ("\x02a\x01b", {"a": "b"}),  # leading separator
        ("a\x01b\x02\x02c\x01d", {"a": "b", "c": "d"}),  # empty pair in the middle
        ("a\x01b\x02x\x02c\x01d", {"a": "b", "c": "d"}),  # a 1-character pair is skipped
        ("k\x01v\x01w", {"k": "v\x01w"}),  # the first \x01 separates, later ones belong to the value
        ("k\x011\x02k\x012", {"k": "2"}),  # a repeated name: the last one wins (HashMap.put)
        ("noval\x02a\x01b", {"a": "b"}),
        ("中\x01文", {"中": "文"}),
        ("😀\x01😀", {"😀": "😀"}),
    ],
)
def test_string_to_properties_lenient_rules(text: str, expected: dict[str, str]) -> None:
    assert string_to_properties(text) == expected


def java_string2message_properties(text: str) -> dict[str, str]:
    """RocketMQ's string2messageProperties, run over UTF-16 code units as Java's String does."""
    raw = text.encode("utf-16-be")
    units = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]

    def index_of(ch: str, start: int) -> int:
        for i in range(start, len(units)):
            if units[i] == ord(ch):
                return i
        return -1

    def substring(begin: int, end: int) -> str:
        return raw[begin * 2 : end * 2].decode("utf-16-be")

    result: dict[str, str] = {}
    index = 0
    while index < len(units):
        new_index = index_of("\x02", index)
        if new_index < 0:
            new_index = len(units)
        if new_index - index >= 3:
            kv = index_of("\x01", index)
            if index < kv < new_index - 1:
                result[substring(index, kv)] = substring(kv + 1, new_index)
        index = new_index + 1
    return result


@settings(max_examples=300)
@given(st.one_of(
    st.text(st.sampled_from(["a", "b", "\x01", "\x02", "😀", "é", "中"]), max_size=30),
    st.text(ANY_CHAR, max_size=30),
))
@example("😀\x01")  # 2 code points, 3 UTF-16 units: Java measures the pair as 3 long
@example("\x01😀")
@example("😀\x01😀\x02\x02a\x01")
def test_string_to_properties_matches_java_over_utf16(text: str) -> None:
    assert string_to_properties(text) == java_string2message_properties(text)


# -- batches ---------------------------------------------------------------------------------------
batch_items = st.builds(BatchItem, body=st.binary(max_size=200), flag=I32, properties=property_maps)


@given(st.lists(batch_items, max_size=12))
def test_batch_round_trip(items: list[BatchItem]) -> None:
    data = encode_batch(items)
    assert decode_batch(data) == items
    assert decode_batch(memoryview(data)) == items


def test_batch_item_layout_is_rocketmq_encode_message() -> None:
    """MessageDecoder.encodeMessage: totalSize, magic 0, crc 0, flag, bodyLen, body, propLen i16, props."""
    data = encode_batch([BatchItem(body=b"hi", flag=9, properties={"TAGS": "x"})])
    props = b"TAGS\x01x"
    assert data == struct.pack(">iiiii", 20 + 2 + 2 + len(props), 0, 0, 9, 2) + b"hi" + struct.pack(
        ">h", len(props)) + props
    assert encode_batch([]) == b""
    assert decode_batch(b"") == []


def _item_bounds(items: list[BatchItem]) -> list[int]:
    bounds = [0]
    for item in items:
        bounds.append(bounds[-1] + len(encode_batch([item])))
    return bounds


@given(st.lists(batch_items, min_size=1, max_size=6), st.data())
def test_truncated_batch_names_the_cut_item(items: list[BatchItem], data: st.DataObject) -> None:
    encoded = encode_batch(items)
    bounds = _item_bounds(items)
    cut = data.draw(st.integers(1, len(encoded) - 1), label="cut")
    assume(cut not in bounds)
    culprit = next(i for i in range(len(items)) if bounds[i] < cut < bounds[i + 1])
    with pytest.raises(ValueError, match=rf"batch item {culprit} at byte {bounds[culprit]}\b"):
        decode_batch(encoded[:cut])


def _item(size: int | None = None, body_len: int | None = None, body: bytes = b"abc",
          props: bytes = b"a\x01b", props_len: int | None = None) -> bytes:
    size = 20 + len(body) + 2 + len(props) if size is None else size
    body_len = len(body) if body_len is None else body_len
    props_len = len(props) if props_len is None else props_len
    return struct.pack(">iiiii", size, 0, 0, 0, body_len) + body + struct.pack(">h", props_len) + props


GOOD = _item()


@pytest.mark.parametrize(
    ("data", "item", "what"),
    [
        (GOOD + b"\x00" * 5, 1, "truncated"),  # trailing bytes shorter than an item header
        (GOOD + _item(size=21), 1, "inconsistent sizes"),  # smaller than any item can be
        (GOOD + _item(size=0), 1, "inconsistent sizes"),
        (GOOD + _item(size=-40), 1, "inconsistent sizes"),
        (_item(size=1000), 0, "inconsistent sizes"),  # runs past the data
        (GOOD + GOOD + _item(body_len=-1), 2, "inconsistent sizes"),
        (_item(body_len=50), 0, "inconsistent sizes"),  # body longer than the item
        (_item(props_len=-3), 0, "properties length"),
        (_item(props_len=1), 0, "properties length"),  # fewer bytes than the item holds
        (GOOD + _item(props=b"a\x01\xff\xfe"), 1, "UTF-8"),  # properties that are not text
    ],    ids=["short-tail", "size-21", "size-0", "size-negative", "size-past-end", "body-len-negative",
         "body-len-past-item", "props-len-negative", "props-len-short", "props-not-utf8"],
)
def test_malformed_batch_raises_value_error_naming_the_item(data: bytes, item: int, what: str) -> None:
    with pytest.raises(ValueError, match=rf"batch item {item} .*{re.escape(what)}"):
        decode_batch(data)


def test_encode_batch_refuses_oversized_properties() -> None:
    with pytest.raises(ValueError, match="32767"):
        encode_batch([BatchItem(body=b"", properties={"K": "v" * MAX_PROPERTIES_LENGTH})])


# -- message ids -----------------------------------------------------------------------------------
@given(host=v4_hosts, offset=I64)
def test_message_id_round_trip_ipv4(host: HostAddress, offset: int) -> None:
    msg_id = create_message_id(host, offset)
    assert len(msg_id) == 32
    assert re.fullmatch(r"[0-9A-F]{32}", msg_id)
    assert decode_message_id(msg_id) == (host, offset)
    assert decode_message_id(msg_id.lower()) == (host, offset)


@given(host=v6_hosts, offset=I64)
def test_message_id_round_trip_ipv6(host: HostAddress, offset: int) -> None:
    msg_id = create_message_id(host, offset)
    assert len(msg_id) == 56
    assert re.fullmatch(r"[0-9A-F]{56}", msg_id)
    assert decode_message_id(msg_id) == (host, offset)


def test_message_id_known_values() -> None:
    # 10.0.0.1 -> 0A000001, port 10911 -> 00002A9F, offset 0x1234 as i64
    assert create_message_id(HostAddress("10.0.0.1", 10911), 0x1234) == "0A00000100002A9F0000000000001234"
    v6 = create_message_id(HostAddress("2001:db8::1", 10911), 1)
    assert v6 == "20010DB8000000000000000000000001" + "00002A9F" + "0000000000000001"
    record = mutable_record(Message(topic="T", body=b"x", store_host=HostAddress("10.0.0.1", 10911)))
    stamp_record(record, 0, 0, 0x1234, 1, 0)
    decoded = decode_record(record)
    assert isinstance(decoded, StoredMessage)
    assert decoded.msg_id == "0A00000100002A9F0000000000001234"


@pytest.mark.parametrize("bad", ["", "0A", "0A00000100002A9F000000000000123", "ZZ" * 16, "0A" * 20])
def test_decode_message_id_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_message_id(bad)


# -- java_string_hash --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),  # 'a' = 97
        ("abc", 96354),  # (97 * 31 + 98) * 31 + 99
        ("hello", 99162322),
        ("Aa", 2112),  # 65 * 31 + 97
        ("BB", 2112),  # 66 * 31 + 66: the classic collision
        ("polygenelubricants", -2147483648),  # wraps to Integer.MIN_VALUE
        # U+1F600 is the surrogate pair D83D DE00: 55357 * 31 + 56832 = 1716067 + 56832 = 1772899
        # (confirmed with "\uD83D\uDE00".hashCode() on a JVM)
        ("😀", 1772899),
        ("中文", 646394),  # 0x4E2D * 31 + 0x6587 = 20013 * 31 + 25991 = 620403 + 25991
        ("TopicTest#KEY-1", 173552481),  # from a JVM
        ("été", 227742),  # 233 * 961 + 116 * 31 + 233, from a JVM
    ],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def reference_java_hash(text: str) -> int:
    """Closed form s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, wrapped to int32 at the end."""
    raw = text.encode("utf-16-le")
    units = [raw[i] | raw[i + 1] << 8 for i in range(0, len(raw), 2)]
    n = len(units)
    total = sum(u * pow(31, n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@settings(max_examples=300)
@given(st.text(ANY_CHAR, max_size=64))
def test_java_string_hash_matches_reference(text: str) -> None:
    assert java_string_hash(text) == reference_java_hash(text)
    assert -(2**31) <= java_string_hash(text) < 2**31


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == java_string_hash("TagA")


# -- hostile bytes -----------------------------------------------------------------------------------
def _valid_record(body: bytes = b"some body bytes", topic: str = "TopicA") -> bytearray:
    record = mutable_record(Message(topic=topic, body=body, properties={"TAGS": "t", "KEYS": "k"}))
    stamp_record(record, 0, 1, 0, 1_700_000_000_000, 0)
    return record


def _assert_decode_result(result: object) -> None:
    assert isinstance(result, StoredMessage | BlankRecord | CorruptRecord)
    if isinstance(result, CorruptRecord):
        assert result.reason


@settings(max_examples=300)
@given(st.binary(max_size=400), st.data())
def test_garbage_never_raises(data: bytes, draw: st.DataObject) -> None:
    pos = draw.draw(st.integers(0, len(data)), label="pos")
    _assert_decode_result(decode_record(data, pos))
    _assert_decode_result(decode_record(data, pos, check_crc=False, read_body=False))


@settings(max_examples=300)
@given(st.data())
def test_damaged_record_never_raises(draw: st.DataObject) -> None:
    """A real record with bytes overwritten anywhere (the header included) still decodes to a result."""
    record = _valid_record(body=draw.draw(st.binary(max_size=64), label="body"))
    for _ in range(draw.draw(st.integers(1, 4), label="edits")):
        at = draw.draw(st.integers(0, len(record) - 1), label="at")
        patch = draw.draw(st.binary(min_size=1, max_size=8), label="patch")
        record[at : at + len(patch)] = patch
    cut = draw.draw(st.integers(0, len(record)), label="cut")
    _assert_decode_result(decode_record(bytes(record[:cut])))
    _assert_decode_result(decode_record(bytes(record[:cut]), check_crc=False))


@given(st.binary(max_size=50), st.data())
def test_truncated_record_is_corrupt(body: bytes, draw: st.DataObject) -> None:
    record = _valid_record(body=body)
    cut = draw.draw(st.integers(0, len(record) - 1), label="cut")
    result = decode_record(bytes(record[:cut]))
    assert isinstance(result, CorruptRecord)
    assert "runs past the data" in result.reason or "header needs 8" in result.reason


def test_field_lengths_that_overrun_the_record_are_corrupt_not_exceptions() -> None:
    """A body length that swallows topic and properties leaves the topic-length byte past the buffer."""
    record = bytearray(encode_record(
        topic_data=b"", body=b"0123456789", properties_data=b"", queue_id=0, flag=0, sys_flag=0,
        born_timestamp=0, born_host=HostAddress("1.2.3.4", 1).to_bytes(),
        store_host=HostAddress("1.2.3.4", 2).to_bytes(), reconsume_times=0, prepared_transaction_offset=0,
    ))
    assert len(record) == V4_V4_FIXED + 10
    struct.pack_into(">i", record, 84, 13)  # bodyLength 13: body now ends exactly at the record's end
    for check_crc in (True, False):
        result = decode_record(bytes(record), check_crc=check_crc)
        assert isinstance(result, CorruptRecord), result
    struct.pack_into(">i", record, 84, 12)  # topic length byte is the last byte, properties length missing
    assert isinstance(decode_record(bytes(record), check_crc=False), CorruptRecord)
    struct.pack_into(">i", record, 84, -1)
    result = decode_record(bytes(record))
    assert isinstance(result, CorruptRecord)
    assert "body length -1" in result.reason


def test_total_size_that_disagrees_with_the_fields_is_corrupt() -> None:
    record = _valid_record() + bytearray(16)
    struct.pack_into(">i", record, 0, len(record))  # claims 16 more bytes than its fields hold
    result = decode_record(record)
    assert isinstance(result, CorruptRecord)
    assert "add up" in result.reason


def test_properties_that_are_not_utf8_still_decode_like_java() -> None:
    """RocketMQ copies batch item properties verbatim, so a RocketMQ store can hold non-UTF-8 bytes;
    Java's String decoder substitutes U+FFFD instead of failing, and recovery must not cut the log there."""
    props = b"TAGS\x01ok\x02BAD\x01\xff\xfe"
    record = encode_record(
        topic_data=b"T", body=b"x", properties_data=props, queue_id=0, flag=0, sys_flag=0, born_timestamp=0,
        born_host=HostAddress("1.2.3.4", 1).to_bytes(), store_host=HostAddress("1.2.3.4", 2).to_bytes(),
        reconsume_times=0, prepared_transaction_offset=0,
    )
    result = decode_record(record)
    assert isinstance(result, StoredMessage), result
    assert result.properties["TAGS"] == "ok"
    assert result.properties["BAD"].startswith("\ufffd")


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00" * 7])
def test_short_input_is_corrupt(data: bytes) -> None:
    result = decode_record(data)
    assert isinstance(result, CorruptRecord)
    assert "header needs 8" in result.reason


def test_zeroed_space_is_corrupt_with_illegal_magic() -> None:
    result = decode_record(b"\x00" * 200, 40)
    assert isinstance(result, CorruptRecord)
    assert "illegal magic code 0x00000000 at 40" in result.reason


def test_position_past_the_end_is_corrupt() -> None:
    record = _valid_record()
    result = decode_record(record, len(record) + 10)
    assert isinstance(result, CorruptRecord)


@pytest.mark.parametrize("size", [8, 100, 4096, 0, -5])
def test_blank_record(size: int) -> None:
    data = encode_blank(size) + b"\xAA" * 20  # the rest of a segment is left as it was
    assert data[:8] == struct.pack(">ii", size, BLANK_MAGIC_CODE)
    assert decode_record(data) == BlankRecord(size)


def test_blank_magic_is_the_rocketmq_constant() -> None:
    assert struct.unpack(">i", bytes.fromhex("CBD43194"))[0] == BLANK_MAGIC_CODE
    assert struct.unpack(">i", bytes.fromhex("DAA320A7"))[0] == MESSAGE_MAGIC_CODE


def test_records_back_to_back_decode_in_sequence() -> None:
    """What recovery does: walk a segment record by record until the blank."""
    segment = bytearray(4096)
    pos = 0
    expected = []
    for i in range(5):
        msg = Message(topic=f"T{i}", body=bytes([i]) * (i * 10), queue_id=i,
                      born_host=HostAddress("::1", 1) if i % 2 else HostAddress("127.0.0.1", 1))
        record = mutable_record(msg)
        stamp_record(record, 0, i, pos, 1000 + i, with_host_flags(0, msg.born_host, msg.store_host))
        segment[pos : pos + len(record)] = record
        expected.append((pos, msg))
        pos += len(record)
    segment[pos : pos + 8] = encode_blank(4096 - pos)
    walk = 0
    for i, (at, msg) in enumerate(expected):
        assert walk == at
        decoded = decode_record(segment, walk)
        assert_decodes_to(decoded, msg, i, at, 1000 + i)
        assert isinstance(decoded, StoredMessage)
        walk += decoded.total_size
    assert decode_record(segment, walk) == BlankRecord(4096 - pos)


def test_host_address_from_bytes_and_str() -> None:
    v4 = HostAddress("192.168.1.10", 10911)
    assert HostAddress.from_bytes(v4.to_bytes()) == v4
    assert str(v4) == "192.168.1.10:10911"
    v6 = HostAddress(str(ipaddress.ip_address("2001:db8::2")), 10911)
    assert v6.is_v6
    assert len(v6.to_bytes()) == 20
    assert str(v6) == "[2001:db8::2]:10911"
    assert body_crc(b"") == 0
