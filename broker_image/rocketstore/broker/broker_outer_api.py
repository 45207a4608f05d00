"""BrokerOuterAPI: what a broker says to the name servers of ``namesrvAddr``, as RocketMQ 4.9.8's does.

* :meth:`BrokerOuterAPI.register_broker_all`: REGISTER_BROKER (103) to every name server at once,
  with RegisterBrokerRequestHeader (cluster, address, name, id, haServerAddr, ``compressed``,
  ``bodyCrc32`` = UtilAll.crc32 of the body) and the RegisterBrokerBody (the topic table with its
  DataVersion and an empty filter-server list; JSON, or zlib-packed with compressedRegister).
  It waits at most ``registerBrokerTimeoutMills`` for all of them and returns the answers that
  came (a name server that fails or does not answer is logged and skipped, so one dead name
  server never stops the others from hearing of the broker). ``oneway`` sends without waiting,
  as RocketMQ does for registrations made because a topic changed.
* :meth:`BrokerOuterAPI.need_register`: QUERY_DATA_VERSION (322) to every name server, for
  ``forceRegister=false``: a registration is needed when any of them answers ``changed``, holds
  another DataVersion, or cannot be asked.
* :meth:`BrokerOuterAPI.unregister_broker_all`: UNREGISTER_BROKER (104) to each name server, 3 s each.

The outbound connections are the client library's RemotingClient (one pooled connection per name
server: RocketMQ's name server also forgets a broker whose registering connection closes).
When and with what table to register is register_broker_service.py's decision.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from rocketstore.client.remoting_client import RemotingClient, RemotingClientError, check, split_namesrv_addr
from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.message import body_crc
from rocketstore.remoting.body import KVTable
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import ProtocolError
from rocketstore.remoting.headers import (
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from rocketstore.remoting.register_broker_body import RegisterBrokerBody, TopicConfigSerializeWrapper

log = logging.getLogger(__name__)

#: BrokerOuterAPI.unregisterBroker's fixed timeout.
UNREGISTER_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class BrokerIdentity:
    """Who is registering: the four fields every name-server request of a broker carries."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int


@dataclass(frozen=True)
class RegisterBrokerResult:
    """One name server's answer: a slave's master and HA addresses, and the order-topic KV table."""

    namesrv_addr: str
    ha_server_addr: str | None
    master_addr: str | None
    kv_table: dict[str, str] | None


class BrokerOuterAPI:
    def __init__(self, namesrv_addr: str, client: RemotingClient | None = None) -> None:
        self.addrs = split_namesrv_addr(namesrv_addr)
        self.client = client or RemotingClient()
        #: REGISTER_BROKER requests a name server answered SUCCESS to (oneway ones once sent).
        self.registrations = 0
        #: REGISTER_BROKER requests that failed (no connection, timeout, error answer).
        self.registration_failures = 0

    def close(self) -> None:
        self.client.close()

    def update_name_server_address_list(self, namesrv_addr: str) -> None:
        """Use these name servers from the next request on (ValueError when none is well-formed)."""
        addrs = split_namesrv_addr(namesrv_addr)
        if addrs != self.addrs:
            log.info("name server address changed, old: %s new: %s", ";".join(self.addrs), ";".join(addrs))
            self.addrs = addrs

    async def register_broker_all(self, identity: BrokerIdentity, ha_server_addr: str,
                                  wrapper: TopicConfigSerializeWrapper, *, oneway: bool, timeout_s: float,
                                  compressed: bool) -> list[RegisterBrokerResult]:
        body = RegisterBrokerBody(wrapper, []).encode(compressed)
        header = RegisterBrokerRequestHeader(
            broker_name=identity.broker_name, broker_addr=identity.broker_addr, cluster_name=identity.cluster_name,
            ha_server_addr=ha_server_addr, broker_id=identity.broker_id, compressed=compressed,
            body_crc32=body_crc(body))
        tasks = {asyncio.ensure_future(self._register(addr, header, body, oneway, timeout_s)): addr
                 for addr in self.addrs}
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
            self.registration_failures += 1
            log.warning("register broker %s to name server %s: no answer within %g s", identity.broker_name,
                        tasks[task], timeout_s)
        return [result for task in done if (result := task.result()) is not None]

    async def _register(self, addr: str, header: RegisterBrokerRequestHeader, body: bytes, oneway: bool,
                        timeout_s: float) -> RegisterBrokerResult | None:
        request = self.client.request(RequestCode.REGISTER_BROKER, header, body)
        try:
            if oneway:
                await asyncio.to_thread(self.client.invoke_oneway, addr, request)
                self.registrations += 1
                return None
            response = await self.client.invoke_async(addr, request, timeout_s)
            check(response, addr)
            answer = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields)
            kv = KVTable.decode(response.body).table if response.body else None
        except (RemotingClientError, ProtocolError) as exc:
            self.registration_failures += 1
            log.warning("register broker %s to name server %s failed: %s", header.broker_name, addr, exc)
            return None
        self.registrations += 1
        log.debug("registered broker %s (id %d) with name server %s", header.broker_name, header.broker_id, addr)
        return RegisterBrokerResult(addr, answer.ha_server_addr, answer.master_addr, kv)

    async def need_register(self, identity: BrokerIdentity, version: DataVersion, timeout_s: float) -> bool:
        """True when any name server lacks this DataVersion (or cannot say)."""
        header = QueryDataVersionRequestHeader(broker_name=identity.broker_name, broker_addr=identity.broker_addr,
                                               cluster_name=identity.cluster_name, broker_id=identity.broker_id)
        body = json.dumps(version.to_dict(), separators=(",", ":")).encode()
        tasks = [asyncio.ensure_future(self._changed(addr, header, body, version, timeout_s)) for addr in self.addrs]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        return bool(pending) or any(task.result() for task in done)

    async def _changed(self, addr: str, header: QueryDataVersionRequestHeader, body: bytes, version: DataVersion,
                       timeout_s: float) -> bool:
        try:
            response = await self.client.call_async(addr, RequestCode.QUERY_DATA_VERSION, header, body,
                                                    timeout=timeout_s)
            changed = QueryDataVersionResponseHeader.from_ext_fields(response.ext_fields).changed
            if response.body:
                changed = changed or DataVersion.from_dict(parse_fastjson(response.body.decode())) != version
        except (RemotingClientError, ProtocolError, ValueError) as exc:
            log.warning("query data version from name server %s failed: %s", addr, exc)
            return True
        return changed

    async def unregister_broker_all(self, identity: BrokerIdentity) -> None:
        header = UnRegisterBrokerRequestHeader(broker_name=identity.broker_name, broker_addr=identity.broker_addr,
                                               cluster_name=identity.cluster_name, broker_id=identity.broker_id)
        for addr in self.addrs:
            try:
                await self.client.call_async(addr, RequestCode.UNREGISTER_BROKER, header, timeout=UNREGISTER_TIMEOUT_S)
                log.info("unregistered broker %s from name server %s", identity.broker_name, addr)
            except RemotingClientError as exc:
                log.warning("unregister broker %s from name server %s failed: %s", identity.broker_name, addr, exc)
