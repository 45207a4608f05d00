"""broker.conf keys RocketStore accepts (RocketMQ 4.9.8 spells them, so a RocketMQ broker.conf loads
unchanged) but does not implement, with what the broker does instead.

Accepting a key and ignoring it silently is how an operator ends up believing messages are
replicated, authenticated or thread-pooled when they are not. So every such key set to anything
but its default is named in a warning at start (and refused by a live update, UPDATE_BROKER_CONFIG) by
:func:`unimplemented_settings`, and docs/broker-conf.md lists them. Keys missing here are implemented (or,
for the transaction keys, owned by that feature).

The table is keyed by broker.conf key; each entry says what the broker does instead. An entry
applies when the key's current value differs from RocketMQ's default, except where
:data:`_WHEN` says otherwise (``brokerRole``: only SYNC_MASTER and SLAVE lack an implementation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

_DLEDGER: Final = "no DLedger (Raft) CommitLog: the broker writes its own CommitLog, replicated nowhere"
_HA: Final = "no HA replication: no slave connects and nothing is copied to or from another broker"
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

#: broker.conf key -> what the broker does instead of what the key asks.
UNIMPLEMENTED: Final[Mapping[str, str]] = MappingProxyType({
    # -- MessageStoreConfig --
    "storePathDLedgerCommitLog": _DLEDGER,
    "enableDLegerCommitLog": _DLEDGER,
    "dLegerGroup": _DLEDGER,
    "dLegerPeers": _DLEDGER,
    "dLegerSelfId": _DLEDGER,
    "preferredLeaderId": _DLEDGER,
    "haListenPort": _HA,
    "haSendHeartbeatInterval": _HA,
    "haHousekeepingInterval": _HA,
    "haTransferBatchSize": _HA,
    "haMasterAddress": _HA,
    "haSlaveFallbehindMax": _HA,
    "slaveTimeout": _HA,
    "brokerRole": "",  # the text depends on the role: see _WHEN
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
    "brokerIP2": "no HA: the address slaves would replicate from is never served",
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
})


def _broker_role(value: str, default: str) -> str | None:
    if value == "SYNC_MASTER":
        return ("no HA replication: a send that waits for the store is stored here and answered "
                "SLAVE_NOT_AVAILABLE, RocketMQ's answer when no slave is in sync")
    if value == "SLAVE":
        return ("no HA replication from a master: this broker refuses sends (SERVICE_NOT_AVAILABLE) and "
                "serves only what its own store holds")
    return None  # ASYNC_MASTER is what the broker does


#: Keys whose rule is not "differs from the default": a function of (value, default) giving the
#: text to log, or None when the value is implemented.
_WHEN: Final[Mapping[str, Callable[[str, str], str | None]]] = MappingProxyType({
    "brokerRole": _broker_role,
})


@dataclass(frozen=True, slots=True)
class UnimplementedSetting:
    """A broker.conf key set to a value the broker does not implement."""

    key: str
    value: str
    instead: str

    def message(self) -> str:
        return f"broker.conf {self.key}={self.value} is not implemented: {self.instead}"


def unimplemented_settings(current: Mapping[str, str], defaults: Mapping[str, str]) -> list[UnimplementedSetting]:
    """The keys of ``current`` (key -> value text, as ``to_properties`` gives them) that are set to a
    value this broker does not implement, in table order.

    ``defaults`` holds RocketMQ's default of each key in the same form; a key absent from it (a
    None default such as ``haMasterAddress``) counts as set whenever ``current`` has it.
    """
    found: list[UnimplementedSetting] = []
    for key, instead in UNIMPLEMENTED.items():
        value = current.get(key)
        if value is None:
            continue
        default = defaults.get(key, "")
        rule = _WHEN.get(key)
        if rule is not None:
            text = rule(value, default)
            if text is not None:
                found.append(UnimplementedSetting(key, value, text))
        elif key not in defaults or value != default:
            found.append(UnimplementedSetting(key, value, instead))
    return found
