"""Replication on /metrics: what a master sees of its slaves, what a slave sees of its master.

A master (ASYNC_MASTER, SYNC_MASTER) publishes, per connected slave (label ``slave``, the
slave's host:port as the master's HA listener sees it):

    rocketstore_ha_slave_lag_bytes{slave}    the master's CommitLog max offset minus what the
                                             slave acknowledged
    rocketstore_ha_slave_lag_seconds{slave}  store time of the master's newest record minus that
                                             of the first record the slave lacks (0 caught up;
                                             -1 when it cannot be told yet)
    rocketstore_ha_slaves_in_sync            slaves within haSlaveFallbehindMax of the master (what
                                             SYNC_MASTER needs: 0 means its sends answer
                                             SLAVE_NOT_AVAILABLE)

A SLAVE publishes:

    rocketstore_ha_master_connected          1 while its HA client is connected to the master
    rocketstore_ha_slave_behind_refused      1 once it refused its master's stream because its own
                                             log has a tail the master lacks (until another master
                                             address or a restart)

The numbers are the store's HA service's snapshots (``slaves()``, ``client_state()``), read at
each scrape; this module only shapes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from rocketstore.store.abstract_ha_client import HAClientState
from rocketstore.store.config import BrokerRole
from rocketstore.store.ha_service import SlaveInfo


def master_families(slaves: Sequence[SlaveInfo] | None) -> list[Metric]:
    """The master's families; ``slaves`` None (a slave's scrape): the families without samples."""
    lag_bytes = GaugeMetricFamily("rocketstore_ha_slave_lag_bytes",
                                  "Bytes of CommitLog the slave has not acknowledged", labels=["slave"])
    lag_seconds = GaugeMetricFamily("rocketstore_ha_slave_lag_seconds",
                                    "Store-time age of the oldest record the slave has not acknowledged "
                                    "(-1: unknown yet)", labels=["slave"])
    in_sync = GaugeMetricFamily("rocketstore_ha_slaves_in_sync",
                                "Connected slaves within haSlaveFallbehindMax of this master")
    if slaves is not None:
        for slave in slaves:
            lag_bytes.add_metric([slave.address], slave.lag_bytes)
            lag_seconds.add_metric([slave.address], slave.lag_seconds)
        in_sync.add_metric([], sum(1 for slave in slaves if slave.in_sync))
    return [lag_bytes, lag_seconds, in_sync]


def slave_families(state: HAClientState | None) -> list[Metric]:
    """The slave's families; ``state`` None (a master's scrape): the families without samples."""
    connected = GaugeMetricFamily("rocketstore_ha_master_connected", "1 while this slave's HA client is connected "
                                  "to its master")
    refused = GaugeMetricFamily("rocketstore_ha_slave_behind_refused", "1 when this slave refused its master's "
                                "stream (its log has a tail the master lacks)")
    if state is not None:
        connected.add_metric([], int(state.connected))
        refused.add_metric([], int(state.refused_reason is not None))
    return [connected, refused]


def ha_families(role: BrokerRole, slaves: Sequence[SlaveInfo], state: HAClientState) -> Iterable[Metric]:
    """The families for a broker of ``role`` (read at the scrape: a role may change later). Every
    broker lists all five families, the other role's without samples, so dashboards and alert rules
    find each name on any broker; a master never reports a slave's 0, nor a slave a master's 0."""
    if role is BrokerRole.SLAVE:
        return [*master_families(None), *slave_families(state)]
    return [*master_families(slaves), *slave_families(None)]
