"""A broker group whose master is elected by the Kubernetes Lease, as the failover tests drive it:
the brokers' configuration, the Lease's view of the group, sends, pulls and the CommitLog.

Shared by test_lease_failover.py (kill -9, SIGSTOP) and test_lease_partition.py (a network
partition); a module of its own, not conftest, for the reason operator_support.py gives.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from inprocess_broker import RawClient
from kubernetes import client
from replica_log import commit_log, pulled, send

from rocketstore.common.replica_lease import lease_name, parse_lease
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.headers import SendMessageRequestHeader

__all__ = ["CLUSTER", "commit_log", "group_conf", "lease_view", "pulled", "send", "send_unanswered"]

CLUSTER = "TestCluster"


def group_conf(group: str, replica_id: int, namespace: str, kubeconfig: Path, ha_host: str) -> str:
    """broker.conf lines of replica ``replica_id`` of ``group``: controller mode on the Lease
    (D 3 s, R 1 s, m 0.15 s), every acknowledgement waiting for the whole SyncStateSet, and
    ``ha_host`` as the HA address (brokerIP2) the Lease records for slaves to connect to."""
    return (f"brokerClusterName={CLUSTER}\nbrokerName={group}\nbrokerId={replica_id}\nenableControllerMode=true\n"
            f"controllerLeaseEnable=true\ncontrollerLeaseNamespace={namespace}\n"
            f"controllerLeaseKubeconfig={kubeconfig}\ncontrollerLeaseDurationMills=3000\n"
            "controllerLeaseRenewIntervalMills=1000\ncontrollerLeaseMarginMills=150\nallAckInSyncStateSet=true\n"
            f"brokerIP2={ha_host}\nhaSendHeartbeatInterval=500\nautoCreateTopicEnable=true\n")


def lease_view(kube: Any, namespace: str, group: str) -> tuple[int | None, int, list[int]]:
    """The Lease's view of ``group``: the master's replica id, the master epoch, the SyncStateSet."""
    obj = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        "coordination.k8s.io", "v1", namespace, "leases", lease_name(CLUSTER, group))
    info = parse_lease(obj).info
    return info.master_replica_id, info.master_epoch, sorted(info.sync_state_set)


def send_unanswered(raw: RawClient, topic: str, bodies: list[bytes]) -> None:
    """One-way sends over ``raw``: stored by a master, never acknowledged to anyone."""
    for body in bodies:
        header = SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102",
                                          default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                          born_timestamp=int(time.time() * 1000), flag=0, properties="")
        raw.oneway(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext_fields(), body)
