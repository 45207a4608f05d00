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
* ``namesrvPeers`` (the embedded name servers of the store's other pods): registered with by a
  task of its own, at start (not awaited: a peer may not be up yet), then on the same schedule,
  one way after topic-table changes, and at once after a live update of ``namesrvPeers`` or
  ``brokerPermission``. The list is read at each registration, so scale-up needs no restart. Those
  name servers' answers are not used (a slave learns its master from ``namesrvAddr`` only: a peer
  that has not heard of the master would answer none), and an address of ``namesrvAddr`` is not
  registered with twice. What they do with it is peer_routes.py's business.
* a live update of ``brokerPermission`` re-registers at once, with a new topic-table version, so
  routes carry the new permission (:meth:`RegisterBrokerService.config_updated`).
* :meth:`RegisterBrokerService.stop_registering` ends the tasks; :meth:`RegisterBrokerService.unregister`
  (after the listeners close) sends UNREGISTER_BROKER to ``namesrvAddr`` and closes the connections
  to the peers, which makes each of them forget this broker at once (unregistering one by one
  would wait 3 s for each peer that is down).

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
        #: the name servers of namesrvPeers (None until namesrvPeers names one not in namesrvAddr)
        self.peer_outer_api: BrokerOuterAPI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics_changed = asyncio.Event()
        #: set when the peers must hear soon: True for a one-way registration (topic table changed)
        self._peers_due = asyncio.Event()
        self._peers_oneway = True
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Start registering, if namesrvAddr or the address server says where."""
        self._loop = asyncio.get_running_loop()
        if self.broker_config.namesrv_addr:
            await self._start_registration(self.broker_config.namesrv_addr)
        elif self.broker_config.fetch_namesrv_addr_by_address_server:
            self._spawn(self._address_server_loop(), "fetch-namesrv-addr")
        self._spawn(self._peer_register_loop(), "register-broker-peers")

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
        """UNREGISTER_BROKER to every name server of namesrvAddr, then close the connections (the
        peers' too: a closed registering connection is an unregistration there)."""
        if self.peer_outer_api is not None:
            self.peer_outer_api.close()
        if self.broker_outer_api is not None:
            await self.broker_outer_api.unregister_broker_all(self._identity())
            self.broker_outer_api.close()

    def topics_changed(self, manager: ConfigManager) -> None:
        """A ConfigPersistService change listener (on the loop): a changed topic table is
        registered one way soon."""
        if manager is self.topic_config_manager:
            if self.broker_outer_api is not None:
                self._topics_changed.set()
            self._peers_due.set()

    def config_updated(self, props: Mapping[str, str]) -> None:
        """A Configuration update listener: RocketMQ re-registers at once after a brokerPermission
        update, with a new data version, so routes carry the new permission. The peers hear of a
        new permission, and new peers of this broker (namesrvPeers), at once too."""
        if "brokerPermission" in props:
            self.topic_config_manager.next_version()
            if self.broker_outer_api is not None:
                self._spawn(self._register_guarded(check_order_config=False, oneway=False, force=True))
        if "brokerPermission" in props or "namesrvPeers" in props:
            self._peers_oneway = False
            self._peers_due.set()

    async def role_changed(self) -> None:
        """Controller mode: this broker changed role (brokerId 0 as master, its replica id as slave).
        A new data version, registered at once with every name server of namesrvAddr (awaited) and
        of namesrvPeers, so routes name the new master within a second rather than a period."""
        self.topic_config_manager.next_version()
        self._peers_oneway = False
        self._peers_due.set()
        if self.broker_outer_api is not None:
            await self.register_broker_all(check_order_config=False, oneway=False, force=True)

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
                async with asyncio.timeout(max(next_periodic - time.monotonic(), 0)):
                    await self._topics_changed.wait()
            except TimeoutError:
                period = min(max(self.broker_config.register_name_server_period, REGISTER_PERIOD_MIN_MS),
                             REGISTER_PERIOD_MAX_MS)
                next_periodic = time.monotonic() + period / 1000
                await self._register_guarded(check_order_config=True, oneway=False,
                                             force=self.broker_config.force_register)
            else:
                self._topics_changed.clear()
                await self._register_guarded(check_order_config=False, oneway=True, force=True)

    def _peer_addrs(self) -> list[str]:
        """namesrvPeers, less the name servers of namesrvAddr (registered with already)."""
        cfg = self.broker_config
        if not cfg.namesrv_peers or not cfg.namesrv_peers.strip():
            return []
        ours = set(self.broker_outer_api.addrs) if self.broker_outer_api is not None else set()
        return [addr for addr in split_namesrv_addr(cfg.namesrv_peers) if addr not in ours]

    async def _peer_register_loop(self) -> None:
        """Registrations with namesrvPeers: one at once, then periodic ones (the period of
        namesrvAddr's, so a peer's name server never lets this broker expire), and one soon
        after each topic-table change (one way) or live update (answered)."""
        oneway = False
        while True:
            try:
                await self._register_peers(oneway=oneway, force=oneway or self.broker_config.force_register)
            except Exception:
                log.exception("registering with the peers' name servers failed; trying again at the next period")
            period = min(max(self.broker_config.register_name_server_period, REGISTER_PERIOD_MIN_MS),
                         REGISTER_PERIOD_MAX_MS)
            try:
                async with asyncio.timeout(period / 1000):
                    await self._peers_due.wait()
            except TimeoutError:
                oneway = False
            else:
                self._peers_due.clear()
                oneway, self._peers_oneway = self._peers_oneway, True

    async def _register_peers(self, *, oneway: bool, force: bool) -> None:
        addrs = self._peer_addrs()
        if not addrs:
            return
        api = self.peer_outer_api
        if api is None:
            api = self.peer_outer_api = BrokerOuterAPI(";".join(addrs))
            self._add_counter("rocketstore_broker_peer_registrations", "REGISTER_BROKER requests sent to "
                              "namesrvPeers that succeeded", lambda: api.registrations)
            self._add_counter("rocketstore_broker_peer_registration_failures", "REGISTER_BROKER requests to "
                              "namesrvPeers that failed or were not answered in time",
                              lambda: api.registration_failures)
        else:
            api.update_name_server_address_list(";".join(addrs))
        await self._send(api, oneway=oneway, force=force)

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
        results = await self._send(api, oneway=oneway, force=force)
        if results:
            self._on_registered(results[0])
        if check_order_config and results and results[0].kv_table is not None:
            self.topic_config_manager.update_order_topic_config(set(results[0].kv_table))

    async def _send(self, api: BrokerOuterAPI, *, oneway: bool, force: bool) -> list[RegisterBrokerResult]:
        """This broker's topic table to every name server of ``api`` (unless, not ``force``d, they
        all hold its DataVersion already); the answers that came."""
        cfg = self.broker_config
        wrapper = self.topic_config_manager.build_serialize_wrapper()
        timeout_s = max(cfg.register_broker_timeout_mills, 1) / 1000
        if not force and not await api.need_register(self._identity(), wrapper.data_version, timeout_s):
            return []
        return await api.register_broker_all(self._identity(), self._ha_server_addr(), wrapper, oneway=oneway,
                                             timeout_s=timeout_s, compressed=cfg.compressed_register)

    def _identity(self) -> BrokerIdentity:
        cfg = self.broker_config
        return BrokerIdentity(cfg.broker_cluster_name, self._broker_addr(), cfg.broker_name, cfg.broker_id)
