"""Producer and consumer groups, per connection, as RocketMQ's ProducerManager / ConsumerManager keep them.

Clients announce themselves with HEART_BEAT every 30 s: a client id and the producer and consumer
groups it runs, each consumer group with its subscriptions. The broker keeps, per group, one
:class:`ClientChannelInfo` per connection. A consumer group's membership is what rebalancing
splits queues over (``GET_CONSUMER_LIST_BY_GROUP``); when it changes, every consumer connection of
the group is told with a one-way ``NOTIFY_CONSUMER_IDS_CHANGED`` so it rebalances at once instead
of at its next 20 s rebalance tick.

Membership ends with UNREGISTER_CLIENT, with the connection closing, or after
:data:`CHANNEL_EXPIRED_TIMEOUT_MS` without a heartbeat (the housekeeping scan also closes that
connection, as RocketMQ does).

Everything here runs on the broker's event loop (handlers, disconnect callbacks, the scan), so
the tables need no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rocketstore.broker.server import Connection
from rocketstore.common.clock import now_ms
from rocketstore.remoting.body import SubscriptionData
from rocketstore.remoting.codes import RequestCode

log = logging.getLogger(__name__)

#: RocketMQ's CHANNEL_EXPIRED_TIMEOUT: a client silent this long is dropped.
CHANNEL_EXPIRED_TIMEOUT_MS = 120_000


@dataclass(eq=False, slots=True)
class ClientChannelInfo:
    """One client connection as a group member."""

    connection: Connection
    client_id: str
    language: int
    version: int
    last_update_ms: int = field(default_factory=now_ms)


@dataclass(eq=False, slots=True)
class ConsumerGroupInfo:
    """A consumer group: its connections, its subscriptions by topic and how it consumes."""

    group_name: str
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None
    channels: dict[Connection, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_ms: int = field(default_factory=now_ms)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_channel(self, info: ClientChannelInfo, consume_type: str | None, message_model: str | None,
                       consume_from_where: str | None) -> bool:
        """Add or refresh a connection; True when it is new to the group."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        now = now_ms()
        known = self.channels.get(info.connection)
        is_new = known is None
        if known is None or known.client_id != info.client_id:
            # A different client id on a known connection is a client bug in RocketMQ's eyes; the
            # newest announcement wins there too.
            self.channels[info.connection] = known = info
        known.last_update_ms = now
        self.last_update_ms = now
        return is_new

    def update_subscriptions(self, subs: Iterable[SubscriptionData]) -> bool:
        """Replace the subscriptions with ``subs``; True when a topic was added or removed.

        A newer ``subVersion`` of a topic replaces the stored one without counting as a change,
        as in RocketMQ (an expression change alone does not trigger a rebalance).
        """
        changed = False
        new = {s.topic: s for s in subs}
        for topic, sub in new.items():
            old = self.subscriptions.get(topic)
            if old is None:
                self.subscriptions[topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[topic] = sub
        for topic in [t for t in self.subscriptions if t not in new]:
            del self.subscriptions[topic]
            changed = True
        self.last_update_ms = now_ms()
        return changed


class ConsumerManager:
    """Consumer groups by name. ``notify`` sends NOTIFY_CONSUMER_IDS_CHANGED when allowed."""

    def __init__(self, notify_enabled: Callable[[], bool]) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self._notify_enabled = notify_enabled  # brokerConfig.notifyConsumerIdsChangedEnable, read live
        #: bumped whenever what :meth:`find_subscription_data` answers may have changed (a group's
        #: subscription added, replaced or removed, a group gone): the pulls' cached decisions
        #: (PullMessageProcessor.serve_pull_frames) are made again after it
        self.subscriptions_version = 0

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def find_subscription_data(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info is not None else None

    def subscription_count(self, group: str) -> int:
        info = self.groups.get(group)
        return len(info.subscriptions) if info is not None else 0

    def find_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        info = self.groups.get(group)
        return info.find_channel(client_id) if info is not None else None

    def groups_of_topic(self, topic: str) -> set[str]:
        """Online groups subscribed to ``topic`` (RocketMQ's queryTopicConsumeByWho)."""
        return {name for name, info in self.groups.items() if topic in info.subscriptions}

    def register(self, group: str, info: ClientChannelInfo, consume_type: str | None, message_model: str | None,
                 consume_from_where: str | None, subs: Iterable[SubscriptionData], notify_group: bool) -> bool:
        """Record a consumer heartbeat; True when the group's members or topics changed."""
        group_info = self.groups.get(group)
        if group_info is None:
            group_info = self.groups[group] = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
        members_changed = group_info.update_channel(info, consume_type, message_model, consume_from_where)
        before = dict(group_info.subscriptions)
        topics_changed = group_info.update_subscriptions(subs)
        after = group_info.subscriptions
        if before.keys() != after.keys() or any(after[topic] is not sub for topic, sub in before.items()):
            self.subscriptions_version += 1
        changed = members_changed or topics_changed
        if changed:
            log.info("consumer group %s changed: %s from %s", group, info.client_id, info.connection.peer)
            if notify_group:
                self._notify(group, group_info.channels)
        return changed

    def unregister(self, group: str, connection: Connection, notify_group: bool) -> None:
        group_info = self.groups.get(group)
        if group_info is None:
            return
        removed = group_info.channels.pop(connection, None)
        if removed is not None:
            log.info("consumer %s left group %s", removed.client_id, group)
        if not group_info.channels:
            self._drop(group)
        if notify_group:
            self._notify(group, group_info.channels)

    def connection_closed(self, connection: Connection) -> None:
        for group, group_info in list(self.groups.items()):
            removed = group_info.channels.pop(connection, None)
            if removed is None:
                continue
            log.info("consumer %s of group %s disconnected (%s)", removed.client_id, group, connection.peer)
            if not group_info.channels:
                self._drop(group)
            self._notify(group, group_info.channels)

    def scan_expired(self, timeout_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS) -> list[Connection]:
        """Drop members silent for longer than ``timeout_ms``; returns their connections to close."""
        now = now_ms()
        expired: list[Connection] = []
        for group, group_info in list(self.groups.items()):
            for conn, info in list(group_info.channels.items()):
                if now - info.last_update_ms > timeout_ms:
                    log.warning("consumer %s of group %s sent no heartbeat for %d ms: removing it",
                                info.client_id, group, now - info.last_update_ms)
                    del group_info.channels[conn]
                    expired.append(conn)
            if not group_info.channels:
                self._drop(group)
        return expired

    def _drop(self, group: str) -> None:
        """The group's last member left: its subscriptions go with it."""
        del self.groups[group]
        self.subscriptions_version += 1

    def _notify(self, group: str, channels: Iterable[Connection]) -> None:
        if not self._notify_enabled():
            return
        for conn in list(channels):
            conn.notify(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})


class ProducerManager:
    """Producer groups by name: which connections run them (transaction checks pick one), and
    each producer client's connection by client id, which is where replies to its requests go
    (RocketMQ's clientChannelTable / findChannel)."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[Connection, ClientChannelInfo]] = {}
        self._by_client_id: dict[str, Connection] = {}
        self._next_channel = 0  # round-robin position of available_channel

    def find_channel(self, client_id: str) -> Connection | None:
        """The connection of the producer client ``client_id`` (a requester awaiting replies)."""
        return self._by_client_id.get(client_id)

    def available_channel(self, group: str) -> Connection | None:
        """A live connection of the group, taken in turn (RocketMQ's getAvailableChannel): where a
        transaction check goes, so checks spread over the group's producers."""
        active = [conn for conn in self.groups.get(group, {}) if conn.active]
        if not active:
            return None
        self._next_channel += 1
        first = active[self._next_channel % len(active)]
        if not first.writing_paused:
            return first
        writable = [conn for conn in active if not conn.writing_paused]
        return writable[0] if writable else first  # RocketMQ falls back to an active, unwritable one

    def register(self, group: str, info: ClientChannelInfo) -> None:
        channels = self.groups.setdefault(group, {})
        known = channels.get(info.connection)
        if known is None:
            channels[info.connection] = info
            self._by_client_id[info.client_id] = info.connection
            log.info("producer %s of group %s connected (%s)", info.client_id, group, info.connection.peer)
        else:
            known.last_update_ms = now_ms()

    def unregister(self, group: str, connection: Connection) -> None:
        channels = self.groups.get(group)
        if channels is None:
            return
        removed = channels.pop(connection, None)
        if removed is not None:
            self._forget_client(removed)
        if not channels:
            del self.groups[group]

    def connection_closed(self, connection: Connection) -> None:
        for group, channels in list(self.groups.items()):
            removed = channels.pop(connection, None)
            if removed is not None:
                self._forget_client(removed)
                if not channels:
                    del self.groups[group]

    def scan_expired(self, timeout_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS) -> list[Connection]:
        now = now_ms()
        expired: list[Connection] = []
        for group, channels in list(self.groups.items()):
            for conn, info in list(channels.items()):
                if now - info.last_update_ms > timeout_ms:
                    log.warning("producer %s of group %s sent no heartbeat for %d ms: removing it",
                                info.client_id, group, now - info.last_update_ms)
                    del channels[conn]
                    self._forget_client(info)
                    expired.append(conn)
            if not channels:
                del self.groups[group]
        return expired

    def _forget_client(self, info: ClientChannelInfo) -> None:
        # only if the id still maps to this connection: a client that reconnected keeps its new one
        if self._by_client_id.get(info.client_id) is info.connection:
            del self._by_client_id[info.client_id]
