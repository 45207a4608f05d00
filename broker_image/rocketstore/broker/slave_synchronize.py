"""SlaveSynchronize: a slave copies its master's config tables (RocketMQ's SlaveSynchronize).

The CommitLog reaches a slave through the store's HA client; the tables beside it do not. So a
SLAVE asks its master, 3 s after start and every 10 s after (BrokerController's schedule), for:

* GET_ALL_TOPIC_CONFIG: topics.json. Applied when its DataVersion differs from ours: the table
  becomes the master's (entries the master lacks are dropped) with the master's DataVersion.
* GET_ALL_CONSUMER_OFFSET: consumerOffset.json. Each topic@group entry of the master replaces
  ours (RocketMQ's putAll); entries only the slave has stay.
* GET_ALL_DELAY_OFFSET: delayOffset.json, written as is (a slave delivers no delayed messages; the
  file is what a slave made master would continue from).
* GET_ALL_SUBSCRIPTIONGROUP_CONFIG: subscriptionGroup.json, as the topics.

The master's address is the ``masterAddr`` of the name server's registration answer
(:meth:`SlaveSynchronize.set_master_addr`): none while the name server knows no live master, so
a slave whose master is down keeps what it has, including consumer offsets clients commit to
it meanwhile. Once the master is back, its offsets overwrite the slave's at the next pass, as in
RocketMQ; clients lose nothing because a 4.x consumer keeps its offsets in memory and commits
them to the master again (every persistConsumerOffsetInterval, to the master as soon as the
route lists it again).

The requests go through a RemotingClient of this service's own (RocketMQ's BrokerOuterAPI
sends them; ours is built only when registration starts, and a slave syncs only once
registration has named its master anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.config_persist_service import ConfigPersistService
from rocketstore.broker.subscription_group_manager import SubscriptionGroupManager
from rocketstore.broker.topic_config_manager import TopicConfigManager
from rocketstore.client.remoting_client import RemotingClient, RemotingClientError
from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import as_object, parse_fastjson
from rocketstore.remoting.codes import RequestCode
from rocketstore.store.config_manager import ConsumerOffsetManager, DelayOffsetManager

log = logging.getLogger(__name__)

#: BrokerController.handleSlaveSynchronize: syncAll 3 s after start, then every 10 s.
SYNC_INITIAL_DELAY_S: Final = 3.0
SYNC_INTERVAL_S: Final = 10.0
#: RocketMQ's BrokerOuterAPI waits 3 s for each of these answers.
SYNC_TIMEOUT_S: Final = 3.0

VersionedTable = TopicConfigManager | SubscriptionGroupManager


def tables_differ(ours: DataVersion, master_text: str) -> bool:
    """Whether the master's topics.json / subscriptionGroup.json text carries another DataVersion."""
    root = as_object(parse_fastjson(master_text), "table")
    return DataVersion.from_dict(root.get("dataVersion", {})) != ours


def replace_versioned_table(manager: VersionedTable, master_text: str) -> None:
    """Make ``manager``'s table the master's (RocketMQ: clear, putAll, assign the DataVersion).

    Entries the master lacks are removed first; ``decode`` then merges the master's entries and
    installs its DataVersion, so the version ends up exactly the master's.
    """
    root = as_object(parse_fastjson(master_text), "table")
    names = set(as_object(root.get(manager.TABLE_KEY, {}), manager.TABLE_KEY))
    for name in set(manager.table()) - names:
        manager.remove(name)
    manager.decode(master_text)


def merge_offsets(offsets: ConsumerOffsetManager, master_text: str) -> None:
    """RocketMQ's ``offsetTable.putAll``: each topic@group of the master replaces ours."""
    master = ConsumerOffsetManager(offsets.path.parent)  # decode only: never persisted
    master.decode(master_text)
    for key, queues in master.offset_table().items():
        topic, _, group = key.partition("@")
        for queue_id, offset in queues.items():
            offsets.commit_offset(group, topic, queue_id, offset)


class SlaveSynchronize:
    """The periodic copy of the master's tables while this broker is a SLAVE."""

    def __init__(self, broker_config: BrokerConfig, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager,
                 delay_offsets: DelayOffsetManager, persist: ConfigPersistService,
                 broker_addr: Callable[[], str]) -> None:
        self.broker_config = broker_config
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.persist = persist
        self._broker_addr = broker_addr
        #: the master's remoting address, from the last registration answer (None: unknown)
        self.master_addr: str | None = None
        self.client = RemotingClient(timeout=SYNC_TIMEOUT_S)
        #: completed passes and failed requests, for /metrics and tests
        self.syncs = 0
        self.failures = 0

    def set_master_addr(self, addr: str | None) -> None:
        if addr != self.master_addr:
            log.info("slave synchronize: master %s -> %s", self.master_addr, addr)
        self.master_addr = addr or None

    async def run(self) -> None:
        """The periodic task (the broker starts it on a SLAVE only)."""
        await asyncio.sleep(SYNC_INITIAL_DELAY_S)
        try:
            while True:
                await self.sync_all()
                await asyncio.sleep(SYNC_INTERVAL_S)
        finally:
            with contextlib.suppress(Exception):
                self.client.close()

    async def sync_all(self) -> None:
        """One pass: topics, consumer offsets, delay offsets, subscription groups (RocketMQ's order);
        each independently, so one failed request does not keep the others from updating."""
        master = self.master_addr
        if master is None or master == self._broker_addr():
            return
        for name, step in (("topic config", self._sync_topic_config),
                           ("consumer offset", self._sync_consumer_offset),
                           ("delay offset", self._sync_delay_offset),
                           ("subscription group", self._sync_subscription_group_config)):
            try:
                await step(master)
            except (RemotingClientError, ValueError, OSError) as exc:
                self.failures += 1
                log.warning("slave synchronize: %s from %s failed: %s", name, master, exc)
        self.syncs += 1

    async def _fetch(self, master: str, code: int) -> str:
        response = await self.client.call_async(master, code, timeout=SYNC_TIMEOUT_S)
        return (response.body or b"").decode("utf-8")

    async def _sync_topic_config(self, master: str) -> None:
        text = await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        if tables_differ(self.topics.data_version, text):
            replace_versioned_table(self.topics, text)
            self.persist.tables_changed(self.topics)
            log.info("slave synchronize: topic config updated from master %s", master)

    async def _sync_consumer_offset(self, master: str) -> None:
        text = await self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        merge_offsets(self.offsets, text)
        self.persist.tables_changed(self.offsets)

    async def _sync_delay_offset(self, master: str) -> None:
        text = await self._fetch(master, RequestCode.GET_ALL_DELAY_OFFSET)
        if text:
            self.delay_offsets.decode(text)
            await asyncio.to_thread(self.delay_offsets.persist)

    async def _sync_subscription_group_config(self, master: str) -> None:
        text = await self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if tables_differ(self.groups.data_version, text):
            replace_versioned_table(self.groups, text)
            self.persist.tables_changed(self.groups)
            log.info("slave synchronize: subscription groups updated from master %s", master)
