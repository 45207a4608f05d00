"""ConfigPersistService: when the broker's config tables are read and written.

The tables are RocketMQ's ConfigManager files under ``<storePathRootDir>/config``: ``topics.json``
(topic_config_manager.py), ``subscriptionGroup.json`` (subscription_group_manager.py) and
``consumerOffset.json``. They share one schedule, so it is kept here rather than in each manager:

* :meth:`ConfigPersistService.load`: all of them at start, in a worker thread; each manager creates
  its system entries first, so a file's own definition of one wins, as in RocketMQ;
* :meth:`ConfigPersistService.tables_changed`: topics and groups are written whenever they change,
  in a worker thread, changes arriving while a write runs coalesced into the next one. RocketMQ
  writes the file synchronously inside each change; here a change may come from the event loop,
  which must not wait for an fsync;
* :meth:`ConfigPersistService.flush_offsets_loop`: the consumer offsets every
  ``flushConsumerOffsetInterval`` (5 s), as RocketMQ's BrokerController schedules
  ``consumerOffsetManager.persist``: they change with every commit, too often to write each time;
* :meth:`ConfigPersistService.persist_all`: all of them at shutdown.

``change_listeners`` are called on the loop with each changed manager (the name-server
registration re-registers when the topic table changes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable

from rocketstore.store.config_manager import ConfigManager

log = logging.getLogger(__name__)


class ConfigPersistService:
    """Writes changed config tables soon after the change; ``loop`` gives the broker's event loop
    (None before start), where writes are scheduled and listeners run."""

    def __init__(self, loop: Callable[[], asyncio.AbstractEventLoop | None]) -> None:
        self._loop = loop
        #: called on the loop with each manager reported changed
        self.change_listeners: list[Callable[[ConfigManager], None]] = []
        self._dirty: set[ConfigManager] = set()
        self._dirty_lock = threading.Lock()
        self._persist_task: asyncio.Task[None] | None = None

    @staticmethod
    def load(managers: Iterable[ConfigManager]) -> None:
        """Read each manager's file, in order (blocking: run it in a worker thread)."""
        for manager in managers:
            manager.load()

    def tables_changed(self, *managers: ConfigManager) -> None:
        """Note that tables changed; they are written soon in a worker thread (thread-safe)."""
        with self._dirty_lock:
            self._dirty.update(managers)
        loop = self._loop()
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule_persist)
            for manager in managers:
                for listener in self.change_listeners:
                    loop.call_soon_threadsafe(listener, manager)

    def _schedule_persist(self) -> None:
        if self._persist_task is None or self._persist_task.done():
            loop = self._loop()
            assert loop is not None
            self._persist_task = loop.create_task(self._persist_dirty())

    async def _persist_dirty(self) -> None:
        while True:
            with self._dirty_lock:
                dirty = list(self._dirty)
                self._dirty.clear()
            if not dirty:
                return
            for manager in dirty:
                try:
                    await asyncio.to_thread(manager.persist)
                except OSError:
                    log.exception("writing %s failed; retrying with the next change or at shutdown", manager.path)

    async def flush_offsets_loop(self, offsets: ConfigManager, interval_ms: Callable[[], int]) -> None:
        """Write ``offsets`` every ``interval_ms()`` (at least 100 ms), until cancelled."""
        while True:
            await asyncio.sleep(max(interval_ms(), 100) / 1000)
            try:
                await asyncio.to_thread(offsets.persist)
            except OSError:
                log.exception("writing consumer offsets failed; retrying at the next interval")

    async def persist_all(self, managers: Iterable[ConfigManager]) -> None:
        """At shutdown: let a write in progress finish, then write every table (in a worker thread)."""
        if self._persist_task is not None:
            with contextlib.suppress(Exception):  # its failures are logged where they happen
                await self._persist_task
        await asyncio.to_thread(self._persist_all, list(managers))

    def _persist_all(self, managers: list[ConfigManager]) -> None:
        with self._dirty_lock:
            self._dirty.clear()
        for manager in managers:
            try:
                manager.persist()
            except OSError:
                log.exception("writing %s failed", manager.path)
