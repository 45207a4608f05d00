"""The master of a broker group on Kubernetes: a ``coordination.k8s.io/v1`` Lease its brokers hold.

:class:`LeaseElector` is the :class:`~rocketstore.broker.master_elector.MasterElector` of
docs/failover.md on Kubernetes. etcd's linearizable writes are the consensus: every write to the
Lease is a compare-and-swap on the ``resourceVersion`` last read (409 Conflict: another broker
wrote first, the write is lost), so two brokers never both win an epoch. The Lease's format
(holderIdentity the master's replica id, leaseTransitions the master epoch, annotations with the
master's addresses and the SyncStateSet) is :mod:`rocketstore.common.replica_lease`.

The timing argument against split brain, with ``D`` the lease duration, ``R`` the renewal
interval and ``m`` the clock-rate margin (docs/failover.md):

* the master may acknowledge writes until ``t + D - m`` on its ``time.monotonic()``, ``t`` being
  when its last successful write of the Lease was *sent* (:func:`write_deadline_after`);
* a candidate takes the Lease from another holder only after it has seen the same
  (holder, epoch, renewTime) for ``D`` on its own monotonic clock, counted from when the read
  that first showed it *returned* (:class:`Sighting`): that is after the master sent the
  renewal, so the takeover comes after the master's deadline on any two clocks whose rates
  differ by less than ``m / D``. The compare-and-swap closes the rest: a renewal that lands
  after the candidate's read makes the candidate's write a 409;
* only a member of the SyncStateSet is elected; a new master starts a new epoch with the
  SyncStateSet ``{itself}`` (as RocketMQ's controller does), which it widens as its slaves catch
  up (:meth:`LeaseElector.alter_sync_state_set`);
* a master that stops releases the Lease (holder cleared) after its own deadline is gone, so an
  in-sync slave takes it at once instead of waiting ``D``;
* a planned step-down (SIGTERM before a rolling restart or a drain, :meth:`LeaseElector.hand_over`)
  first stops acknowledging, then waits (bounded) until an in-sync slave acknowledged the whole
  log, and releases the Lease with the SyncStateSet narrowed to the slaves that did
  (:func:`handed_over`): only a replica holding every acknowledged message may take it.

The decisions are pure functions (:func:`decide`, :func:`observe`, :func:`altered`) of the Lease
as read, what this replica saw before and the time; :class:`LeaseElector` only does the I/O
around them, through a :class:`LeaseClient` (:class:`KubeLeaseClient` on the API server).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.master_elector import Replica, RoleAssignment
from rocketstore.common.replica_lease import (
    API_VERSION,
    LeaseFormatError,
    ReplicaInfo,
    ReplicaLease,
    lease_body,
    lease_name,
    micro_time,
    parse_lease,
)

__all__ = [
    "Action",
    "Candidate",
    "Decision",
    "HandOver",
    "KubeLeaseClient",
    "LeaseClient",
    "LeaseConflict",
    "LeaseElector",
    "LeaseTiming",
    "Sighting",
    "altered",
    "assignment_of",
    "decide",
    "handed_over",
    "lease_elector",
    "observe",
    "pod_namespace",
    "released",
    "write_deadline_after",
]

log = logging.getLogger(__name__)

#: where a pod's service account says which namespace the pod runs in
NAMESPACE_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: how often a step-down looks at its slaves' acknowledged offsets (a put's round trip is ~1 ms)
HAND_OVER_POLL_S: Final = 0.005


# -- the decisions ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeaseTiming:
    """``D``, ``R`` and ``m`` of docs/failover.md, in seconds."""

    #: D: how long a renewTime must stay unchanged before a candidate may take the Lease
    duration: float = 3.0
    #: R: how often the master renews and a candidate reads
    renew_interval: float = 1.0
    #: m: how much earlier than D the master stops acknowledging (clock-rate drift between machines)
    margin: float = 0.15

    def __post_init__(self) -> None:
        if not 0 < self.renew_interval < self.duration:
            raise ValueError(f"the renew interval ({self.renew_interval} s) must be above 0 and below "
                             f"the lease duration ({self.duration} s)")
        if not 0 < self.margin < self.duration - self.renew_interval:
            raise ValueError(f"the margin ({self.margin} s) must be above 0 and below the lease duration "
                             f"less the renew interval ({self.duration - self.renew_interval} s)")

    @property
    def duration_seconds(self) -> int:
        """D as the Lease's whole-second ``leaseDurationSeconds``: rounded up, never shorter."""
        return math.ceil(self.duration)


@dataclass(frozen=True)
class Candidate:
    """This replica as the Lease names it when it is master."""

    replica_id: int
    address: str
    ha_address: str


@dataclass(frozen=True)
class Sighting:
    """A renewal of the Lease as this replica first saw it, and when (its monotonic clock)."""

    #: (holder, epoch, renewTime): any renewal or election changes it
    key: tuple[int | None, int, str | None]
    #: when the read that first showed it returned
    since: float


class HandOver(enum.Enum):
    """How a requested hand-over (:meth:`LeaseElector.hand_over`) ended."""

    #: the Lease was released to the slaves holding the whole log: one of them takes it
    RELEASED = "released"
    #: this replica is not the master (or no longer: another replica wrote the Lease first)
    NOT_MASTER = "not master"
    #: the SyncStateSet names no slave (or not the one asked for): nobody may succeed
    NO_SLAVE_IN_SYNC = "no slave in sync"
    #: no slave of the SyncStateSet acknowledged the whole log within the hand-over timeout
    NO_SLAVE_CAUGHT_UP = "no slave caught up"


class Action(enum.Enum):
    #: no Lease yet: create it as master of epoch 1
    CREATE = "create"
    #: become master of a new epoch (expired or released Lease, or a Lease of this replica's
    #: previous life)
    TAKE = "take"
    #: stay master: write the same epoch with a new renewTime
    RENEW = "renew"
    #: be a slave of the master the Lease names
    FOLLOW = "follow"
    #: no master to follow and none this replica may become (not in the SyncStateSet)
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    action: Action
    #: CREATE, TAKE, RENEW: the replica info to write; FOLLOW: the master's; WAIT: None
    info: ReplicaInfo | None


def observe(lease: ReplicaLease | None, previous: Sighting | None, read_returned_at: float) -> Sighting | None:
    """The sighting after a read: kept while the Lease shows the same renewal, else a new one."""
    if lease is None:
        return None
    key = (lease.info.master_replica_id, lease.info.master_epoch, lease.renew_time)
    if previous is not None and previous.key == key:
        return previous
    return Sighting(key, read_returned_at)


def _elected(me: Candidate, info: ReplicaInfo | None) -> ReplicaInfo:
    """This replica as master of the next epoch, its SyncStateSet itself alone."""
    if info is None:
        return ReplicaInfo(me.replica_id, me.address, me.ha_address, 1, frozenset({me.replica_id}), 1)
    return ReplicaInfo(me.replica_id, me.address, me.ha_address, info.master_epoch + 1,
                       frozenset({me.replica_id}), info.sync_state_set_epoch + 1)


def decide(lease: ReplicaLease | None, me: Candidate, held_epoch: int | None, sighting: Sighting | None,
           now: float, timing: LeaseTiming) -> Decision:
    """What this replica does after reading ``lease`` (None: there is no Lease).

    ``held_epoch`` is the epoch this replica is master of as far as it knows (None: not master);
    ``sighting`` is :func:`observe`'s for this read; ``now`` its monotonic clock.
    """
    if lease is None:
        return Decision(Action.CREATE, _elected(me, None))
    info = lease.info
    if info.master_replica_id == me.replica_id:
        if held_epoch == info.master_epoch:
            return Decision(Action.RENEW, replace(info, master_address=me.address, master_ha_address=me.ha_address))
        # this replica's Lease from before a restart (or a write whose answer was lost): nobody
        # else acknowledges under it, but what it acknowledged then is not known here
        return Decision(Action.TAKE, _elected(me, info))
    in_sync = me.replica_id in info.sync_state_set
    if info.master_replica_id is None:
        return Decision(Action.TAKE, _elected(me, info)) if in_sync else Decision(Action.WAIT, None)
    key = (info.master_replica_id, info.master_epoch, lease.renew_time)
    wait = max(timing.duration, lease.lease_duration_seconds or 0)
    if in_sync and sighting is not None and sighting.key == key and now - sighting.since >= wait:
        return Decision(Action.TAKE, _elected(me, info))
    return Decision(Action.FOLLOW, info)


def altered(info: ReplicaInfo, me: Candidate, held_epoch: int | None, members: frozenset[int],
            sync_state_set_epoch: int) -> ReplicaInfo | None:
    """The replica info with a new SyncStateSet, or None when the master may not change it.

    Refused unless this replica is still the master of the epoch it holds, the change starts
    from the set now recorded, and the master stays a member (it is the one copy it knows is
    complete).
    """
    if (info.master_replica_id != me.replica_id or held_epoch != info.master_epoch
            or info.sync_state_set_epoch != sync_state_set_epoch or me.replica_id not in members):
        return None
    return replace(info, sync_state_set=members, sync_state_set_epoch=sync_state_set_epoch + 1)


def released(info: ReplicaInfo) -> ReplicaInfo:
    """The replica info of a Lease its master gave up: no holder, so a member of the SyncStateSet
    takes it at its next read instead of waiting ``D`` of unchanged renewals."""
    return replace(info, master_replica_id=None, master_address="", master_ha_address="")


def handed_over(info: ReplicaInfo, me: Candidate, held_epoch: int | None, acked: Mapping[int, int],
                end_offset: int, only: int | None = None) -> ReplicaInfo | None:
    """The released replica info of a planned step-down, or None while no slave may succeed yet.

    ``end_offset`` is the end of this master's log when it stopped acknowledging, ``acked`` each
    connected slave's acknowledged offset by replica id. The successors are the SyncStateSet's
    slaves that hold the whole log (``only``: that replica alone, an admin's designated one), and
    the released Lease names them alone as the SyncStateSet: a member that lags (acknowledgements
    that waited for fewer than all members) can then not be elected and cut acknowledged
    messages. None too when this replica no longer holds the epoch it was master of (someone
    else's Lease is not this replica's to hand over).
    """
    if info.master_replica_id != me.replica_id or held_epoch != info.master_epoch:
        return None
    ready = frozenset(m for m in info.sync_state_set if m != me.replica_id and acked.get(m, -1) >= end_offset
                      and only in (None, m))
    if not ready:
        return None
    return replace(released(info), sync_state_set=ready, sync_state_set_epoch=info.sync_state_set_epoch + 1)


def write_deadline_after(sent_at: float, timing: LeaseTiming) -> float:
    """Until when a master whose write of the Lease was sent at ``sent_at`` may acknowledge."""
    return sent_at + timing.duration - timing.margin


def assignment_of(info: ReplicaInfo) -> RoleAssignment | None:
    """The role assignment a replica applies for ``info``; None when it names no master."""
    if info.master_replica_id is None:
        return None
    return RoleAssignment(master_replica_id=info.master_replica_id, master_address=info.master_address,
                          master_ha_address=info.master_ha_address, master_epoch=info.master_epoch,
                          sync_state_set=info.sync_state_set, sync_state_set_epoch=info.sync_state_set_epoch)


# -- the I/O ---------------------------------------------------------------------------------------

class LeaseConflict(Exception):
    """The compare-and-swap lost: the Lease changed (or was created) since it was read."""


class LeaseClient(Protocol):
    """Reads and compare-and-swap writes of one Lease."""

    async def read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Lease, or None when there is none."""

    async def create(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Creates the Lease; :class:`LeaseConflict` if it exists."""

    async def replace(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Replaces the Lease if its resourceVersion is still ``body``'s; :class:`LeaseConflict` if not."""

    async def close(self) -> None:
        """Lets go of the connections; called by the elector's ``stop``."""


class KubeLeaseClient:
    """:class:`LeaseClient` on the API server, through the official ``kubernetes`` client.

    Requests go out as the API's JSON through the client's transport (credentials, TLS, the
    service account token the library re-reads when its copy is a minute old), not through its
    typed ``CoordinationV1Api``: that one turns a body into its model first, and a renewTime
    whose microseconds are 0 comes back out as text the API server refuses. The client is
    synchronous, so each call runs in a worker thread, bounded by ``timeout``. A failed call is
    simply tried again at the next renewal, so nothing here retries, urllib3 included: its default
    three retries, each with the whole timeout, would keep a renewal that gets no answer (a
    partition) going past the master's write deadline, holding the elector's lock through the
    renewal that would have been sent on a fresh connection, later, and kept it master.
    ``kubernetes`` (the ``operator`` extra, in the image) is imported only when one is made.
    """

    def __init__(self, kubeconfig: str | None = None, *, timeout: float = 2.0) -> None:
        """The pod's service account, or with ``kubeconfig`` that file's current context."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration,
                                    persist_config=False)
        else:
            config.load_incluster_config(client_configuration=configuration)
        configuration.retries = False
        self._api_client = client.ApiClient(configuration)
        self._timeout = timeout

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"} | ({"Content-Type": "application/json"} if body else {})
        m, url, header_params, data, post = self._api_client.param_serialize(
            method=method, resource_path=path, header_params=headers, body=None if body is None else dict(body),
            auth_settings=["BearerToken"])
        response = self._api_client.call_api(m, url, header_params, data, post, _request_timeout=self._timeout)
        response.read()
        return response.status, json.loads(response.data or b"null")

    async def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None,
                    absent: bool = False) -> dict[str, Any] | None:
        status, answer = await asyncio.to_thread(self._request, method, path, body)
        if 200 <= status < 300:
            out: dict[str, Any] = answer
            return out
        if status == 404 and absent:
            return None
        message = answer.get("message", answer) if isinstance(answer, dict) else answer
        if status == 409:
            raise LeaseConflict(str(message))
        raise OSError(f"{method} {path}: HTTP {status}: {message}")

    @staticmethod
    def _path(namespace: str, name: str | None = None) -> str:
        path = f"/apis/{API_VERSION}/namespaces/{namespace}/leases"
        return path if name is None else f"{path}/{name}"

    async def read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return await self._call("GET", self._path(namespace, name), absent=True)

    async def create(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        out = await self._call("POST", self._path(body["metadata"]["namespace"]), body)
        assert out is not None
        return out

    async def replace(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = body["metadata"]
        out = await self._call("PUT", self._path(meta["namespace"], meta["name"]), body)
        assert out is not None
        return out

    async def close(self) -> None:
        await asyncio.to_thread(self._api_client.close)


def pod_namespace(environ: Mapping[str, str] = os.environ, namespace_file: str = NAMESPACE_FILE) -> str:
    """The pod's namespace: ``POD_NAMESPACE`` (the downward API), else the service account's file."""
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        with open(namespace_file, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as e:
        raise ValueError(f"the pod's namespace is unknown: no POD_NAMESPACE and {e}") from None


def lease_elector(config: BrokerConfig, *, address: str, ha_address: str) -> LeaseElector:
    """The elector broker.conf's ``controllerLease*`` keys describe, for the broker whose remoting
    and HA addresses are ``address`` and ``ha_address`` (what it registers with name servers)."""
    timing = LeaseTiming(duration=config.controller_lease_duration_mills / 1000,
                         renew_interval=config.controller_lease_renew_interval_mills / 1000,
                         margin=config.controller_lease_margin_mills / 1000)
    namespace = config.controller_lease_namespace or pod_namespace()
    # a hung call ends in time for a second try before the master's deadline
    client = KubeLeaseClient(config.controller_lease_kubeconfig or None,
                             timeout=(timing.duration - timing.margin) / 2)
    return LeaseElector(client, namespace=namespace, cluster=config.broker_cluster_name,
                        broker_name=config.broker_name, address=address, ha_address=ha_address, timing=timing,
                        hand_over_timeout=config.controller_lease_hand_over_timeout_mills / 1000)


class LeaseElector:
    """A broker group's master on Kubernetes: this replica's side of the group's Lease.

    One task reads the Lease every ``R`` (a master renews it instead, from the version its last
    write returned), hands the Lease to :func:`decide` and does what it says. Every write goes
    out under one lock, so this replica's own writes never conflict with each other and a 409
    always means another writer. ``apply_role`` is called outside the lock (a broker may call
    :meth:`alter_sync_state_set` from it) and again at the next read until it succeeds.
    """

    def __init__(self, client: LeaseClient, *, namespace: str, cluster: str, broker_name: str, address: str,
                 ha_address: str, timing: LeaseTiming | None = None, hand_over_timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self.namespace = namespace
        self.cluster = cluster
        self.broker_name = broker_name
        self.name = lease_name(cluster, broker_name)
        self._address = address
        self._ha_address = ha_address
        self.timing = timing or LeaseTiming()
        #: how long a step-down waits for an in-sync slave to hold the whole log
        self.hand_over_timeout = hand_over_timeout
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = asyncio.Lock()
        #: set by wake(): the loop reads the Lease now instead of after R
        self._woken = asyncio.Event()
        self._replica: Replica | None = None
        self._me: Candidate | None = None
        self._task: asyncio.Task[None] | None = None
        #: the epoch this replica is master of, and the Lease its last write returned
        self._held_epoch: int | None = None
        self._held: ReplicaLease | None = None
        self._deadline = 0.0
        self._sighting: Sighting | None = None
        #: what apply_role should have applied, and what it last applied
        self._wanted: RoleAssignment | None = None
        self._applied: RoleAssignment | None = None

    # -- MasterElector ---------------------------------------------------------------------------

    async def start(self, replica: Replica) -> None:
        self._replica = replica
        self._me = Candidate(replica.replica_id, self._address, self._ha_address)
        self._task = asyncio.create_task(self._run(), name=f"lease-elector {self.name}")

    async def stop(self) -> None:
        try:
            await self._stop()
        finally:
            await self._client.close()

    async def _stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        async with self._lock:
            held, epoch = self._held, self._held_epoch
            self._held = None
            # no acknowledgement after this line: the release lets another replica take over at once
            self._held_epoch, self._deadline = None, 0.0
            if held is None:
                return
            try:
                successor = await self._successor(held.info, epoch)
                # no slave confirmed the log in time: released all the same, as a crash would leave
                # the group, but a member takes it at once instead of after D
                await self._release(successor or released(held.info), held)
            except Exception as e:
                log.warning("%s: could not release the master Lease (%s); it expires instead", self.name, e)

    async def hand_over(self, to: int | None = None) -> HandOver:
        """A planned step-down of a master that goes on running (an admin's request): stop
        acknowledging, wait (``hand_over_timeout``) until an in-sync slave (``to``: that replica)
        holds the whole log, and release the Lease to the slaves that do; this replica then
        follows the one that takes it.

        Anything but :attr:`HandOver.RELEASED` leaves it master with nothing written, so the
        deadline of its last renewal still bounds its acknowledgements.
        """
        async with self._lock:
            held, epoch, deadline = self._held, self._held_epoch, self._deadline
            if held is None or epoch is None or self._clock() >= deadline:
                return HandOver.NOT_MASTER
            slaves = held.info.sync_state_set - {held.info.master_replica_id}
            if not (slaves if to is None else slaves & {to}):
                return HandOver.NO_SLAVE_IN_SYNC
            self._held_epoch, self._deadline = None, 0.0  # the fence: no acknowledgement from here on
            successor = await self._successor(held.info, epoch, to)
            if successor is None:
                self._held_epoch, self._deadline = epoch, deadline
                log.warning("%s: no in-sync slave caught up within %.1f s: no hand-over", self.name,
                            self.hand_over_timeout)
                return HandOver.NO_SLAVE_CAUGHT_UP
            self._held = None
            # whatever the write's outcome, this replica stays fenced: a release whose answer was
            # lost lets a successor take over at once, so the old deadline no longer holds
            return HandOver.RELEASED if await self._release(successor, held) else HandOver.NOT_MASTER

    async def _successor(self, info: ReplicaInfo, epoch: int | None, only: int | None = None) -> ReplicaInfo | None:
        """:func:`handed_over` once an in-sync slave acknowledged the log up to its end now (after
        the fence), polled until ``hand_over_timeout``; None if none did."""
        assert self._me is not None and self._replica is not None
        if not info.sync_state_set - {self._me.replica_id}:
            return None  # no slave in sync: nobody to wait for
        end_offset = self._replica.max_phy_offset
        fenced = self._clock()
        give_up = fenced + self.hand_over_timeout
        while True:
            successor = handed_over(info, self._me, epoch, self._replica.acked_offsets, end_offset, only)
            if successor is not None:
                log.info("%s: hand-over: fenced at offset %d; slaves %s held it %.3f s later", self.name, end_offset,
                         sorted(successor.sync_state_set), self._clock() - fenced)
                return successor
            if self._clock() >= give_up:
                return None
            await asyncio.sleep(HAND_OVER_POLL_S)

    async def _release(self, info: ReplicaInfo, held: ReplicaLease) -> bool:
        """Writes the released ``info`` over ``held``, the Lease this replica last wrote; False
        when another replica wrote the Lease first (it is not this replica's any more)."""
        for _ in range(2):
            try:
                await self._client.replace(self._body(info, held, renew_time=held.renew_time))
                log.info("%s: released the master Lease of epoch %d (SyncStateSet %s)", self.name,
                         info.master_epoch, sorted(info.sync_state_set))
                return True
            except LeaseConflict:
                # a renewal of ours cancelled in flight may have been written after all (a newer
                # resourceVersion): still ours when it still names this replica in this epoch
                fresh = await self._read()
                if fresh is None or (fresh.info.master_replica_id, fresh.info.master_epoch) != (
                        held.info.master_replica_id, held.info.master_epoch):
                    return False  # someone else wrote it: not ours any more
                held = fresh
        return False

    def write_deadline(self) -> float:
        return self._deadline if self._held_epoch is not None else 0.0

    def wake(self) -> None:
        """An extra read changes no rule: a takeover still waits D of unchanged renewals on this
        replica's clock, and only a released Lease is taken at once."""
        self._woken.set()

    async def alter_sync_state_set(self, members: frozenset[int], sync_state_set_epoch: int) -> int | None:
        assert self._me is not None, "alter_sync_state_set before start"
        async with self._lock:
            for _ in range(2):  # the Lease this replica last wrote, else a fresh read after a conflict
                lease = self._held if self._held is not None else await self._read()
                if lease is None:
                    return None
                info = altered(lease.info, self._me, self._held_epoch, members, sync_state_set_epoch)
                if info is None:
                    return None
                try:
                    written = await self._write(info, lease)
                except LeaseConflict:
                    self._held = None
                    continue
                self._wanted = self._applied = assignment_of(written.info)  # the broker applies it itself
                log.info("%s: SyncStateSet %s (epoch %d)", self.name, sorted(members), info.sync_state_set_epoch)
                return info.sync_state_set_epoch
        return None

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            started = self._clock()
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("%s: the Lease could not be read or written: %s", self.name, e)
            await self._apply()
            # asyncio.timeout, not wait_for: on Python 3.11 a stop's cancellation that comes with a
            # wake-up would be swallowed by wait_for and the loop would run on
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, self.timing.renew_interval - (self._clock() - started))):
                    await self._woken.wait()
            self._woken.clear()

    async def _tick(self) -> None:
        assert self._me is not None
        async with self._lock:
            for _ in range(2):  # after a lost compare-and-swap, once more with what won
                lease = self._held if self._held is not None else await self._read()
                decision = decide(lease, self._me, self._held_epoch, self._sighting, self._clock(), self.timing)
                if decision.action in (Action.FOLLOW, Action.WAIT):
                    if self._held_epoch is not None:
                        log.warning("%s: no longer master of epoch %d", self.name, self._held_epoch)
                    self._held_epoch, self._held, self._deadline = None, None, 0.0
                    self._wanted = None if decision.info is None else assignment_of(decision.info)
                    return
                assert decision.info is not None
                try:
                    written = await self._write(decision.info, lease)
                except LeaseConflict:
                    self._held = None
                    continue
                if decision.action is not Action.RENEW:
                    log.info("%s: master of epoch %d, SyncStateSet %s", self.name, written.info.master_epoch,
                             sorted(written.info.sync_state_set))
                self._wanted = assignment_of(written.info)
                return

    async def _apply(self) -> None:
        wanted = self._wanted
        if wanted is None or wanted == self._applied or self._replica is None:
            return
        try:
            await self._replica.apply_role(wanted)
        except Exception:
            log.exception("%s: applying %s failed", self.name, wanted)
        else:
            self._applied = wanted

    async def _read(self) -> ReplicaLease | None:
        obj = await self._client.read(self.namespace, self.name)
        returned_at = self._clock()
        try:
            lease = None if obj is None else parse_lease(obj)
        except LeaseFormatError:
            self._sighting = None
            raise
        self._sighting = observe(lease, self._sighting, returned_at)
        return lease

    async def _write(self, info: ReplicaInfo, lease: ReplicaLease | None) -> ReplicaLease:
        """Writes ``info`` as master over ``lease`` (None: creates it); on success this replica is
        master of its epoch until :func:`write_deadline_after` the moment the write was sent."""
        now = micro_time(self._wall_clock())
        body = self._body(info, lease, renew_time=now)
        if lease is None or lease.info.master_replica_id != info.master_replica_id \
                or lease.info.master_epoch != info.master_epoch:
            body["spec"]["acquireTime"] = now
        sent_at = self._clock()
        written = parse_lease(await (self._client.create(body) if lease is None else self._client.replace(body)))
        self._held_epoch, self._held = info.master_epoch, written
        self._deadline = write_deadline_after(sent_at, self.timing)
        return written

    def _body(self, info: ReplicaInfo, lease: ReplicaLease | None, *, renew_time: str | None) -> dict[str, Any]:
        return lease_body(self.namespace, self.cluster, self.broker_name, info,
                          lease_duration_seconds=self.timing.duration_seconds, renew_time=renew_time,
                          acquire_time=None if lease is None else lease.acquire_time,
                          resource_version=None if lease is None else lease.resource_version)
