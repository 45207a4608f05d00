"""TopicConfigManager: the broker's topic table (``topics.json``) and the rules that change it.

The table and its file format are :class:`rocketstore.store.config_manager.TopicConfigManager`;
this subclass adds what RocketMQ's broker-side TopicConfigManager adds, so one object answers every
question about topics, as in RocketMQ:

* the system topics, created when the table is loaded, before the file (so a file's own
  definition of one wins), and :meth:`TopicConfigManager.is_system_topic`;
* auto-creation: :meth:`TopicConfigManager.topic_config_for_send` (a send to a missing topic,
  from TBW102) and :meth:`TopicConfigManager.create_topic_in_send_back` (retry and DLQ topics);
* the order-topic table a name server hands back (:meth:`TopicConfigManager.update_order_topic_config`)
  and the table as registered (:meth:`TopicConfigManager.build_serialize_wrapper`).

Writing the file is not done here: every change is reported to ``on_change`` (the broker's
:class:`rocketstore.broker.config_persist_service.ConfigPersistService`, which writes the changed
tables in a worker thread), because the subscription groups and consumer offsets are written the
same way and callers such as UPDATE_AND_CREATE_TOPIC report their own changes to it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.common.mix_all import REPLY_TOPIC_POSTFIX
from rocketstore.common.perm_name import PERM_INHERIT, PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.common.topic_validator import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    RMQ_SYS_BENCHMARK_TOPIC,
    RMQ_SYS_OFFSET_MOVED_EVENT,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_SELF_TEST_TOPIC,
    SCHEDULE_TOPIC_QUEUE_NUM,
    is_system_topic,
)
from rocketstore.remoting.register_broker_body import TopicConfigSerializeWrapper
from rocketstore.store import config_manager
from rocketstore.store.config_manager import ConfigManager

log = logging.getLogger(__name__)


class TopicConfigManager(config_manager.TopicConfigManager):
    """topics.json plus the broker's topic rules; ``broker_config`` is read at use (live-updatable),
    ``on_change`` is called with this manager after every change it makes (from any thread)."""

    def __init__(self, config_dir: Path, broker_config: BrokerConfig,
                 on_change: Callable[[ConfigManager], None]) -> None:
        super().__init__(config_dir)
        self.broker_config = broker_config
        self._on_change = on_change
        self._create_lock = threading.Lock()  # auto-creation may be called from worker threads
        self._extra_system_topics: set[str] = set()

    def load(self) -> bool:
        """Create the system topics, then load topics.json over them."""
        self._create_system_topics()
        return super().load()

    def _create_system_topics(self) -> None:
        """The topics RocketMQ's TopicConfigManager creates in its constructor."""
        cfg = self.broker_config
        rw = PERM_READ | PERM_WRITE
        put = self.put
        put(TopicConfig(RMQ_SYS_SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1))
        if cfg.auto_create_topic_enable:
            put(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, read_queue_nums=cfg.default_topic_queue_nums,
                            write_queue_nums=cfg.default_topic_queue_nums, perm=PERM_INHERIT | rw))
        put(TopicConfig(RMQ_SYS_BENCHMARK_TOPIC, read_queue_nums=1024, write_queue_nums=1024))
        put(TopicConfig(cfg.broker_cluster_name, perm=PERM_INHERIT | (rw if cfg.cluster_topic_enable else 0)))
        put(TopicConfig(cfg.broker_name, read_queue_nums=1, write_queue_nums=1,
                        perm=PERM_INHERIT | (rw if cfg.broker_topic_enable else 0)))
        put(TopicConfig(RMQ_SYS_OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1))
        put(TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, read_queue_nums=SCHEDULE_TOPIC_QUEUE_NUM,
                        write_queue_nums=SCHEDULE_TOPIC_QUEUE_NUM))
        if cfg.trace_topic_enable:
            put(TopicConfig(cfg.msg_trace_topic_name, read_queue_nums=1, write_queue_nums=1))
            self._extra_system_topics.add(cfg.msg_trace_topic_name)
        reply = f"{cfg.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}"
        put(TopicConfig(reply, read_queue_nums=1, write_queue_nums=1))
        self._extra_system_topics.update({cfg.broker_cluster_name, cfg.broker_name, reply})

    def is_system_topic(self, topic: str) -> bool:
        """TopicValidator.isSystemTopic, including this broker's cluster/broker-name topics."""
        return is_system_topic(topic) or topic in self._extra_system_topics

    def topic_config_for_send(self, topic: str, default_topic: str, default_queue_nums: int,
                              sys_flag: int) -> TopicConfig | None:
        """The topic's config, auto-created from ``default_topic`` (TBW102) when that is allowed.

        RocketMQ's createTopicInSendMessageMethod: the new topic takes min(client's
        defaultTopicQueueNums, default topic's write queues) queues, the default topic's
        permissions without INHERIT and its filter type; it is created only when the default
        topic exists and has PERM_INHERIT (TBW102 never does while autoCreateTopicEnable is off).
        """
        with self._create_lock:
            existing = self.get(topic)
            if existing is not None:
                return existing
            default = self.get(default_topic)
            if default is None:
                log.warning("cannot create topic %s: default topic %s does not exist", topic, default_topic)
                return None
            perm = default.perm
            if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.broker_config.auto_create_topic_enable:
                perm = PERM_READ | PERM_WRITE
            if not perm & PERM_INHERIT:
                log.warning("cannot create topic %s: default topic %s has no inherit permission (%d)",
                            topic, default_topic, perm)
                return None
            queue_nums = max(min(default_queue_nums, default.write_queue_nums), 0)
            created = TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                                  perm=perm & ~PERM_INHERIT, topic_filter_type=default.topic_filter_type,
                                  topic_sys_flag=sys_flag)
            self.put(created)
        log.info("created topic %s from %s: %s", topic, default_topic, created)
        self._on_change(self)
        return created

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int) -> TopicConfig:
        """The topic's config, created as given if missing (retry and DLQ topics)."""
        with self._create_lock:
            existing = self.get(topic)
            if existing is not None:
                return existing
            created = TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm,
                                  topic_sys_flag=sys_flag)
            self.put(created)
        log.info("created topic %s", created)
        self._on_change(self)
        return created

    def update_order_topic_config(self, order_topics: set[str]) -> None:
        """updateOrderTopicConfig: make exactly the topics a name server lists as ordered (its
        ORDER_TOPIC_CONFIG KV table) ordered."""
        changed = order_topic_changes(self.table(), order_topics)
        for config in changed:
            log.info("update order topic config, topic=%s, order=%s", config.topic_name, config.order)
            self.put(config)
        if changed:
            self._on_change(self)

    def build_serialize_wrapper(self) -> TopicConfigSerializeWrapper:
        """The topic table as registered: a broker without read or write permission publishes that
        permission for every topic (as a fresh TopicConfig of the topic's queue numbers)."""
        version, table = self.data_version, self.table()
        broker_perm = self.broker_config.broker_permission
        if not broker_perm & PERM_READ or not broker_perm & PERM_WRITE:
            table = {name: TopicConfig(name, read_queue_nums=c.read_queue_nums, write_queue_nums=c.write_queue_nums,
                                       perm=broker_perm) for name, c in table.items()}
        return TopicConfigSerializeWrapper(table, version)


def order_topic_changes(table: Mapping[str, TopicConfig], order_topics: set[str]) -> list[TopicConfig]:
    """The topics whose ``order`` flag must change so that exactly ``order_topics`` are ordered."""
    return [dataclasses.replace(config, order=name in order_topics) for name, config in table.items()
            if config.order != (name in order_topics)]
