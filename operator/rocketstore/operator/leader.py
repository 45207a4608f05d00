"""Leader election over a ``coordination.k8s.io/v1`` Lease: one operator reconciles, the others wait.

Two operator replicas that both reconciled would race on every child object and on the brokers'
live configuration (retention pushes, manual deletes run twice). So with ``--leader-elect`` the
operator takes a Lease before kopf starts, and kopf runs standalone inside that guarantee.

The rules are those of Kubernetes' own controllers (kube-controller-manager's ``--leader-elect``):

* a candidate takes the Lease when there is none, when its holder released it (no
  ``holderIdentity``), or when it has seen the same Lease record, unchanged, for a whole
  ``leaseDurationSeconds`` of its own clock. It never compares its clock with the holder's
  ``renewTime``: clocks of two nodes differ, the length of an interval on one clock does not;
* every write names the ``resourceVersion`` it read, so of two candidates only one wins (the
  other's write answers 409 Conflict and it goes back to waiting);
* the holder renews every ``retry_period``. When it has not renewed for ``renew_deadline``, it
  stops. ``renew_deadline < lease_duration``, so it has stopped before any candidate may take over.

"Stops" means the process exits (:data:`LOST_EXIT_CODE`): kopf has no way to abandon handlers that
are halfway through an apply, and the Deployment restarts the pod, which then waits as a standby.
A graceful stop (SIGTERM: a rolling upgrade, a drained node) releases the Lease after kopf
finished, so a standby takes over at its next retry instead of after a whole lease duration.

:func:`decide` is the pure part; :class:`LeaderElector` does the API calls.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from rocketstore.operator import metrics
from rocketstore.operator.kube import ApiError, Kube

__all__ = ["LOST_EXIT_CODE", "Action", "ElectionConfig", "LeaderElector", "LeaseRecord", "decide"]

log = logging.getLogger(__name__)

#: the exit code of an operator that lost its Lease (the Deployment restarts it as a standby)
LOST_EXIT_CODE: Final = 3
LEASE_API: Final = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class ElectionConfig:
    """The Lease and the timing, in seconds (the defaults are kube-controller-manager's)."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problem(self) -> str | None:
        """Why these timings cannot keep two leaders apart, or None."""
        if not self.retry_period > 0:
            return "the retry period must be positive"
        if not self.renew_deadline > self.retry_period:
            return "the renew deadline must be longer than the retry period (a leader renews at least once)"
        if not self.lease_duration > self.renew_deadline:
            return ("the lease duration must be longer than the renew deadline (a leader that cannot renew "
                    "stops before a standby may take over)")
        return None


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says, as far as the election reads it."""

    holder: str | None
    lease_duration: float
    transitions: int
    resource_version: str
    acquire_time: str | None = None

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or None,
                   lease_duration=float(spec.get("leaseDurationSeconds") or 0),
                   transitions=int(spec.get("leaseTransitions") or 0),
                   resource_version=str(lease["metadata"]["resourceVersion"]),
                   acquire_time=spec.get("acquireTime"))


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours
    TAKE = "take"  # released, or expired on our clock
    WAIT = "wait"  # another holder's, live


def decide(record: LeaseRecord | None, identity: str, unchanged_for: float) -> Action:
    """What ``identity`` does with the Lease it just read; ``unchanged_for``: how long (its own clock)
    it has seen this very record (the same resourceVersion)."""
    if record is None:
        return Action.CREATE
    if record.holder == identity:
        return Action.RENEW
    if record.holder is None or unchanged_for >= record.lease_duration:
        return Action.TAKE
    return Action.WAIT


def micro_time(at: datetime.datetime | None = None) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC)."""
    return (at or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Takes and keeps one Lease for this operator process."""

    def __init__(self, kube: Kube, config: ElectionConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.config = config
        self._clock = clock
        #: the resourceVersion last read, and when (our clock) it was first seen
        self._seen: tuple[str, float] | None = None
        #: the holder the last attempt read (None: none, or the read failed)
        self._holder: str | None = None
        self._renewed_at = 0.0

    async def _attempt(self) -> bool:
        """One read and, if the rules allow, one write; True when we hold the Lease now."""
        cfg = self.config
        self._holder = None
        current = await self.kube.get(LEASE_API, "Lease", cfg.namespace, cfg.name)
        record = None if current is None else LeaseRecord.of(current)
        self._holder = None if record is None else record.holder
        now = self._clock()
        if record is not None and (self._seen is None or self._seen[0] != record.resource_version):
            self._seen = (record.resource_version, now)
        unchanged_for = 0.0 if self._seen is None else now - self._seen[1]
        action = decide(record, cfg.identity, unchanged_for)
        if action is Action.WAIT:
            return False
        stamp = micro_time()
        spec: dict[str, Any] = {"holderIdentity": cfg.identity, "leaseDurationSeconds": round(cfg.lease_duration),
                                "renewTime": stamp}
        try:
            if record is None:
                await self.kube.create({"apiVersion": LEASE_API, "kind": "Lease",
                                        "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                                        "spec": {**spec, "acquireTime": stamp, "leaseTransitions": 0}})
            else:
                if action is Action.TAKE:
                    spec.update(acquireTime=stamp, leaseTransitions=record.transitions + 1)
                    log.info("taking Lease %s/%s from %s", cfg.namespace, cfg.name,
                             record.holder or "nobody (released)")
                await self.kube.merge_patch(LEASE_API, "Lease", cfg.namespace, cfg.name, {
                    "metadata": {"resourceVersion": record.resource_version}, "spec": spec})
        except ApiError as e:
            if e.status != 409:  # 409: another candidate wrote first, the next read shows whom
                log.warning("Lease %s/%s: %s", cfg.namespace, cfg.name, e)
            return False
        self._renewed_at = self._clock()
        return True

    async def acquire(self) -> None:
        """Return once this process holds the Lease."""
        cfg = self.config
        log.info("%s: waiting to lead (Lease %s/%s)", cfg.identity, cfg.namespace, cfg.name)
        while True:
            try:
                if await self._attempt():
                    break
            except Exception as e:  # the API server unreachable or failing: keep trying
                log.warning("Lease %s/%s: %r", cfg.namespace, cfg.name, e)
            await asyncio.sleep(cfg.retry_period)
        metrics.LEADER.set(1)
        log.info("%s: leading (Lease %s/%s)", cfg.identity, cfg.namespace, cfg.name)

    async def keep(self, stop: threading.Event, lost: Callable[[str], None]) -> None:
        """Renew every retry period until ``stop`` is set; call ``lost`` once the Lease was not
        renewed for the renew deadline, or is held by another.

        Each attempt may take only what is left of the deadline: a request hanging on a dead
        connection (the client's timeout is longer) must not keep a leader running after a
        standby may have taken over."""
        cfg = self.config
        while not stop.is_set():
            await asyncio.sleep(cfg.retry_period)
            if stop.is_set():
                return
            left = cfg.renew_deadline - (self._clock() - self._renewed_at)
            try:
                renewed = await asyncio.wait_for(self._attempt(), timeout=max(left, 0.001))
            except Exception as e:  # timed out, API errors, connection errors: not renewed
                log.warning("renewing Lease %s/%s: %r", cfg.namespace, cfg.name, e)
                renewed = False
            if not renewed and self._holder not in (None, cfg.identity):
                metrics.LEADER.set(0)
                lost(f"Lease {cfg.namespace}/{cfg.name} is held by {self._holder}")
                return
            late = self._clock() - self._renewed_at
            if late >= cfg.renew_deadline:
                metrics.LEADER.set(0)
                lost(f"Lease {cfg.namespace}/{cfg.name} not renewed for {late:.1f}s "
                     f"(renew deadline {cfg.renew_deadline:g}s)")
                return

    async def release(self) -> None:
        """Give the Lease up (after kopf stopped), so a standby need not wait for it to expire."""
        cfg = self.config
        metrics.LEADER.set(0)
        try:
            current = await self.kube.get(LEASE_API, "Lease", cfg.namespace, cfg.name)
            if current is None or LeaseRecord.of(current).holder != cfg.identity:
                return
            await self.kube.merge_patch(LEASE_API, "Lease", cfg.namespace, cfg.name, {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": micro_time()}})
            log.info("%s: released Lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        except Exception as e:
            log.warning("releasing Lease %s/%s: %r (a standby takes over once it expires)", cfg.namespace, cfg.name, e)
