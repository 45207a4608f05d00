"""The one place the operator talks to brokers: RocketMQ remoting through ``BrokerAdmin``.

* retention push: ``UPDATE_BROKER_CONFIG`` (25) with the live retention keys;
* manual delete: ``DELETE_EXPIRED_COMMITLOG`` (329), once per ``maintenance.deleteExpiredRequest``;
* observation: ``GET_BROKER_RUNTIME_INFO`` (28) for ``commitLogDiskRatio`` and the CommitLog offsets,
  ``GET_BROKER_CONFIG`` for the retention a broker really runs with;
* scaling (:mod:`rocketstore.operator.scaling`): ``GET_BROKER_CONSUME_STATS`` (317) of a leaving
  broker, what its consumer groups have left to consume; ``GET_ALL_TOPIC_CONFIG`` (21) and
  ``UPDATE_AND_CREATE_TOPIC`` (17) to give a new broker the store's topics; and, on a pod's
  embedded name server (its host, at the ``namesrvListenPort`` its GET_BROKER_CONFIG reports),
  ``WIPE_WRITE_PERM_OF_BROKER`` (205) / ``ADD_WRITE_PERM_OF_BROKER`` (327);
* scaling, again: a leaving master's ``/metrics``, the messages it holds for later delivery on
  itself only (delayed, timer and transaction half messages, :func:`parse_held_metrics`);
* replication (broker groups): every member's ``/metrics`` on its HTTP port, the
  ``rocketstore_ha_*`` series (:func:`parse_ha_metrics`): which of them has samples says the role
  the broker serves in now, and a master's name each slave it streams to with its lag in bytes and
  seconds. The same figures Prometheus alerts on, so the operator's view of "in sync" and the
  dashboard's never disagree.

Addressing: broker ``i`` of RocketStore ``NAME`` in ``NS`` is reached at
``NAME-i.NAME-headless.NS.svc:10911`` (its stable StatefulSet DNS name). A template overrides it,
for an operator running outside the cluster or for tests that point it at a broker process on
loopback: ``rocketstore operator --broker-address-template '127.0.0.1:{port}'`` or the environment
variable ``ROCKETSTORE_OPERATOR_BROKER_ADDRESS`` (fields ``{name} {namespace} {ordinal} {pod}
{port}``; a ``;``-separated list of ``NS/NAME-i=host:port`` pins single brokers).

Security: every call takes a :class:`BrokerAccess`, how the brokers of one RocketStore want to be
spoken to: TLS when its ``spec.tls.mode`` is not disabled (verifying the brokers' certificate
against the CA of the TLS Secret when it has one), ACL signing with ``spec.acl.operatorCredentials``.
A request the broker's ACL refuses raises :class:`BrokerError` with ``denied`` set, so the
status can say that credentials, not the network, are the problem.

The admin client is blocking (sockets), so every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from rocketstore.client import AclClientRPCHook, RemotingError, SessionCredentials, client_ssl_context
from rocketstore.client.admin import GroupConsumeStats
from rocketstore.common.topic_config import TopicConfig
from rocketstore.operator.desired import LISTEN_PORT, pod_dns, pod_name, slave_pod_name
from rocketstore.remoting.codes import ResponseCode

__all__ = [
    "ADDRESS_ENV",
    "PLAIN",
    "AdminClient",
    "BrokerAccess",
    "BrokerAddressing",
    "BrokerError",
    "BrokerRuntime",
    "Brokers",
    "HeldMessages",
    "ReplicationView",
    "SlaveLag",
    "parse_ha_metrics",
    "parse_held_metrics",
]

ADDRESS_ENV: Final = "ROCKETSTORE_OPERATOR_BROKER_ADDRESS"
DEFAULT_TEMPLATE: Final = "{pod}.{name}-headless.{namespace}.svc:{port}"


class AdminClient(Protocol):
    """What the operator needs of ``rocketstore.client.admin.BrokerAdmin``."""

    def get_runtime_info(self) -> dict[str, str]: ...

    def get_broker_config(self) -> dict[str, str]: ...

    def update_broker_config(self, props: Mapping[str, str]) -> None: ...

    def delete_expired_commit_log(self) -> bool: ...

    def broker_consume_stats(self, order_only: bool = False) -> tuple[list[GroupConsumeStats], int]: ...

    def topic_configs(self) -> dict[str, TopicConfig]: ...

    def create_topic_config(self, config: TopicConfig) -> None: ...
    def list_users(self, name_filter: str | None = None) -> list[dict[str, Any]]: ...

    def create_user(self, user_info: Mapping[str, Any]) -> None: ...

    def update_user(self, user_info: Mapping[str, Any]) -> None: ...

    def delete_user(self, username: str) -> None: ...

    def list_acls(self, subject_filter: str | None = None) -> list[dict[str, Any]]: ...

    def create_acl(self, acl_info: Mapping[str, Any]) -> None: ...

    def delete_acl(self, subject: str, policy_type: str | None = None, resource: str | None = None) -> None: ...

    def close(self) -> None: ...


#: how RocketMQ 4.9.8 brokers word an ACL refusal (the remark of the SYSTEM_ERROR response)
ACL_EXCEPTION: Final = "org.apache.rocketmq.acl.common.AclException"

_Parsed = TypeVar("_Parsed")


class AdminOperation(Protocol):
    """An admin request planned elsewhere (e.g. a user or ACL operation of auth.py), which knows
    how to send itself over an :class:`AdminClient`."""

    def send(self, client: AdminClient) -> None: ...


class BrokerError(Exception):
    """A broker could not be reached or refused a request; ``denied``: refused by its ACL."""

    def __init__(self, message: str, denied: bool = False) -> None:
        super().__init__(message)
        self.denied = denied


@dataclass(frozen=True)
class BrokerAccess:
    """TLS and ACL settings of the operator's connection to one RocketStore's brokers (hashable,
    so the SSL context built from it is cached)."""

    credentials: SessionCredentials | None = None
    tls: bool = False
    #: PEM CA certificates to verify brokers against; None with ``tls``: encrypt without verifying
    trust_pem: str | None = None
    #: PEM certificate and key to present, for brokers that want client certificates
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)

    def ssl_context(self) -> ssl.SSLContext | None:
        return _ssl_context(self.trust_pem, self.client_cert_pem, self.client_key_pem) if self.tls else None

    def rpc_hook(self) -> AclClientRPCHook | None:
        return None if self.credentials is None else AclClientRPCHook(self.credentials)


PLAIN: Final = BrokerAccess()


@functools.lru_cache(maxsize=64)
def _ssl_context(trust_pem: str | None, cert_pem: bytes | None, key_pem: bytes | None) -> ssl.SSLContext:
    """ssl loads a certificate chain from files only: the Secret's PEM goes through a private
    temporary directory that is removed once loaded."""
    if cert_pem is None or key_pem is None:
        return client_ssl_context(trust_cert_pem=trust_pem)
    with tempfile.TemporaryDirectory(prefix="rocketstore-operator-tls-") as tmp:
        cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert.write_bytes(cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        return client_ssl_context(trust_cert_pem=trust_pem, cert=cert, key=key)


@dataclass(frozen=True)
class BrokerRuntime:
    disk_usage_ratio: float | None
    commit_log_min_offset: int | None
    commit_log_max_offset: int | None


@dataclass(frozen=True)
class SlaveLag:
    """One slave as its master sees it (``rocketstore_ha_slave_lag_*{slave="host:port"}``)."""

    #: the slave's end of the HA connection, host:port (the port is the slave's ephemeral one)
    address: str
    lag_bytes: int | None = None
    lag_seconds: float | None = None

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0].strip("[]")


@dataclass(frozen=True)
class ReplicationView:
    """One broker's HA view, from its ``/metrics``: the role it serves in now and, as a master,
    the slaves connected to it and how many it counts in sync.

    The role is the broker's own, read from which ``rocketstore_ha_*`` families carry samples (a
    master's lag series, a slave's connection flag): with Lease failover it changes by election,
    without it it is still what the broker runs, not what its StatefulSet was meant to make it."""

    #: MASTER or SLAVE; None when neither family has samples (an image without them)
    role: str | None = None
    slaves: tuple[SlaveLag, ...] = ()
    slaves_in_sync: int | None = None
    #: a slave: whether its HA client is connected to a master
    master_connected: bool | None = None


HA_LAG_BYTES: Final = "rocketstore_ha_slave_lag_bytes"
HA_LAG_SECONDS: Final = "rocketstore_ha_slave_lag_seconds"
HA_SLAVES_IN_SYNC: Final = "rocketstore_ha_slaves_in_sync"
HA_MASTER_CONNECTED: Final = "rocketstore_ha_master_connected"


def parse_ha_metrics(text: str) -> ReplicationView:
    """The ``rocketstore_ha_*`` series of a broker's Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    lag_bytes: dict[str, int] = {}
    lag_seconds: dict[str, float] = {}
    in_sync: int | None = None
    connected: bool | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            slave = sample.labels.get("slave")
            if sample.name == HA_LAG_BYTES and slave:
                lag_bytes[slave] = int(sample.value)
            elif sample.name == HA_LAG_SECONDS and slave:
                lag_seconds[slave] = float(sample.value)
            elif sample.name == HA_SLAVES_IN_SYNC:
                in_sync = int(sample.value)
            elif sample.name == HA_MASTER_CONNECTED:
                connected = sample.value > 0
    slaves = tuple(SlaveLag(a, lag_bytes.get(a), lag_seconds.get(a)) for a in sorted(lag_bytes.keys() | lag_seconds))
    # a broker publishes samples of its own role's families only (rocketstore.broker.ha_metrics)
    role = "MASTER" if in_sync is not None else "SLAVE" if connected is not None else None
    return ReplicationView(role, slaves, in_sync, connected)


@dataclass(frozen=True)
class HeldMessages:
    """Messages a broker holds for later and will deliver, or check, itself only: delayed ones
    (``SCHEDULE_TOPIC_XXXX``, by delay level), timer ones (RocketMQ 5's timer wheel) and
    transaction half messages not resolved yet. None of them is in a consumer group's backlog
    until it is delivered to its topic, on that same broker."""

    delayed: int = 0
    timers: int = 0
    half: int = 0

    @property
    def total(self) -> int:
        return self.delayed + self.timers + self.half

    def __add__(self, other: HeldMessages) -> HeldMessages:
        return HeldMessages(self.delayed + other.delayed, self.timers + other.timers, self.half + other.half)


DELAYED_PENDING: Final = "rocketstore_delayed_messages_pending"
TIMERS_PENDING: Final = "rocketstore_timer_messages_pending"
HALF_PENDING: Final = "rocketstore_transaction_half_messages_pending"


def parse_held_metrics(text: str) -> HeldMessages:
    """The held messages of a broker's Prometheus text exposition (a series it does not publish,
    e.g. the half messages of an older broker image, counts 0)."""
    from prometheus_client.parser import text_string_to_metric_families

    counts = {DELAYED_PENDING: 0, TIMERS_PENDING: 0, HALF_PENDING: 0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in counts:
                counts[sample.name] += int(sample.value)
    return HeldMessages(counts[DELAYED_PENDING], counts[TIMERS_PENDING], counts[HALF_PENDING])


def _fetch_metrics(addr: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5.0) as response:
        return str(response.read().decode("utf-8", "replace"))


def _int_or_none(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _float_or_none(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class BrokerAddressing:
    """How to reach broker ``ordinal`` of a RocketStore."""

    template: str = DEFAULT_TEMPLATE
    pinned: Mapping[str, str] | None = None

    @classmethod
    def from_text(cls, text: str | None) -> BrokerAddressing:
        """``None``/empty: the in-cluster DNS name; ``a=b;c=d``: pinned; anything else: a template."""
        if not text:
            return cls()
        if "=" in text:
            pinned = dict(part.split("=", 1) for part in text.split(";") if part.strip())
            return cls(pinned={k.strip(): v.strip() for k, v in pinned.items()})
        return cls(template=text)

    @classmethod
    def from_env(cls) -> BrokerAddressing:
        return cls.from_text(os.environ.get(ADDRESS_ENV))

    def address(self, name: str, namespace: str, ordinal: int, port: int = LISTEN_PORT, slave: int = 0) -> str:
        """``port``: the broker's remoting port (per broker with external access); ``slave``: the
        group's slave of that brokerId (``{pod}`` is its pod, ``{ordinal}`` its group's)."""
        pod = slave_pod_name(name, slave, ordinal) if slave else pod_name(name, ordinal)
        if self.pinned is not None:
            try:
                return self.pinned[f"{namespace}/{pod}"]
            except KeyError:
                return f"{pod_dns(name, namespace, ordinal, slave)}:{port}"
        return self.template.format(name=name, namespace=namespace, ordinal=ordinal, pod=pod, port=port)

    def http_address(self, name: str, namespace: str, ordinal: int, port: int, slave: int = 0) -> str:
        """Where broker ``ordinal`` (its group's slave ``slave``) serves HTTP (``/metrics``) on
        ``port``: the template's host with that port, or a pinned broker's host with it."""
        pod = slave_pod_name(name, slave, ordinal) if slave else pod_name(name, ordinal)
        if self.pinned is not None and f"{namespace}/{pod}" in self.pinned:
            host = self.pinned[f"{namespace}/{pod}"].rsplit(":", 1)[0]
            return f"{host}:{port}"
        return self.address(name, namespace, ordinal, port, slave)


def _default_factory(addr: str, access: BrokerAccess) -> AdminClient:
    from rocketstore.client.admin import BrokerAdmin

    return BrokerAdmin(addr, timeout=5.0, ssl_context=access.ssl_context(), rpc_hook=access.rpc_hook())


def _write_perm(namesrv_addr: str, access: BrokerAccess, broker_name: str, add: bool) -> int:
    """WIPE_ / ADD_WRITE_PERM_OF_BROKER at one name server; its topic count."""
    from rocketstore.client.admin import MQAdmin
    from rocketstore.client.remoting_client import RemotingClient

    client = RemotingClient(timeout=5.0, ssl_context=access.ssl_context(), rpc_hook=access.rpc_hook())
    try:
        admin = MQAdmin(namesrv_addr, client=client)
        counts = admin.add_write_perm(broker_name) if add else admin.wipe_write_perm(broker_name)
        return counts[namesrv_addr]
    finally:
        client.close()


class Brokers:
    """Async facade over blocking admin clients, one short-lived client per call."""

    def __init__(
        self,
        addressing: BrokerAddressing | None = None,
        factory: Callable[[str, BrokerAccess], AdminClient] = _default_factory,
        metrics_reader: Callable[[str], str] = _fetch_metrics,
    ) -> None:
        self.addressing = addressing or BrokerAddressing.from_env()
        self._factory = factory
        self._metrics_reader = metrics_reader

    def address(self, name: str, namespace: str, ordinal: int, port: int = LISTEN_PORT, slave: int = 0) -> str:
        return self.addressing.address(name, namespace, ordinal, port, slave)

    async def _run(self, addr: str, access: BrokerAccess, call: Callable[[AdminClient], object]) -> object:
        def work() -> object:
            client = self._factory(addr, access)
            try:
                return call(client)
            finally:
                client.close()

        try:
            return await asyncio.to_thread(work)
        except BrokerError:
            raise
        except RemotingError as exc:
            denied = ACL_EXCEPTION in exc.remark or exc.code == ResponseCode.NO_PERMISSION
            raise BrokerError(f"{addr}: {exc}", denied=denied) from exc
        except Exception as exc:  # socket errors, timeouts, error responses: all mean "not done"
            raise BrokerError(f"{addr}: {type(exc).__name__}: {exc}") from exc

    async def runtime(self, addr: str, access: BrokerAccess = PLAIN) -> BrokerRuntime:
        info = await self._run(addr, access, lambda c: c.get_runtime_info())
        assert isinstance(info, dict)
        return BrokerRuntime(
            disk_usage_ratio=_float_or_none(info.get("commitLogDiskRatio")),
            commit_log_min_offset=_int_or_none(info.get("commitLogMinOffset")),
            commit_log_max_offset=_int_or_none(info.get("commitLogMaxOffset")),
        )

    async def config(self, addr: str, access: BrokerAccess = PLAIN) -> dict[str, str]:
        conf = await self._run(addr, access, lambda c: c.get_broker_config())
        assert isinstance(conf, dict)
        return {str(k): str(v) for k, v in conf.items()}

    async def push_config(self, addr: str, props: Mapping[str, str], access: BrokerAccess = PLAIN) -> dict[str, str]:
        """UPDATE_BROKER_CONFIG, then read back what the broker now runs with for those keys."""
        await self._run(addr, access, lambda c: c.update_broker_config(dict(props)))
        conf = await self.config(addr, access)
        return {k: conf.get(k, "") for k in props}

    async def replication(self, http_addr: str) -> ReplicationView:
        """A broker's role and, a master's, its slaves and their lag, from its ``/metrics`` at
        ``http_addr`` (host:port)."""
        return await self._metrics(http_addr, parse_ha_metrics)

    async def held(self, http_addr: str) -> HeldMessages:
        """What a broker holds for later delivery on itself (:class:`HeldMessages`), from its
        ``/metrics`` at ``http_addr`` (host:port)."""
        return await self._metrics(http_addr, parse_held_metrics)

    async def _metrics(self, http_addr: str, parse: Callable[[str], _Parsed]) -> _Parsed:
        """A broker's ``/metrics`` at ``http_addr``, read off the loop and parsed by ``parse``."""
        try:
            return parse(await asyncio.to_thread(self._metrics_reader, http_addr))
        except Exception as exc:  # refused, timed out, not Prometheus text: nothing known from it
            raise BrokerError(f"{http_addr}/metrics: {type(exc).__name__}: {exc}") from exc

    async def namesrv_address(self, addr: str, access: BrokerAccess = PLAIN) -> str:
        """The embedded name server of the broker at ``addr``: its host, the port it reports."""
        conf = await self.config(addr, access)
        port = _int_or_none(conf.get("namesrvListenPort"))
        if port is None:
            raise BrokerError(f"{addr}: no namesrvListenPort in its configuration")
        return f"{addr.rsplit(':', 1)[0]}:{port}"

    async def write_perm(self, namesrv_addr: str, broker_name: str, *, add: bool,
                         access: BrokerAccess = PLAIN) -> int:
        """Wipe (``add`` False) or add back the write permission of ``broker_name`` at one name
        server; how many topics it routes to that broker."""
        try:
            return await asyncio.to_thread(_write_perm, namesrv_addr, access, broker_name, add)
        except RemotingError as exc:
            raise BrokerError(f"{namesrv_addr}: {exc}", denied=ACL_EXCEPTION in exc.remark) from exc
        except Exception as exc:  # as in _run: anything means "not done"
            raise BrokerError(f"{namesrv_addr}: {type(exc).__name__}: {exc}") from exc

    async def consume_stats(self, addr: str, access: BrokerAccess = PLAIN) -> list[GroupConsumeStats]:
        """Every consumer group's progress on the broker at ``addr``."""
        stats = await self._run(addr, access, lambda c: c.broker_consume_stats()[0])
        assert isinstance(stats, list)
        return stats

    async def topic_configs(self, addr: str, access: BrokerAccess = PLAIN) -> dict[str, TopicConfig]:
        table = await self._run(addr, access, lambda c: c.topic_configs())
        assert isinstance(table, dict)
        return table

    async def create_topics(self, addr: str, configs: list[TopicConfig], access: BrokerAccess = PLAIN) -> None:
        def create(client: AdminClient) -> None:
            for config in configs:
                client.create_topic_config(config)

        await self._run(addr, access, create)

    async def delete_expired(self, addr: str, access: BrokerAccess = PLAIN) -> bool:
        done = await self._run(addr, access, lambda c: c.delete_expired_commit_log())
        return bool(done)

    async def auth_state(self, addr: str, access: BrokerAccess) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A broker's RocketMQ 5.3 users and ACLs (AUTH_LIST_USER, AUTH_LIST_ACL), as it lists them."""
        state = await self._run(addr, access, lambda c: (c.list_users(), c.list_acls()))
        assert isinstance(state, tuple)
        return state[0], state[1]

    async def apply_auth(self, addr: str, access: BrokerAccess, operation: AdminOperation) -> None:
        """One user or ACL operation of :func:`rocketstore.operator.auth.plan`."""
        await self._run(addr, access, operation.send)
