"""CommitLog message records: RocketMQ's on-disk encoding, byte for byte.

A v1 record (RocketMQ 4.x; all integers big-endian)::

    off  size  field
    0    4     totalSize          whole record, this field included
    4    4     magic              0xDAA320A7 (v1) / 0xDAA320AB (v2, 5.x: 2-byte topic length)
    8    4     bodyCRC            zlib CRC32 of the body & 0x7FFFFFFF
    12   4     queueId
    16   4     flag               user flag, copied from the producer
    20   8     queueOffset        logical position in the ConsumeQueue
    28   8     physicalOffset     global CommitLog offset of this record
    36   4     sysFlag            see SysFlag
    40   8     bornTimestamp      ms
    48   8|20  bornHost           IPv4 (4) or IPv6 (16) address + port i32 (BORNHOST_V6)
    ..   8     storeTimestamp     ms
    ..   8|20  storeHost          as bornHost (STOREHOST_V6)
    ..   4     reconsumeTimes
    ..   8     preparedTransactionOffset
    ..   4+n   bodyLength + body
    ..   1+n   topicLength (i8; i16 in v2) + topic (UTF-8)
    ..   2+n   propertiesLength (i16) + properties  (name \\x01 value \\x02 ..., no trailing \\x02)

At the end of a segment, when a record plus 8 bytes no longer fits, the writer puts
``[remaining i32][BLANK_MAGIC i32]`` and rolls to the next segment.

One decoder (:func:`decode_record`) serves recovery, dispatch and readers, and returns a typed
result instead of RocketMQ's sentinel sizes, so no caller can mistake "end of segment" for
"corrupt".
"""

from __future__ import annotations

import array
import functools
import ipaddress
import mmap
import operator
import socket
import struct
import sys
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocketstore.common.native import NATIVE

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
#: where a delayed (or half) message really goes, kept while it waits in a system topic
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
KEY_SEPARATOR = " "

MAX_TOPIC_LENGTH_V1 = 127
MAX_PROPERTIES_LENGTH = 32767


class SysFlag:
    """MessageSysFlag bits that decide how a record is laid out and indexed.

    Plain ints rather than an IntFlag: they are tested on every put and every dispatch, and
    enum arithmetic costs microseconds there.
    """

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of a sysFlag (0, PREPARED, COMMIT or ROLLBACK)."""
    return sys_flag & TRANSACTION_TYPE_MASK


_POW31_DESCENDING: list[int] = [1]  # [31^(k-1) mod 2^32, ..., 31, 1], grown on demand


def _powers_of_31(n: int) -> list[int]:
    global _POW31_DESCENDING
    if len(_POW31_DESCENDING) < n:
        k = max(n, 2 * len(_POW31_DESCENDING))
        _POW31_DESCENDING = [pow(31, i, 1 << 32) for i in range(k - 1, -1, -1)]
    return _POW31_DESCENDING[len(_POW31_DESCENDING) - n :]


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode()``: 31-polynomial over UTF-16 code units, as a signed int32.

    ConsumeQueue tag codes and IndexFile slots are computed with it; any other hash would
    make our files unreadable to RocketMQ and theirs to us. It is evaluated as a dot product
    with precomputed powers of 31 (C loops) instead of Horner's rule in Python, because
    dispatch hashes every key of every message.
    """
    if value.isascii():
        units: bytes | array.array[int] = value.encode("ascii")
    else:
        units = array.array("H", value.encode("utf-16-le" if sys.byteorder == "little" else "utf-16-be"))
    h: int = sum(map(operator.mul, units, _powers_of_31(len(units)))) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def tags_code(tags: str | None) -> int:
    """tagsCode stored in a ConsumeQueue entry: the Java hash of the tag string (0 if none).

    Cached: a topic uses a handful of tags, and dispatch asks for every message.
    """
    if not tags:
        return 0
    return java_string_hash(tags)


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """Body checksum as RocketMQ's UtilAll.crc32: CRC32 masked to a non-negative int32."""
    return zlib.crc32(body) & 0x7FFFFFFF


def properties_to_string(properties: Mapping[str, str]) -> str:
    """Encode properties the way MessageDecoder.messageProperties2String does."""
    return PROPERTY_SEPARATOR.join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}" for name, value in properties.items() if value is not None
    )


def string_to_properties(text: str) -> dict[str, str]:
    """Decode properties leniently, mirroring string2messageProperties.

    Pairs shorter than 3 characters, without a separator, or with an empty name or value are
    skipped, exactly as RocketMQ skips them, so both sides see the same property map.
    """
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if len(item) < 3:
            continue
        sep = item.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(item) - 1:
            result[item[:sep]] = item[sep + 1 :]
    return result


@functools.lru_cache(maxsize=4096)
def _host_bytes(host: str, port: int) -> bytes:
    """Encoded hosts, cached: every put encodes its born and store host."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.inet_pton(family, host) + struct.pack(">i", port)


@dataclass(frozen=True, slots=True)
class HostAddress:
    """An IP address and port, as stored in bornHost / storeHost."""

    host: str
    port: int
    #: computed once: every put asks it of both hosts (with_host_flags)
    is_v6: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_v6", ":" in self.host)

    def to_bytes(self) -> bytes:
        """4 or 16 address bytes followed by the port as i32."""
        return _host_bytes(self.host, self.port)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> HostAddress:
        return _host_from_bytes(bytes(data))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if self.is_v6 else f"{self.host}:{self.port}"


@functools.lru_cache(maxsize=4096)
def _host_from_bytes(raw: bytes) -> HostAddress:
    """Decoded hosts, cached: a store sees few distinct hosts and dispatch decodes every record."""
    (port,) = struct.unpack(">i", raw[-4:])
    return HostAddress(str(ipaddress.ip_address(raw[:-4])), port)


DEFAULT_BORN_HOST = HostAddress("127.0.0.1", 0)
DEFAULT_STORE_HOST = HostAddress("127.0.0.1", 10911)


@dataclass(slots=True)
class Message:
    """A message handed to the store: RocketMQ's MessageExtBrokerInner, minus what the store assigns.

    queue_offset, physical offset and store timestamp are decided under the put lock.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: HostAddress = DEFAULT_BORN_HOST
    store_host: HostAddress = DEFAULT_STORE_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


@dataclass(slots=True)  # not frozen: built per message, and frozen init costs a setattr per field
class StoredMessage:
    """A record read back from the CommitLog: RocketMQ's MessageExt."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def msg_id(self) -> str:
        """The broker's offset message id (store host + physical offset)."""
        return create_message_id(self.store_host, self.physical_offset)


@dataclass(frozen=True, slots=True)
class BlankRecord:
    """The end-of-segment filler: readers move on to the next segment."""

    size: int


@dataclass(frozen=True, slots=True)
class CorruptRecord:
    """A record that failed a check; ``reason`` says which, for recovery logs and ``verify``."""

    reason: str


DecodeResult = StoredMessage | BlankRecord | CorruptRecord

_HEAD = struct.Struct(">iiiiiqqiq")  # totalSize .. bornTimestamp: 48 bytes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_TWO_I64 = struct.Struct(">qq")
_EMPTY = bytearray()
_TAIL_AFTER_STORE_HOST = struct.Struct(">iqi")  # reconsumeTimes, preparedTxOffset, bodyLength

QUEUE_OFFSET_POS = 20
SYS_FLAG_POS = 36
PHYSICAL_OFFSET_POS = 28
BORN_HOST_POS = 48


def host_length(sys_flag: int, v6_bit: int) -> int:
    """Bytes of a host field: 8 for IPv4, 20 for IPv6."""
    return 20 if sys_flag & v6_bit else 8


def store_timestamp_pos(sys_flag: int) -> int:
    """Where storeTimestamp sits; it moves when bornHost is IPv6."""
    return BORN_HOST_POS + host_length(sys_flag, SysFlag.BORNHOST_V6)


def record_length(sys_flag: int, body_length: int, topic_length: int, properties_length: int) -> int:
    """RocketMQ's calMsgLength for a v1 record."""
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        + host_length(sys_flag, SysFlag.BORNHOST_V6)
        + 8
        + host_length(sys_flag, SysFlag.STOREHOST_V6)
        + 4 + 8
        + 4 + body_length
        + 1 + topic_length
        + 2 + properties_length
    )


def with_host_flags(sys_flag: int, born_host: HostAddress, store_host: HostAddress) -> int:
    """sysFlag with the IPv6 bits set to match the hosts, as the broker does before a put."""
    sys_flag &= ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if born_host.is_v6:
        sys_flag |= SysFlag.BORNHOST_V6
    if store_host.is_v6:
        sys_flag |= SysFlag.STOREHOST_V6
    return sys_flag


def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    """Fixed part of a record, totalSize through bodyLength, for one combination of host sizes."""
    born = "20s" if born_v6 else "8s"
    store = "20s" if store_v6 else "8s"
    return struct.Struct(f">iiiiiqqiq{born}q{store}iqi")


_HEADERS = {(b, s): _header_struct(b, s) for b in (False, True) for s in (False, True)}
#: the same, by the byte lengths of the encoded hosts: any other length is not a host
_HEADERS_BY_HOST_LENGTH = {(8 + 12 * b, 8 + 12 * s): header for (b, s), header in _HEADERS.items()}


def encode_record_python(
    *,
    topic_data: bytes,
    body: bytes,
    properties_data: bytes,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    crc: int | None = None,
) -> bytearray:
    """Encode a record with queueOffset, physicalOffset and storeTimestamp left as zero.

    Those three are known only under the put lock; :func:`stamp_record` fills them in where
    the record is written, so the costly part of encoding happens outside the lock, as in
    RocketMQ's MessageExtEncoder. This is the reference; :data:`encode_record` is the Rust
    twin when the extension runs.
    """
    header = _HEADERS_BY_HOST_LENGTH.get((len(born_host), len(store_host)))
    if header is None:
        raise ValueError(f"born_host and store_host must be 8 (IPv4) or 20 (IPv6) bytes, got "
                         f"{len(born_host)} and {len(store_host)}")
    length = header.size + len(body) + 1 + len(topic_data) + 2 + len(properties_data)
    return _EMPTY.join((  # a bytearray: stamped in place under the put lock, then copied once
        header.pack(
            length, MESSAGE_MAGIC_CODE, body_crc(body) if crc is None else crc, queue_id, flag, 0, 0,
            sys_flag, born_timestamp, born_host, 0, store_host, reconsume_times, prepared_transaction_offset,
            len(body),
        ),
        body,
        bytes((len(topic_data),)),
        topic_data,
        _I16.pack(len(properties_data)),
        properties_data,
    ))


encode_record = NATIVE.encode_record if NATIVE is not None else encode_record_python
"""The record encoder this process runs: the Rust extension's unless it is absent or switched off."""


def stamp_record(
    buf: bytearray | memoryview | mmap.mmap, pos: int, queue_offset: int, physical_offset: int,
    store_timestamp: int, sys_flag: int,
) -> None:
    """Fill in the fields that are only known under the put lock."""
    _TWO_I64.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset, physical_offset)
    _I64.pack_into(buf, pos + store_timestamp_pos(sys_flag), store_timestamp)


def stamp_records_python(
    payload: bytearray, count: int, queue_offset: int, physical_offset: int, store_timestamp: int, sys_flag: int,
    counts_in_queue: bool,
) -> None:
    """Stamp ``count`` records lying back to back in ``payload``, which lands at ``physical_offset``.

    The reference; :data:`stamp_records` is the Rust twin when the extension runs. Queue offsets
    count up from ``queue_offset``, or stay 0 for records that get no ConsumeQueue entry.
    """
    pos = 0
    for i in range(count):
        (size,) = _I32.unpack_from(payload, pos)
        stamp_record(payload, pos, queue_offset + i if counts_in_queue else 0, physical_offset + pos,
                     store_timestamp, sys_flag)
        pos += size


stamp_records = NATIVE.stamp_records if NATIVE is not None else stamp_records_python
"""The batch stamper this process runs."""


def encode_batch_records_python(
    items: Iterable[tuple[bytes, int, str]],
    batch_properties: bytes,
    *,
    topic_data: bytes,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_host: bytes,
    reconsume_times: int,
) -> tuple[bytearray, int, int] | None:
    """The records of a batch put, back to back: (payload, record count, the batch's wire size).

    Each item's properties get the batch's appended (with a separator when needed), as
    MessageExtBatchEncoder does; None when that makes one longer than a record can hold. The
    wire size (20-byte item header + body + 2 + the item's own properties) is what RocketMQ holds
    against maxMessageSize. The reference; :data:`encode_batch_records` is the Rust twin.
    """
    records = []
    wire_size = 0
    for body, flag, item_properties in items:
        props = item_properties.encode()
        wire_size += 20 + len(body) + 2 + len(props)
        if props and batch_properties and not props.endswith(b"\x02"):
            props += b"\x02"
        props += batch_properties
        if len(props) > MAX_PROPERTIES_LENGTH:
            return None
        records.append(encode_record_python(
            topic_data=topic_data, body=body, properties_data=props, queue_id=queue_id, flag=flag,
            sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host, store_host=store_host,
            reconsume_times=reconsume_times, prepared_transaction_offset=0,
        ))
    return bytearray().join(records), len(records), wire_size


encode_batch_records = NATIVE.encode_batch_records if NATIVE is not None else encode_batch_records_python
"""The batch encoder this process runs."""


def encode_message(message: Message, crc: int | None = None) -> bytearray:
    """Encode a :class:`Message` (see :func:`encode_record` for what is left to stamp)."""
    sys_flag = with_host_flags(message.sys_flag, message.born_host, message.store_host)
    return encode_record(
        topic_data=message.topic.encode(),
        body=message.body,
        properties_data=properties_to_string(message.properties).encode(),
        queue_id=message.queue_id,
        flag=message.flag,
        sys_flag=sys_flag,
        born_timestamp=message.born_timestamp,
        born_host=message.born_host.to_bytes(),
        store_host=message.store_host.to_bytes(),
        reconsume_times=message.reconsume_times,
        prepared_transaction_offset=message.prepared_transaction_offset,
        crc=crc,
    )


def encode_blank(size: int) -> bytes:
    """The end-of-segment filler header; the rest of the segment is left as is."""
    return _I32.pack(size) + _I32.pack(BLANK_MAGIC_CODE)


Buffer = bytes | bytearray | memoryview | mmap.mmap


def decode_record(
    buf: Buffer, pos: int = 0, *, check_crc: bool = True, read_body: bool = True
) -> DecodeResult:
    """Decode the record at ``pos``; the single decoder behind recovery, dispatch and reads.

    It never raises on bad bytes: a truncated or inconsistent record comes back as
    :class:`CorruptRecord` with the reason, because recovery must stop there, not crash.
    """
    limit = len(buf)
    if pos + 8 > limit:
        return CorruptRecord(f"only {limit - pos} bytes left at {pos}, a header needs 8")
    total_size, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return BlankRecord(total_size)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return CorruptRecord(f"illegal magic code 0x{magic & 0xFFFFFFFF:08X} at {pos}")
    if total_size < record_length(0, 0, 0, 0) or pos + total_size > limit:
        return CorruptRecord(f"record size {total_size} at {pos} runs past the data ({limit - pos} bytes)")
    try:
        return _decode_message(buf, pos, total_size, magic, check_crc, read_body)
    except (struct.error, ValueError, IndexError) as exc:  # IndexError: a length byte past the buffer
        return CorruptRecord(f"undecodable record at {pos}: {exc}")


def _decode_message(
    buf: Buffer, pos: int, total_size: int, magic: int, check_crc: bool, read_body: bool
) -> DecodeResult:
    end = pos + total_size
    (sys_flag,) = _I32.unpack_from(buf, pos + SYS_FLAG_POS)
    header = _HEADERS[bool(sys_flag & SysFlag.BORNHOST_V6), bool(sys_flag & SysFlag.STOREHOST_V6)]
    if pos + header.size > end:
        return CorruptRecord(f"record at {pos} is shorter ({total_size}) than its fixed fields ({header.size})")
    (_, _, crc, queue_id, flag, queue_offset, physical_offset, _, born_ts, born_raw, store_ts, store_raw,
     reconsume_times, prepared_offset, body_length) = header.unpack_from(buf, pos)
    born_host = _host_from_bytes(born_raw)
    store_host = _host_from_bytes(store_raw)
    p = pos + header.size
    if body_length < 0 or p + body_length > end:
        return CorruptRecord(f"body length {body_length} at {pos} runs past the record")
    body = bytes(buf[p : p + body_length]) if read_body else b""
    if check_crc and body_length > 0:
        if read_body:
            computed = body_crc(body)
        else:  # recovery: checksum the body in place instead of copying it out
            with memoryview(buf) as view:
                computed = body_crc(view[p : p + body_length])
        if computed != crc:
            return CorruptRecord(f"body CRC mismatch at {pos}: stored {crc}, computed {computed}")
    p += body_length
    if magic == MESSAGE_MAGIC_CODE_V2:
        (topic_length,) = _I16.unpack_from(buf, p)
        p += 2
        if topic_length < 0:  # RocketMQ's decoder fails reading a negative length: corrupt
            return CorruptRecord(f"negative topic length {topic_length} at {pos}")
    else:
        topic_length = buf[p]
        p += 1
    # Java's new String(bytes, UTF_8) substitutes U+FFFD for malformed bytes; a RocketMQ log can hold
    # them (batch properties are copied verbatim), so failing here would cut a valid log at recovery.
    topic = bytes(buf[p : p + topic_length]).decode(errors="replace")
    p += topic_length
    (properties_length,) = _I16.unpack_from(buf, p)
    p += 2
    properties = (
        string_to_properties(bytes(buf[p : p + properties_length]).decode(errors="replace"))
        if properties_length > 0 else {}
    )
    p += max(properties_length, 0)
    expected = total_size if magic == MESSAGE_MAGIC_CODE_V2 else record_length(
        sys_flag, body_length, topic_length, max(properties_length, 0)
    )
    if p - pos != total_size or expected != total_size:
        return CorruptRecord(f"record at {pos} says {total_size} bytes, its fields add up to {p - pos}")
    return StoredMessage(
        total_size=total_size, magic=magic, body_crc=crc, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=born_host, store_timestamp=store_ts, store_host=store_host,
        reconsume_times=reconsume_times, prepared_transaction_offset=prepared_offset,
        body=body if read_body else b"", topic=topic, properties=properties,
    )


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One message of a SEND_BATCH_MESSAGE body."""

    body: bytes
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    """A batch body as the client sends it: per item totalSize, magic 0, crc 0, flag, body, properties."""
    parts: list[bytes] = []
    for item in items:
        props = properties_to_string(item.properties).encode()
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise ValueError(f"batch item properties are {len(props)} bytes, the limit is {MAX_PROPERTIES_LENGTH}")
        size = 4 + 4 + 4 + 4 + 4 + len(item.body) + 2 + len(props)
        parts.append(struct.pack(">iiiii", size, 0, 0, item.flag, len(item.body)))
        parts.append(item.body)
        parts.append(_I16.pack(len(props)) + props)
    return b"".join(parts)


def decode_batch(data: bytes | memoryview) -> list[BatchItem]:
    """Split a batch body; raises ValueError naming the item that is malformed."""
    items: list[BatchItem] = []
    pos = 0
    view = memoryview(data)
    while pos < len(view):
        if pos + 20 > len(view):
            raise ValueError(f"batch item {len(items)} at byte {pos} is truncated")
        size, _, _, flag, body_length = struct.unpack_from(">iiiii", view, pos)
        end = pos + size
        if size < 22 or end > len(view) or pos + 20 + body_length + 2 > end or body_length < 0:
            raise ValueError(f"batch item {len(items)} at byte {pos} has inconsistent sizes")
        p = pos + 20
        body = bytes(view[p : p + body_length])
        p += body_length
        (props_length,) = _I16.unpack_from(view, p)
        p += 2
        if props_length < 0 or p + props_length != end:
            raise ValueError(f"batch item {len(items)} at byte {pos} has inconsistent properties length")
        try:
            props = string_to_properties(bytes(view[p:end]).decode())
        except UnicodeDecodeError as exc:
            raise ValueError(f"batch item {len(items)} at byte {pos} has properties that are not UTF-8: {exc}") from exc
        items.append(BatchItem(body=body, flag=flag, properties=props))
        pos = end
    return items


def create_message_id(store_host: HostAddress, physical_offset: int) -> str:
    """Offset message id: hex of store address + port + physical offset (32 or 56 chars)."""
    return (store_host.to_bytes() + _I64.pack(physical_offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[HostAddress, int]:
    """Inverse of :func:`create_message_id`; raises ValueError for a malformed id."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"message id {msg_id!r} must be 32 (IPv4) or 56 (IPv6) hex characters")
    raw = bytes.fromhex(msg_id)
    (offset,) = _I64.unpack(raw[-8:])
    return HostAddress.from_bytes(raw[:-8]), offset
