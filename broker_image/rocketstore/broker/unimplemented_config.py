"""broker.conf keys RocketStore does not implement, and what the broker does when one is set.

Accepting a key and ignoring it is how an operator ends up believing messages are replicated,
authenticated or thread-pooled when they are not. Each key of :data:`UNIMPLEMENTED` says what the
broker does instead and how it answers a broker.conf (or a live update) that sets it:

``Response.REFUSE``  security keys: the broker does not start (exit code 2, one line naming the key
                     and why), and a live update setting one is refused naming it. A warning is not
                     enough here: the broker would report ready and serve everyone while the
                     operator believes it locked.
``Response.WARN``    every other key: named in a warning at start, refused by a live update
                     (UPDATE_BROKER_CONFIG), listed in the docs. Serving without them changes
                     performance or durability, not who may do what, and the client sees the
                     difference where it matters. The HA keys (``brokerRole``, ``ha*``,
                     ``slaveTimeout``, ``brokerIP2``) are implemented (master/slave replication,
                     docs/replication.md) and no longer listed; DLedger's are.

Keys missing here are implemented (or, for the transaction keys, owned by that feature).

REFUSE keys. RocketMQ 5.3's ``AuthConfig`` (auth module), which BrokerStartup fills from broker.conf
next to BrokerConfig, is implemented (broker/auth/, read by auth/auth_config.py), except for values
RocketStore cannot honour: a switch (``authenticationEnabled`` / ``authorizationEnabled`` /
``migrateAuthFromV1Enabled``) that is neither ``true`` nor ``false``; and a provider,
metadata-provider or strategy class other than Apache's own (a custom class would decide who may
do what in a way RocketStore does not). Its whitelists, first user and inner
credentials are implemented and not listed; its cache sizes and expiries are ignored (RocketStore
has no such caches). Also refused:
NettyClientConfig's ``useTLS`` (and ``tls.enable``, the system property it defaults from, which an
operator moving ``-D`` options into broker.conf would write, as RocketStore takes ``tls.server.*``
from there): TLS on the broker's own connections, which register it with the name servers in
plain text here.

What counts as set: RocketMQ's defaults are off (false) and unset (null). A switch is refused
unless its value is blank, ``false`` or ``true`` (any case); RocketMQ's Boolean.parseBoolean reads
``yes`` or ``1`` as false too, but whoever wrote them meant on, and refusing costs one edited line
where accepting leaves the broker open. A class name is refused when neither blank nor one of
Apache's, even with its switch off: the line is there because someone means to configure auth, and
its switch may be a line further down or flipped later. None of the REFUSE keys is a BrokerConfig
field, so they are checked on the text itself: broker.conf's at load (:func:`refused_settings`, from
:func:`rocketstore.broker.broker_config.load_config`) and an update's body.

The TLS and ACL keys BrokerConfig accepts (``aclEnable``, ``rocketmq.acl.plain.file``,
``tls.server.*``, ``tls.config.file``) are implemented, but read at start only, and a live update
is not written back to broker.conf (see broker_config.py): a live change of one would never take
effect, so :func:`start_only_changes` names it and the update is refused. Not refused, being no
weaker than RocketMQ: ``tls.server.authClient`` (client certificates are always verified when
``tls.server.need.client.auth`` asks for them) and ``tls.test.mode.enable`` (the configured
certificate is always served, never a self-signed one); both are logged as unknown keys.

WARN keys apply when the key's current value differs from RocketMQ's default.

Replication keys are implemented but, like the security ones, not changed live: ``brokerRole``,
``brokerId`` and ``haMasterAddress`` decide at start what the broker registers as and where its
HA client replicates from (a role change without a restart is failover's, a later issue), and
``haListenPort`` is listenPort + 1 from the start on. :func:`start_only_changes` names them too.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from rocketstore.broker.auth.auth_config import APACHE_CLASSES
from rocketstore.store.config import ConfigError


class Response(enum.Enum):
    """How the broker answers a key of :data:`UNIMPLEMENTED` that is set (see the module docstring)."""

    REFUSE = "refuse"  # does not start; a live update is refused
    WARN = "warn"  # a warning at start; a live update is refused


@dataclass(frozen=True, slots=True)
class Unimplemented:
    """One key's entry: how the broker answers it, and what it does instead of what the key asks."""

    response: Response
    instead: str


_DLEDGER: Final = "no DLedger (Raft) CommitLog: the broker writes its own CommitLog, replicated nowhere"
_CQ_EXT: Final = "no ConsumeQueue extension files (filter bit maps): none are written or read"
_TRANSIENT_POOL: Final = "no transient store pool: messages are written straight into the mapped CommitLog"
_WARM: Final = "new CommitLog files are not pre-touched"
_LMQ: Final = "no light message queues or multi-dispatch: a message goes to its own topic only"
_NO_EFFECT: Final = "no effect in RocketStore"
_POOLS: Final = ("no request thread pools or queues: requests run on one event loop, bounded by "
                 "per-connection flow control")
_COMMERCIAL: Final = "no commercial statistics are kept"
_BLOOM: Final = "no consume-queue bloom-filter bit maps are computed"
_SYNC_DELIVER: Final = "delayed messages are delivered one put at a time (no asynchronous delivery)"
_SWITCH: Final = ("write true or false: RocketMQ reads any other text as false, which would leave the broker "
                  "open where whoever wrote it meant it locked")
_PROVIDER: Final = ("only Apache RocketMQ's own provider and strategy classes are implemented (auth/auth_config.py); "
                    "another class would decide who may do what in a way RocketStore does not")
_CLIENT_TLS: Final = ("no TLS on the broker's own connections: it would register with the name servers in "
                      "plain text")

#: Security keys (see the module docstring): the broker refuses to start with one set.
_REFUSED: Final[Mapping[str, str]] = {
    # -- RocketMQ 5.3 AuthConfig --
    "authenticationEnabled": _SWITCH,
    "authorizationEnabled": _SWITCH,
    **dict.fromkeys(APACHE_CLASSES, _PROVIDER),
    "migrateAuthFromV1Enabled": _SWITCH,
    # -- NettyClientConfig, and the system property it defaults from --
    "useTLS": _CLIENT_TLS,
    "tls.enable": _CLIENT_TLS,
}

#: Keys whose absence changes performance or durability, not who may do what: a warning at start.
_WARNED: Final[Mapping[str, str]] = {
    # -- MessageStoreConfig --
    "storePathDLedgerCommitLog": _DLEDGER,
    "enableDLegerCommitLog": _DLEDGER,
    "dLegerGroup": _DLEDGER,
    "dLegerPeers": _DLEDGER,
    "dLegerSelfId": _DLEDGER,
    "preferredLeaderId": _DLEDGER,
    "enableConsumeQueueExt": _CQ_EXT,
    "mappedFileSizeConsumeQueueExt": _CQ_EXT,
    "bitMapLengthConsumeQueueExt": _CQ_EXT,
    "transientStorePoolEnable": _TRANSIENT_POOL,
    "transientStorePoolSize": _TRANSIENT_POOL,
    "fastFailIfNoBufferInStorePool": _TRANSIENT_POOL,
    "commitIntervalCommitLog": _TRANSIENT_POOL + " (no commit step)",
    "commitCommitLogLeastPages": _TRANSIENT_POOL + " (no commit step)",
    "commitCommitLogThoroughInterval": _TRANSIENT_POOL + " (no commit step)",
    "warmMapedFileEnable": _WARM,
    "flushLeastPagesWhenWarmMapedFile": _WARM,
    "useReentrantLockWhenPutMessage": "the put lock is always a blocking mutex (no spin lock)",
    "flushCommitLogTimed": "the flush service always waits on its interval the same way",
    "putMsgIndexHightWater": _NO_EFFECT,
    "debugLockEnable": "put-lock holding time is not logged",
    "duplicationEnable": _NO_EFFECT,
    "diskFallRecorded": _NO_EFFECT,
    "enableBatchPush": _NO_EFFECT,
    "enableScheduleAsyncDeliver": _SYNC_DELIVER,
    "scheduleAsyncDeliverMaxPendingLimit": _SYNC_DELIVER,
    "scheduleAsyncDeliverMaxResendNum2Blocked": _SYNC_DELIVER,
    "enableScheduleMessageStats": "delay-level statistics are the /metrics delayed_messages_* series only",
    "enableLmq": _LMQ,
    "enableMultiDispatch": _LMQ,
    "maxLmqConsumeQueueNum": _LMQ,
    # -- BrokerConfig --
    "messageStorePlugIn": "no store plug-ins: the built-in store is used",
    "sendMessageThreadPoolNums": _POOLS,
    "putMessageFutureThreadPoolNums": _POOLS,
    "pullMessageThreadPoolNums": _POOLS,
    "processReplyMessageThreadPoolNums": _POOLS,
    "queryMessageThreadPoolNums": _POOLS,
    "adminBrokerThreadPoolNums": _POOLS,
    "clientManageThreadPoolNums": _POOLS,
    "consumerManageThreadPoolNums": _POOLS,
    "heartbeatThreadPoolNums": _POOLS,
    "endTransactionThreadPoolNums": _POOLS,
    "sendThreadPoolQueueCapacity": _POOLS,
    "putThreadPoolQueueCapacity": _POOLS,
    "pullThreadPoolQueueCapacity": _POOLS,
    "replyThreadPoolQueueCapacity": _POOLS,
    "queryThreadPoolQueueCapacity": _POOLS,
    "clientManagerThreadPoolQueueCapacity": _POOLS,
    "consumerManagerThreadPoolQueueCapacity": _POOLS,
    "heartbeatThreadPoolQueueCapacity": _POOLS,
    "endTransactionPoolQueueCapacity": _POOLS,
    "waitTimeMillsInPullQueue": _POOLS + " (no pull queue to expire requests from)",
    "waitTimeMillsInHeartbeatQueue": _POOLS + " (no heartbeat queue to expire requests from)",
    "brokerFastFailureEnable": _POOLS + " (no queued requests to fail fast)",
    "flushConsumerOffsetHistoryInterval": _NO_EFFECT,
    "filterServerNums": "no filter servers are started",
    "highSpeedMode": _NO_EFFECT,
    "transferMsgByHeap": _NO_EFFECT,
    "maxDelayTime": _NO_EFFECT,
    "commercialEnable": _COMMERCIAL,
    "commercialTimerCount": _COMMERCIAL,
    "commercialTransCount": _COMMERCIAL,
    "commercialBigCount": _COMMERCIAL,
    "commercialBaseCount": _COMMERCIAL,
    "disableConsumeIfConsumerReadSlowly": "a consumer reading slowly is never disabled",
    "consumerFallbehindThreshold": "a consumer reading slowly is never disabled",
    "enableCalcFilterBitMap": _BLOOM,
    "expectConsumerNumUseFilter": _BLOOM,
    "maxErrorRateOfBloomFilter": _BLOOM,
    "filterDataCleanTimeSpan": _BLOOM,
    "enableDetailStat": "no per-topic/group statistics beyond /metrics",
    "autoDeleteUnusedStats": "no per-topic/group statistics beyond /metrics",
    "isolateLogEnable": _NO_EFFECT,
}

#: broker.conf key -> how the broker answers it being set, and what it does instead.
UNIMPLEMENTED: Final[Mapping[str, Unimplemented]] = MappingProxyType({
    **{key: Unimplemented(Response.REFUSE, instead) for key, instead in _REFUSED.items()},
    **{key: Unimplemented(Response.WARN, instead) for key, instead in _WARNED.items()},
})


_START_ONLY: Final = ("read at start only, and a live update is not written back to broker.conf, so the "
                      "change would never take effect: change broker.conf and restart")
_START_ONLY_HA: Final = ("decides at start what this broker registers as and replicates from; a change "
                         "without a restart is failover's (not implemented): change broker.conf and restart")

#: The implemented keys that are read at start only (see the module docstring), with why.
START_ONLY_KEYS: Final[Mapping[str, str]] = MappingProxyType({
    **dict.fromkeys(("aclEnable", "rocketmq.acl.plain.file", "tls.server.mode", "tls.server.certPath",
                     "tls.server.keyPath", "tls.server.trustCertPath", "tls.server.need.client.auth",
                     "tls.config.file"), _START_ONLY),
    **dict.fromkeys(("brokerRole", "brokerId", "haMasterAddress", "haListenPort"), _START_ONLY_HA),
    **dict.fromkeys(("controllerLeaseEnable", "controllerLeaseNamespace", "controllerLeaseKubeconfig",
                     "controllerLeaseDurationMills", "controllerLeaseRenewIntervalMills",
                     "controllerLeaseMarginMills", "controllerLeaseHandOverTimeoutMills"), _START_ONLY),
})

#: Text values of REFUSE keys that mean "not set": blank, or false (a switch written at its default).
_UNSET_TEXTS: Final = frozenset({"", "false"})
#: REFUSE keys' values that are implemented: a switch's true (any case, compared lower-cased), and
#: Apache's own provider and strategy classes (compared as written).
_IMPLEMENTED_VALUES: Final[Mapping[str, frozenset[str]]] = {
    "authenticationEnabled": frozenset({"true"}),
    "authorizationEnabled": frozenset({"true"}),
    "migrateAuthFromV1Enabled": frozenset({"true"}),
    **APACHE_CLASSES,
}


@dataclass(frozen=True, slots=True)
class UnimplementedSetting:
    """A broker.conf key set to a value the broker does not implement."""

    key: str
    value: str
    instead: str
    response: Response = Response.WARN

    def message(self) -> str:
        """The warning logged at start (WARN keys: a REFUSE key stops the start, see :func:`refusal`)."""
        return f"broker.conf {self.key}={self.value} is not implemented: {self.instead}"


def refusal(settings: Sequence[UnimplementedSetting]) -> ConfigError:
    """The error refusing a start or a live update: the first setting's key, value and why, and the
    other keys, so that one line tells the operator everything to fix."""
    first = settings[0]
    verdict = "refused" if first.response is Response.REFUSE else "not implemented"
    others = ", ".join(setting.key for setting in settings[1:])
    return ConfigError(first.key, first.value, f"{verdict}: {first.instead}" + (f" (also: {others})" if others else ""))


def refused_settings(props: Mapping[str, str]) -> list[UnimplementedSetting]:
    """The REFUSE keys ``props`` (broker.conf's text, or a live update's) sets, in table order.

    A value counts as set unless it is blank or ``false`` in any case (the module docstring says
    why a text Java would read as false, such as ``yes``, still counts).
    """
    found: list[UnimplementedSetting] = []
    for key, entry in UNIMPLEMENTED.items():
        value = props.get(key)
        if entry.response is not Response.REFUSE or value is None or value.strip().lower() in _UNSET_TEXTS:
            continue
        implemented = _IMPLEMENTED_VALUES.get(key, frozenset())
        if value.strip() not in implemented and value.strip().lower() not in implemented:
            found.append(UnimplementedSetting(key, value, entry.instead, Response.REFUSE))
    return found


def unimplemented_settings(current: Mapping[str, str], defaults: Mapping[str, str]) -> list[UnimplementedSetting]:
    """The WARN keys of ``current`` (key -> value text, as ``to_properties`` gives them) that are set
    to a value this broker does not implement, in table order.

    ``defaults`` holds RocketMQ's default of each key in the same form; a key absent from it (a
    None default such as ``haMasterAddress``) counts as set whenever ``current`` has it.
    """
    found: list[UnimplementedSetting] = []
    for key, entry in UNIMPLEMENTED.items():
        value = current.get(key)
        if entry.response is not Response.WARN or value is None:
            continue
        if key not in defaults or value != defaults[key]:
            found.append(UnimplementedSetting(key, value, entry.instead))
    return found


def start_only_changes(asked: Mapping[str, str | None], current: Mapping[str, str]) -> list[UnimplementedSetting]:
    """The keys of START_ONLY_KEYS a live update would change (``asked`` and ``current`` as
    ``to_properties`` gives them, None or absent where a key has no value)."""
    return [UnimplementedSetting(key, value or "", START_ONLY_KEYS[key], Response.REFUSE)
            for key, value in asked.items() if key in START_ONLY_KEYS and value != current.get(key)]
