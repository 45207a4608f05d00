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
it meanwhile (a 4.x client commits to a slave when the route has no master).

Once the master is back, RocketMQ 4.9.7 overwrites those commits with the master's older offsets
at the next pass: a client still running commits its offsets to the master again, but one that
restarted meanwhile starts from the master's old offsets and consumes again what it had
committed. Here nothing committed is lost: every offset committed to this slave
(:meth:`SlaveSynchronize.committed_on_slave`) is handed to the master with UPDATE_CONSUMER_OFFSET
at the next pass that reaches it, when it is ahead of the master's, before the master's table is
merged in. An offset the master has moved back meanwhile (an admin reset) is not undone unless
the slave's commit came after it.

The requests go through a RemotingClient of this service's own (RocketMQ's BrokerOuterAPI
sends them; ours is built only when registration starts, and a slave syncs only once
registration has named its master anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Set
from typing import Final

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.config_persist_service import ConfigPersistService
from rocketstore.broker.subscription_group_manager import SubscriptionGroupManager
from rocketstore.broker.topic_config_manager import TopicConfigManager
from rocketstore.client.remoting_client import RemotingClient, RemotingClientError
from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import as_object, parse_fastjson
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.headers import UpdateConsumerOffsetRequestHeader
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


def merge_offsets(offsets: ConsumerOffsetManager, master_text: str,
                  keep: Set[tuple[str, str, int]] = frozenset()) -> None:
    """RocketMQ's ``offsetTable.putAll``: each topic@group of the master replaces ours, except the
    (group, topic, queue id) offsets of ``keep``."""
    master = ConsumerOffsetManager(offsets.path.parent)  # decode only: never persisted
    master.decode(master_text)
    for key, queues in master.offset_table().items():
        topic, _, group = key.partition("@")
        for queue_id, offset in queues.items():
            if (group, topic, queue_id) not in keep:
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
        #: (group, topic, queue id) of offsets clients committed here, not yet handed to the master
        self._committed_here: set[tuple[str, str, int]] = set()

    def committed_on_slave(self, group: str, topic: str, queue_id: int) -> None:
        """A client committed this offset to this slave (UPDATE_CONSUMER_OFFSET)."""
        self._committed_here.add((group, topic, queue_id))

    def set_master_addr(self, addr: str | None) -> None:
        if addr != self.master_addr:
            log.info("slave synchronize: master %s -> %s", self.master_addr, addr)
        self.master_addr = addr or None

    async def run(self) -> None:
        """The periodic task (the broker starts it on a SLAVE only)."""
        await asyncio.sleep(SYNC_INITIAL_DELAY_S)
        try:
            while True:
                try:
                    await self.sync_all()
                except Exception:  # as RocketMQ's scheduled syncAll: logged, and the next pass comes
                    self.failures += 1
                    log.exception("slave synchronize: pass failed")
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
        handed = await self._hand_over_commits(master, text)
        merge_offsets(self.offsets, text, keep=handed)
        self.persist.tables_changed(self.offsets)

    async def _hand_over_commits(self, master: str, master_text: str) -> set[tuple[str, str, int]]:
        """Give the master the offsets committed here that are ahead of its own; returns the ones
        it took (the merge keeps ours for them). One that fails stays for the next pass."""
        theirs = ConsumerOffsetManager(self.offsets.path.parent)  # decode only: never persisted
        theirs.decode(master_text)
        handed: set[tuple[str, str, int]] = set()
        for key in sorted(self._committed_here):
            group, topic, queue_id = key
            mine = self.offsets.query_offset(group, topic, queue_id)
            if mine > theirs.query_offset(group, topic, queue_id):
                header = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id,
                                                           commit_offset=mine)
                await self.client.call_async(master, RequestCode.UPDATE_CONSUMER_OFFSET, header,
                                             timeout=SYNC_TIMEOUT_S)
                log.info("slave synchronize: offset %d of %s@%s queue %d committed here handed to master %s",
                         mine, topic, group, queue_id, master)
                handed.add(key)
            self._committed_here.discard(key)
        return handed

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
