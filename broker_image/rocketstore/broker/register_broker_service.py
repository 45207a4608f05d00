"""RegisterBrokerService: when the broker registers with the name servers of ``namesrvAddr``
(RocketMQ's BrokerController.registerBrokerAll and the tasks that schedule it).

* :meth:`RegisterBrokerService.start` (called once the broker serves): with ``namesrvAddr``, a first
  registration (forced, awaited, so clients may find the broker once start returns), then a task
  re-registering every ``registerNameServerPeriod`` (clamped to 10-60 s, first after 10 s, as
  RocketMQ schedules it; with ``forceRegister=false`` only when a name server lacks the current
  topic table) and, one way, soon after each topic-table change; and a task reading
  ``namesrvAddr`` again every two minutes, so a live update of it takes effect. Without it but
  with ``fetchNamesrvAddrByAddressServer``, the address server is asked every two minutes and
  registration starts with the first list it gives.
* a live update of ``brokerPermission`` re-registers at once, with a new topic-table version, so
  routes carry the new permission (:meth:`RegisterBrokerService.config_updated`).
* :meth:`RegisterBrokerService.stop_registering` ends the tasks; :meth:`RegisterBrokerService.unregister`
  (after the listeners close) sends UNREGISTER_BROKER.

What is sent is broker_outer_api.py's business; the table is the topic config manager's
(:meth:`rocketstore.broker.topic_config_manager.TopicConfigManager.build_serialize_wrapper`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.broker_outer_api import BrokerIdentity, BrokerOuterAPI, RegisterBrokerResult
from rocketstore.broker.top_addressing import fetch_ns_addr, ws_addr
from rocketstore.broker.topic_config_manager import TopicConfigManager
from rocketstore.client.remoting_client import split_namesrv_addr
from rocketstore.store.config_manager import ConfigManager

log = logging.getLogger(__name__)

#: BrokerController.start's schedule of registerBrokerAll: first after 10 s, then every
#: registerNameServerPeriod clamped to [10 s, 60 s].
REGISTER_INITIAL_DELAY_S: Final = 10.0
REGISTER_PERIOD_MIN_MS: Final = 10_000
REGISTER_PERIOD_MAX_MS: Final = 60_000
#: BrokerController's schedule of updateNameServerAddressList: namesrvAddr is read again every two
#: minutes (first after 10 s), so a live update of it takes effect without a restart.
NAMESRV_ADDR_REFRESH_DELAY_S: Final = 10.0
NAMESRV_ADDR_REFRESH_INTERVAL_S: Final = 120.0
#: (metric name, help, read) -> None: how the service publishes its counters (/metrics)
AddCounter = Callable[[str, str, Callable[[], float]], None]
#: what the broker does with the first name server's answer to a registration (a slave learns its
#: master's HA and remoting addresses from it: BrokerController.doRegisterBrokerAll)
OnRegistered = Callable[[RegisterBrokerResult], None]


class RegisterBrokerService:
    """Registration of this broker with the name servers; ``broker_addr`` gives the address routes
    publish (known once the remoting port listens), ``ha_server_addr`` the haServerAddr sent with
    it (brokerIP2:haListenPort, where slaves replicate from), ``on_registered`` gets the first
    answer of each registration that waits for one."""

    def __init__(self, broker_config: BrokerConfig, topic_config_manager: TopicConfigManager,
                 broker_addr: Callable[[], str], add_counter: AddCounter, *,
                 ha_server_addr: Callable[[], str], on_registered: OnRegistered) -> None:
        self.broker_config = broker_config
        self.topic_config_manager = topic_config_manager
        self._broker_addr = broker_addr
        self._ha_server_addr = ha_server_addr
        self._on_registered = on_registered
        self._add_counter = add_counter
        #: the name servers of namesrvAddr this broker registers with (None until registration starts)
        self.broker_outer_api: BrokerOuterAPI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics_changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Start registering, if namesrvAddr or the address server says where."""
        self._loop = asyncio.get_running_loop()
        if self.broker_config.namesrv_addr:
            await self._start_registration(self.broker_config.namesrv_addr)
        elif self.broker_config.fetch_namesrv_addr_by_address_server:
            self._spawn(self._address_server_loop(), "fetch-namesrv-addr")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop_registering(self) -> None:
        """Cancel the registration tasks (no registration is sent after this returns)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def unregister(self) -> None:
        """UNREGISTER_BROKER to every name server registered with, then close the connections."""
        if self.broker_outer_api is not None:
            await self.broker_outer_api.unregister_broker_all(self._identity())
            self.broker_outer_api.close()

    def topics_changed(self, manager: ConfigManager) -> None:
        """A ConfigPersistService change listener (on the loop): a changed topic table is
        registered one way soon."""
        if manager is self.topic_config_manager and self.broker_outer_api is not None:
            self._topics_changed.set()

    def config_updated(self, props: Mapping[str, str]) -> None:
        """A Configuration update listener: RocketMQ re-registers at once after a brokerPermission
        update, with a new data version, so routes carry the new permission."""
        if "brokerPermission" in props and self.broker_outer_api is not None:
            self.topic_config_manager.next_version()
            self._spawn(self._register_guarded(check_order_config=False, oneway=False, force=True))

    async def _start_registration(self, namesrv_addr: str, *, guarded: bool = False) -> None:
        """First registration (forced, awaited: clients may find the broker once start returns;
        ``guarded``: a failure is logged, not raised), then the registration task."""
        api = self.broker_outer_api = BrokerOuterAPI(namesrv_addr)
        self._add_counter("rocketstore_broker_registrations", "REGISTER_BROKER requests sent to namesrvAddr that "
                          "succeeded", lambda: api.registrations)
        self._add_counter("rocketstore_broker_registration_failures", "REGISTER_BROKER requests to namesrvAddr "
                          "that failed or were not answered in time", lambda: api.registration_failures)
        if guarded:
            await self._register_guarded(check_order_config=True, oneway=False, force=True)
        else:
            await self.register_broker_all(check_order_config=True, oneway=False, force=True)
        self._spawn(self._register_loop(), "register-broker")
        self._spawn(self._refresh_namesrv_addr_loop(), "update-namesrv-addr")

    async def _refresh_namesrv_addr_loop(self) -> None:
        await asyncio.sleep(NAMESRV_ADDR_REFRESH_DELAY_S)
        while True:
            api = self.broker_outer_api
            addr = self.broker_config.namesrv_addr
            if api is not None and addr:
                try:
                    api.update_name_server_address_list(addr)
                except ValueError as exc:
                    log.warning("namesrvAddr=%s is not usable, keeping %s: %s", addr, ";".join(api.addrs), exc)
            await asyncio.sleep(NAMESRV_ADDR_REFRESH_INTERVAL_S)

    async def _address_server_loop(self) -> None:
        """fetchNamesrvAddrByAddressServer: the address server's list, 10 s after start and every
        2 min (BrokerOuterAPI.fetchNameServerAddr); registration starts with the first list."""
        cfg = self.broker_config
        url = ws_addr(cfg.namesrv_domain, cfg.namesrv_domain_subgroup)
        log.info("name server addresses from the address server %s", url)
        await asyncio.sleep(NAMESRV_ADDR_REFRESH_DELAY_S)
        while True:
            fetched = await asyncio.to_thread(fetch_ns_addr, url)
            try:
                if fetched:
                    split_namesrv_addr(fetched)  # a malformed list is refused before anything uses it
            except ValueError as exc:
                log.warning("address server %s answered an unusable list %r: %s", url, fetched, exc)
            else:
                api = self.broker_outer_api
                if fetched and api is None:
                    log.info("name server address from %s: %s", url, fetched)
                    await self._start_registration(fetched, guarded=True)
                elif fetched and api is not None:
                    api.update_name_server_address_list(fetched)
            await asyncio.sleep(NAMESRV_ADDR_REFRESH_INTERVAL_S)

    async def _register_loop(self) -> None:
        """Periodic registrations, and a one-way registration soon after each topic-table change."""
        next_periodic = time.monotonic() + REGISTER_INITIAL_DELAY_S
        while True:
            try:
                await asyncio.wait_for(self._topics_changed.wait(), max(next_periodic - time.monotonic(), 0))
            except TimeoutError:
                period = min(max(self.broker_config.register_name_server_period, REGISTER_PERIOD_MIN_MS),
                             REGISTER_PERIOD_MAX_MS)
                next_periodic = time.monotonic() + period / 1000
                await self._register_guarded(check_order_config=True, oneway=False,
                                             force=self.broker_config.force_register)
            else:
                self._topics_changed.clear()
                await self._register_guarded(check_order_config=False, oneway=True, force=True)

    async def _register_guarded(self, *, check_order_config: bool, oneway: bool, force: bool) -> None:
        try:
            await self.register_broker_all(check_order_config=check_order_config, oneway=oneway, force=force)
        except Exception:
            log.exception("registering with the name servers failed; trying again at the next period")

    async def register_broker_all(self, *, check_order_config: bool, oneway: bool, force: bool) -> None:
        """BrokerController.registerBrokerAll: this broker's topic table to every name server of
        namesrvAddr; with ``check_order_config`` the first answer's order-topic table is applied."""
        api = self.broker_outer_api
        assert api is not None
        cfg = self.broker_config
        wrapper = self.topic_config_manager.build_serialize_wrapper()
        timeout_s = max(cfg.register_broker_timeout_mills, 1) / 1000
        if not force and not await api.need_register(self._identity(), wrapper.data_version, timeout_s):
            return
        results = await api.register_broker_all(self._identity(), self._ha_server_addr(), wrapper, oneway=oneway,
                                                timeout_s=timeout_s, compressed=cfg.compressed_register)
        if results:
            self._on_registered(results[0])
        if check_order_config and results and results[0].kv_table is not None:
            self.topic_config_manager.update_order_topic_config(set(results[0].kv_table))

    def _identity(self) -> BrokerIdentity:
        cfg = self.broker_config
        return BrokerIdentity(cfg.broker_cluster_name, self._broker_addr(), cfg.broker_name, cfg.broker_id)
