"""RegisterBrokerBody: what a broker sends a name server with REGISTER_BROKER, in RocketMQ 4.9.8's two forms.

The body carries the broker's TopicConfigSerializeWrapper (its topic table and that table's
DataVersion) and its filter-server list. A broker sends it either

* as JSON (``compressed=false`` in the header, the default):
  ``{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{...},"topicConfigTable":{...}}}``;
* or, with ``compressedRegister=true``, as one zlib stream (Java's DeflaterOutputStream at
  BEST_COMPRESSION) of length-prefixed parts, each length a big-endian int32: the DataVersion
  JSON, the number of topics, each topic in TopicConfig's space-separated text form
  (``name readQueueNums writeQueueNums perm topicFilterType``), then the filter-server list as
  JSON. That text form has no topicSysFlag and no order flag, so a name server that receives the
  compressed form publishes topicSysFlag 0 for every topic, as RocketMQ's does.

A body that does not decode raises :class:`MalformedRequestError` naming what was wrong.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import as_object, parse_fastjson
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.remoting.command import MalformedRequestError

__all__ = ["RegisterBrokerBody", "TopicConfigSerializeWrapper"]

_INT = struct.Struct(">i")


@dataclass(frozen=True)
class TopicConfigSerializeWrapper:
    """A broker's topic table and its DataVersion, as registered and as GET_ALL_TOPIC_CONFIG returns them."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=lambda: DataVersion(0, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_dict(),
                "topicConfigTable": {name: config.to_dict() for name, config in self.topic_config_table.items()}}

    @classmethod
    def from_dict(cls, value: object) -> TopicConfigSerializeWrapper:
        data = as_object(value, "topicConfigSerializeWrapper")
        table = as_object(data.get("topicConfigTable") or {}, "topicConfigTable")
        return cls(topic_config_table={name: TopicConfig.from_dict(entry) for name, entry in table.items()},
                   data_version=DataVersion.from_dict(data.get("dataVersion") or {"counter": 0, "timestamp": 0}))


@dataclass(frozen=True)
class RegisterBrokerBody:
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        if not compressed:
            doc = {"filterServerList": self.filter_server_list,
                   "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_dict()}
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        wrapper = self.topic_config_serialize_wrapper
        parts = [_framed(_compact(wrapper.data_version.to_dict())),
                 _INT.pack(len(wrapper.topic_config_table))]
        parts += [_framed(_topic_text(config).encode()) for config in wrapper.topic_config_table.values()]
        parts.append(_framed(_compact(self.filter_server_list)))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, data: bytes, compressed: bool) -> RegisterBrokerBody:
        try:
            return _decode_compressed(data) if compressed else _decode_json(data)
        except MalformedRequestError:
            raise
        except (ValueError, TypeError, zlib.error, struct.error) as exc:
            form = "compressed" if compressed else "JSON"
            raise MalformedRequestError(f"RegisterBrokerBody ({form}) does not decode: {exc}") from None


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _framed(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


def _topic_text(config: TopicConfig) -> str:
    """TopicConfig.encode(): the five fields RocketMQ's compressed registration carries."""
    return (f"{config.topic_name} {config.read_queue_nums} {config.write_queue_nums} {config.perm} "
            f"{config.topic_filter_type.name}")


def _topic_from_text(text: str) -> TopicConfig:
    fields = text.split(" ")
    if len(fields) != 5 or fields[4] not in TopicFilterType.__members__:
        raise MalformedRequestError(f"RegisterBrokerBody topic entry {text[:200]!r} is not "
                                    "'name readQueueNums writeQueueNums perm topicFilterType'")
    return TopicConfig(fields[0], read_queue_nums=int(fields[1]), write_queue_nums=int(fields[2]),
                       perm=int(fields[3]), topic_filter_type=TopicFilterType[fields[4]])


def _decode_json(data: bytes) -> RegisterBrokerBody:
    doc = as_object(parse_fastjson(data.decode()), "RegisterBrokerBody")
    servers = doc.get("filterServerList") or []
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise MalformedRequestError("RegisterBrokerBody.filterServerList is not a list of strings")
    wrapper = TopicConfigSerializeWrapper.from_dict(doc.get("topicConfigSerializeWrapper") or {})
    return RegisterBrokerBody(wrapper, servers)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MalformedRequestError(f"RegisterBrokerBody (compressed) ends inside {what}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int(self, what: str) -> int:
        value: int = _INT.unpack(self.take(4, what))[0]
        return value

    def framed(self, what: str) -> bytes:
        return self.take(self.int(f"the length of {what}"), what)


def _decode_compressed(data: bytes) -> RegisterBrokerBody:
    reader = _Reader(zlib.decompress(data))
    version = DataVersion.from_dict(parse_fastjson(reader.framed("the data version").decode()))
    table: dict[str, TopicConfig] = {}
    for _ in range(reader.int("the topic count")):
        config = _topic_from_text(reader.framed("a topic config").decode())
        table[config.topic_name] = config
    servers = parse_fastjson(reader.framed("the filter server list").decode())
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise MalformedRequestError("RegisterBrokerBody filter server list is not a list of strings")
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, version), servers)
