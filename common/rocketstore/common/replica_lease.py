"""A broker group's replica info as a Kubernetes ``coordination.k8s.io/v1`` Lease holds it.

On Kubernetes the Lease of a broker group is its source of truth for mastership
(docs/failover.md): the brokers write it (``rocketstore.broker.lease_elector``) and the operator
only reads it for the RocketStore's status. Both read and write the same format, so it lives
here, below both layers. The fields map RocketMQ 5's controller state (its ``GET_REPLICA_INFO``
answer and the SyncStateSet) onto what a Lease already keeps:

=========================================  ======================================================
``spec.holderIdentity``                    the master's replica id (empty: released, no master)
``spec.leaseTransitions``                  the master epoch
``spec.renewTime``                         the master's last renewal (compared, never trusted
                                           as a time: clocks of two machines differ)
``spec.leaseDurationSeconds``              how long a candidate waits on an unchanged renewTime
``rocketstore.io/master-address``          the master's remoting address (host:port)
``rocketstore.io/master-ha-address``       the master's HA listen address, slaves connect to it
``rocketstore.io/sync-state-set``          ``{"syncStateSet": [ids], "syncStateSetEpoch": n}``
``rocketstore.io/cluster``, ``.../broker-name``  whose group this is (brokerClusterName, brokerName)
=========================================  ======================================================

Plain dicts in and out (the API's JSON, camelCase), no client library: the operator reads Leases
through its own client and the broker through the typed one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

API_VERSION: Final = "coordination.k8s.io/v1"
KIND: Final = "Lease"

_PREFIX: Final = "rocketstore.io/"
MASTER_ADDRESS_ANNOTATION: Final = _PREFIX + "master-address"
MASTER_HA_ADDRESS_ANNOTATION: Final = _PREFIX + "master-ha-address"
SYNC_STATE_SET_ANNOTATION: Final = _PREFIX + "sync-state-set"
CLUSTER_ANNOTATION: Final = _PREFIX + "cluster"
BROKER_NAME_ANNOTATION: Final = _PREFIX + "broker-name"
#: the label every group Lease carries, so the operator lists a store's Leases by selector
COMPONENT_LABEL: Final = {"app.kubernetes.io/name": "rocketstore", "app.kubernetes.io/component": "master-lease"}
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


class LeaseFormatError(ValueError):
    """A Lease that is not a broker group's (a foreign holderIdentity, an unreadable annotation)."""


@dataclass(frozen=True)
class ReplicaInfo:
    """Who is master of a broker group and which replicas may succeed it.

    RocketMQ's ``GET_REPLICA_INFO`` answer and SyncStateSet in one record; replicas are named by
    their stable replica id.
    """

    #: the master's replica id; None once a master released the Lease (no master)
    master_replica_id: int | None
    master_address: str
    master_ha_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class ReplicaLease:
    """One broker group's Lease as read: its replica info and the Lease fields an election needs."""

    namespace: str
    name: str
    cluster: str
    broker_name: str
    info: ReplicaInfo
    #: as the API server returned it; only ever compared for equality
    renew_time: str | None
    acquire_time: str | None
    lease_duration_seconds: int | None
    #: the version a compare-and-swap replaces
    resource_version: str


def lease_name(cluster: str, broker_name: str) -> str:
    """The Lease of group ``broker_name`` of cluster ``cluster``: ``<cluster>.<brokerName>``.

    Both are Kubernetes names under the operator (a RocketStore's name and its pod names), so the
    name reads as what it is. Other spellings (RocketMQ allows capitals and ``_`` in a brokerName)
    are made name-safe and get a digest of the originals, so two groups never share a Lease.
    """
    if _DNS_LABEL.fullmatch(cluster) and _DNS_LABEL.fullmatch(broker_name):
        return f"{cluster}.{broker_name}"
    safe = re.sub(r"[^a-z0-9-]+", "-", f"{cluster}-{broker_name}".lower()).strip("-")[:200]
    digest = hashlib.sha256(f"{cluster}\0{broker_name}".encode()).hexdigest()[:10]
    return f"{safe}-{digest}" if safe else digest


def lease_selector(cluster: str) -> dict[str, str]:
    """The labels of every group Lease of a cluster (a RocketStore's name is its cluster name)."""
    return {**COMPONENT_LABEL, INSTANCE_LABEL: cluster}


def micro_time(wall: float) -> str:
    """A Kubernetes MicroTime (RFC 3339, microseconds, UTC) of a ``time.time()`` value."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(namespace: str, cluster: str, broker_name: str, info: ReplicaInfo, *, lease_duration_seconds: int,
               renew_time: str | None, acquire_time: str | None, resource_version: str | None) -> dict[str, Any]:
    """The Lease object that records ``info``; with ``resource_version`` a compare-and-swap replace."""
    metadata: dict[str, Any] = {
        "name": lease_name(cluster, broker_name),
        "namespace": namespace,
        "labels": {**COMPONENT_LABEL, **({INSTANCE_LABEL: cluster} if _LABEL_VALUE.fullmatch(cluster)
                                          and len(cluster) <= 63 else {})},
        "annotations": {
            CLUSTER_ANNOTATION: cluster,
            BROKER_NAME_ANNOTATION: broker_name,
            MASTER_ADDRESS_ANNOTATION: info.master_address,
            MASTER_HA_ADDRESS_ANNOTATION: info.master_ha_address,
            SYNC_STATE_SET_ANNOTATION: json.dumps({"syncStateSet": sorted(info.sync_state_set),
                                                   "syncStateSetEpoch": info.sync_state_set_epoch}),
        },
    }
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    spec: dict[str, Any] = {
        "holderIdentity": None if info.master_replica_id is None else str(info.master_replica_id),
        "leaseDurationSeconds": lease_duration_seconds,
        "leaseTransitions": info.master_epoch,
        "renewTime": renew_time,
        "acquireTime": acquire_time,
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def parse_lease(obj: Mapping[str, Any]) -> ReplicaLease:
    """A Lease (the API's JSON) as a group's replica info; :class:`LeaseFormatError` if it is none."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    spec = obj.get("spec") or {}
    name = metadata.get("name", "")
    holder = spec.get("holderIdentity") or None
    try:
        master = None if holder is None else int(holder)
        sync = json.loads(annotations.get(SYNC_STATE_SET_ANNOTATION) or '{"syncStateSet": [], "syncStateSetEpoch": 0}')
        members = frozenset(int(m) for m in sync["syncStateSet"])
        sync_epoch = int(sync["syncStateSetEpoch"])
    except (ValueError, TypeError, KeyError) as e:
        raise LeaseFormatError(f"Lease {name} is not a broker group's: {e}") from None
    return ReplicaLease(
        namespace=metadata.get("namespace", ""),
        name=name,
        cluster=annotations.get(CLUSTER_ANNOTATION, ""),
        broker_name=annotations.get(BROKER_NAME_ANNOTATION, ""),
        info=ReplicaInfo(
            master_replica_id=master,
            master_address=annotations.get(MASTER_ADDRESS_ANNOTATION, "") if master is not None else "",
            master_ha_address=annotations.get(MASTER_HA_ADDRESS_ANNOTATION, "") if master is not None else "",
            master_epoch=int(spec.get("leaseTransitions") or 0),
            sync_state_set=members,
            sync_state_set_epoch=sync_epoch,
        ),
        renew_time=spec.get("renewTime"),
        acquire_time=spec.get("acquireTime"),
        lease_duration_seconds=spec.get("leaseDurationSeconds"),
        resource_version=str(metadata.get("resourceVersion", "")),
    )

