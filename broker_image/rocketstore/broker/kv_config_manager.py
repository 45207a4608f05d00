"""The name server's KV config (RocketMQ's namesrv KVConfigManager): namespace -> key -> value.

Clients and tools read it through the name server (GET_KV_CONFIG 101, GET_KVLIST_BY_NAMESPACE
219) and write it with PUT_KV_CONFIG (100) / DELETE_KV_CONFIG (102); RocketMQ itself keeps the
order-topic settings in namespace ``ORDER_TOPIC_CONFIG`` (see ``orderMessageEnable``). It lives
in ``kvConfig.json`` in the store's config directory, as RocketMQ's KVConfigSerializeWrapper
writes it: ``{"configTable":{"namespace":{"key":"value"}}}``, compact (fastjson's toJson()),
rewritten after every change.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rocketstore.common.fastjson import as_object, parse_fastjson, to_json
from rocketstore.store.config_manager import ConfigManager

#: RocketMQ's NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG: topic -> "brokerName:queueNums;..."
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager(ConfigManager):
    FILE_NAME: ClassVar[str] = "kvConfig.json"

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir)
        self._table: dict[str, dict[str, str]] = {}

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self._table.setdefault(namespace, {})[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        """Forget one item; the namespace stays (empty), as in RocketMQ."""
        with self._lock:
            self._table.get(namespace, {}).pop(key, None)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace's items, or None when the namespace was never written."""
        with self._lock:
            items = self._table.get(namespace)
            return None if items is None else dict(items)

    def encode(self, pretty: bool = False) -> str:
        """Always compact: RocketMQ writes kvConfig.json with toJson(), not toJson(true)."""
        with self._lock:
            return to_json({"configTable": self._table}, False)

    def decode(self, text: str) -> None:
        root = as_object(parse_fastjson(text), self.FILE_NAME)
        table: dict[str, dict[str, str]] = {}
        for namespace, items in as_object(root.get("configTable", {}), "configTable").items():
            entries = as_object(items, f"configTable[{namespace}]")
            for key, value in entries.items():
                if not isinstance(value, str):
                    raise ValueError(f"configTable[{namespace}][{key}]: expected a string, got {value!r}")
            table[namespace] = dict(entries)
        with self._lock:
            self._table = table
