"""Thin kopf handlers: parse, delegate to :mod:`reconcile`, write status and events.

* create / update / resume -> :func:`reconcile.apply_objects` then :func:`reconcile.observe`
* timer (every ``ROCKETSTORE_OPERATOR_INTERVAL`` seconds, default 30) -> drift repair
  (:func:`reconcile.apply_objects` with ``repair``: child objects deleted or edited by hand are
  applied again, unchanged ones only read), then :func:`reconcile.observe`: pod readiness, broker
  disk usage, retention convergence, manual deletes, adaptive retention; a generation no change
  handler reconciled (a missed watch event, a store restored with kopf's annotations) is
  reconciled by the timer on its second look (:mod:`catch_up`)

* while the ``rocketstore.io/pause-reconciliation`` annotation is ``"true"`` every handler only
  shows the ``ReconciliationPaused`` condition and changes nothing (:mod:`pause`); the first timer
  run after it is removed reconciles in full. The timer, not an update handler: kopf leaves every
  annotation of its storage prefix (``rocketstore.io/``, ours) out of the state it compares, so a
  change of this one is no update to kopf

An invalid spec sets ``Degraded=True`` (reason ``InvalidSpec``, or ``ImageNotAllowed`` for a
spec.image outside the operator's allow-list, :mod:`image_policy`) and raises ``kopf.PermanentError``:
kopf stops retrying until the spec changes, so a bad object never crash-loops the operator. API
hiccups raise ``kopf.TemporaryError`` and are retried with a delay.

No delete handler removes anything (the one there forgets the store's metrics and catch-up
state): owner references let the garbage collector remove the objects, and the StatefulSet's
``persistentVolumeClaimRetentionPolicy`` keeps the PVCs unless ``storage.deleteClaim`` is true.
kopf still puts a finalizer, ``rocketstore.io/operator`` (``settings.persistence.finalizer``), on
every RocketStore: timers need one (``kopf.timer`` registers with ``requires_finalizer=True``), so
that deletion waits until the timer is stopped. While the operator runs, a deleted RocketStore
loses the finalizer within a second or two of its timer's run and goes: kopf does not cancel a
running timer, it waits for the run to end and looks again every
``settings.background.cancellation_polling`` seconds, 60 by default and 1 here (a store deleted
while its observation waited on a broker otherwise lingered for a minute). Without a running
operator it stays ``Terminating`` (and so do its namespace and the CRD, if deleted) until the
finalizer is removed: the chart's pre-delete hook does that when the chart is uninstalled
(:mod:`uninstall`); docs/operator.md ("Uninstalling") and the chart README say how by hand.

kopf logs in with the operator's own client (:meth:`Kube.kopf_credentials`), not with its built-in
``login_via_client``: that one loads the library's process-wide default configuration, always from
the kubeconfig's current context, so it could not follow ``--context``. kopf runs the login
handler again when an API call answers 401 (its ``authenticated`` wrapper invalidates the
credentials and waits for new ones), and each login loads the credentials afresh: a rotated token
file is read again, an exec plugin run again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

import kopf

from rocketstore.operator import FIELD_MANAGER, FINALIZER, GROUP, PLURAL, VERSION, metrics
from rocketstore.operator.brokers import Brokers
from rocketstore.operator.catch_up import CatchUp
from rocketstore.operator.conditions import Condition, merge_conditions
from rocketstore.operator.desired import Owner, default_broker_image
from rocketstore.operator.image_policy import ImagePolicy
from rocketstore.operator.kube import Kube, discover
from rocketstore.operator.model import Spec, SpecError, parse_spec
from rocketstore.operator.pause import PAUSED, paused, paused_condition, shows_paused
from rocketstore.operator.reconcile import Outcome, apply_objects, observe
from rocketstore.operator.status import degraded
from rocketstore.operator.upgrade import (
    UPGRADE_QUEUED,
    StatefulSetRollout,
    UpgradeGate,
    statefulset_rollout,
    store_rollout,
)

INTERVAL = float(os.environ.get("ROCKETSTORE_OPERATOR_INTERVAL", "30"))

_locks: dict[str, asyncio.Lock] = {}


def _lock(uid: str) -> asyncio.Lock:
    return _locks.setdefault(uid, asyncio.Lock())


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    # progress and the last-handled spec live in annotations: status is ours and schema-pruned
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.WARNING  # our own events are posted explicitly
    if getattr(memo, "identity", None):
        # with --leader-elect: which replica posted an event (its Lease identity)
        settings.posting.reporting_instance = memo.identity
    settings.execution.max_workers = 4
    # how soon a deleted store's finalizer goes once its running timer finishes (see the docstring)
    settings.background.cancellation_polling = 1.0
    if getattr(memo, "brokers", None) is None:
        memo.brokers = Brokers()
    if getattr(memo, "broker_image", None) is None:
        memo.broker_image = default_broker_image()
    if getattr(memo, "upgrades", None) is None:
        memo.upgrades = UpgradeGate()
    if getattr(memo, "catch_up", None) is None:
        memo.catch_up = CatchUp()
    if getattr(memo, "image_policy", None) is None:
        memo.image_policy = ImagePolicy.from_options(memo.broker_image, None, os.environ)
    if getattr(memo, "kube", None) is None:  # run without `rocketstore operator` (kopf run)
        memo.kube = await asyncio.to_thread(Kube, discover())
    # `kopf run` knows no --operator-pod-selector: the NetworkPolicies then name no operator pods
    memo.operator_peer = getattr(memo, "operator_peer", None)
    logger.info("%s started; API server from the %s; brokers addressed as %s; broker images allowed: %s; "
                "NetworkPolicies let in %s", FIELD_MANAGER, memo.kube.credentials.source, memo.brokers.addressing,
                memo.image_policy, memo.operator_peer or "no operator pods (--operator-pod-selector not given)")


@kopf.on.login()
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    kube: Kube = memo.kube
    return await asyncio.to_thread(kube.kopf_credentials)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    kube: Kube | None = getattr(memo, "kube", None)
    if kube is not None:
        await kube.close()


#: the operator's broker StatefulSets by store (``namespace/name``), kept by kopf from a watch:
#: what :mod:`upgrade` decides on. kopf runs no handler before the index is loaded, so a restarted
#: operator knows which stores are mid-rollout before it lets another start
BrokerStatefulSets = kopf.Index[str, StatefulSetRollout]
#: the keyword kopf passes it to every handler as (the index function's name)
INDEX = "broker_statefulsets"


@kopf.index("apps", "v1", "statefulsets", labels={"app.kubernetes.io/managed-by": FIELD_MANAGER})
async def broker_statefulsets(body: kopf.Body, namespace: str | None, labels: kopf.Labels,
                              **_: Any) -> dict[str, StatefulSetRollout]:
    return {f"{namespace}/{labels.get('app.kubernetes.io/instance')}": statefulset_rollout(body)}


def _broker_image(memo: kopf.Memo, owner: Owner, spec: Spec, body: kopf.Body,
                  statefulsets: BrokerStatefulSets) -> tuple[str, bool, Condition | None]:
    """The default image this store is applied with now (:mod:`upgrade`: after an operator
    upgrade, a store waits its turn on the image it runs), whether its upgrade starts now, and
    the ``UpgradeQueued`` condition while it waits."""
    if spec.image is not None:
        return memo.broker_image, False, None
    stores = {key: store_rollout(key.partition("/")[2], statefulsets[key]) for key in statefulsets}
    image, starts = memo.upgrades.image(f"{owner.namespace}/{owner.name}", stores, memo.broker_image)
    if starts:
        kopf.event(body, type="Normal", reason="BrokerImageUpgrade", message=(
            f"rolling to {image} (operator default; at most {memo.upgrades.max_concurrent} store(s) at a time)"))
    return image, starts, memo.upgrades.queued(image, stores, memo.broker_image)


def _queue_conditions(queued: Condition | None) -> tuple[list[Condition], list[str]]:
    """The ``UpgradeQueued`` condition to write, or its type to drop (the store is not waiting)."""
    return ([queued], []) if queued is not None else ([], [UPGRADE_QUEUED])


def _post(body: kopf.Body, outcome: Outcome) -> None:
    for ev in outcome.events:
        kopf.event(body, type=ev.type, reason=ev.reason, message=ev.message[:1000])


def _parse(body: kopf.Body, spec: Mapping[str, Any], status: Mapping[str, Any], patch: kopf.Patch,
           generation: int, policy: ImagePolicy) -> Spec:
    """The spec, or a Degraded condition, a Warning event and no retries: ``InvalidSpec``, or
    ``ImageNotAllowed`` for an image outside the operator's allow-list (nothing is applied)."""
    try:
        parsed = parse_spec(spec)
        refusal, reason = policy.refusal(parsed.image), "ImageNotAllowed"
    except SpecError as e:
        refusal, reason = str(e), "InvalidSpec"
    if refusal is None:
        return parsed
    metrics.ERRORS.labels(step="spec").inc()
    patch.status["conditions"] = merge_conditions(
        status.get("conditions"), [Condition("Degraded", True, reason, refusal)], generation, drop=[PAUSED])
    metrics.record_conditions(str(body.metadata.namespace), str(body.metadata.name), patch.status["conditions"])
    patch.status["observedGeneration"] = generation
    kopf.event(body, type="Warning", reason=reason, message=refusal)
    raise kopf.PermanentError(refusal)


def _paused(body: kopf.Body, status: kopf.Status, patch: kopf.Patch, generation: int) -> bool:
    """True when the pause annotation is set: then the ``ReconciliationPaused`` condition (and an
    event) once, and nothing else, is written."""
    if not paused(body.metadata.annotations):
        return False
    if not shows_paused(status):
        patch.status["conditions"] = merge_conditions(status.get("conditions"), [paused_condition()], generation)
        metrics.record_conditions(str(body.metadata.namespace), str(body.metadata.name), patch.status["conditions"])
        kopf.event(body, type="Normal", reason=PAUSED, message=paused_condition().message)
    return True


async def _reconcile(cause: str, body: kopf.Body, spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch,
                     meta: kopf.Meta, memo: kopf.Memo, statefulsets: BrokerStatefulSets) -> None:
    generation = int(meta.get("generation", 0))
    if _paused(body, status, patch, generation):
        return  # observedGeneration stays: this generation is not reconciled yet
    metrics.RECONCILES.labels(kind=cause).inc()
    parsed = _parse(body, spec, status, patch, generation, memo.image_policy)
    owner = Owner(name=str(meta["name"]), namespace=str(meta["namespace"]), uid=str(meta["uid"]))
    async with _lock(owner.uid):
        image, _, queued = _broker_image(memo, owner, parsed, body, statefulsets)
        applied = await apply_objects(memo.kube, owner, parsed, image, memo.brokers, memo.operator_peer,
                                      status=status)
        _post(body, applied)
        seen = {**dict(status), **applied.status}
        observed = await observe(memo.kube, memo.brokers, owner, applied.spec or parsed, seen, generation)
    _post(body, observed)
    new_status = {**applied.status, **observed.status}
    problems = [*applied.status["problems"], *observed.problems]
    waiting, not_waiting = _queue_conditions(queued)
    conditions = [*observed.conditions, degraded(problems, observed.status["brokers"]), *waiting]
    patch.status.update(new_status)
    patch.status["conditions"] = merge_conditions(status.get("conditions"), conditions, generation,
                                                  drop=[*observed.dropped, PAUSED, *not_waiting])
    metrics.record_conditions(owner.namespace, owner.name, patch.status["conditions"])
    patch.status["observedGeneration"] = generation
    kopf.event(body, type="Normal", reason="Reconciled", message=(
        f"{cause}: {parsed.brokers} brokers, volume {applied.status['volumeSize']}, generation {generation}"))


@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile-create")
async def on_create(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch,
                    meta: kopf.Meta, memo: kopf.Memo, **kwargs: Any) -> None:
    with metrics.RECONCILE_DURATION.labels(kind="create").time():
        await _reconcile("create", body, spec, status, patch, meta, memo, kwargs[INDEX])


@kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile-update", field="spec")
async def on_update(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch,
                    meta: kopf.Meta, memo: kopf.Memo, **kwargs: Any) -> None:
    with metrics.RECONCILE_DURATION.labels(kind="update").time():
        await _reconcile("update", body, spec, status, patch, meta, memo, kwargs[INDEX])


@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile-resume")
async def on_resume(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch,
                    meta: kopf.Meta, memo: kopf.Memo, **kwargs: Any) -> None:
    with metrics.RECONCILE_DURATION.labels(kind="resume").time():
        await _reconcile("resume", body, spec, status, patch, meta, memo, kwargs[INDEX])


@kopf.timer(GROUP, VERSION, PLURAL, id="observe", interval=INTERVAL, initial_delay=min(INTERVAL, 5.0))
async def on_timer(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch,
                   meta: kopf.Meta, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any) -> None:
    if _paused(body, status, patch, int(meta.get("generation", 0))):
        return  # no drift repair, no observation: nothing of the store changes
    try:
        parsed = parse_spec(spec)
    except SpecError:
        return  # the create/update handler has reported it
    if memo.image_policy.refusal(parsed.image) is not None:
        return  # refused likewise: the brokers keep what was last applied, unobserved
    if shows_paused(status):  # the pause annotation was removed: what waited is applied now
        with metrics.RECONCILE_DURATION.labels(kind="unpause").time():
            await _reconcile("unpause", body, spec, status, patch, meta, memo, kwargs[INDEX])
        return
    uid, generation = str(meta["uid"]), int(meta.get("generation", 0))
    if memo.catch_up.due(uid, generation, status.get("observedGeneration"), _lock(uid).locked()):
        logger.warning("generation %s was reconciled by no change handler (a missed watch event, or kopf's "
                       "annotations restored with the object): reconciling it now", generation)
        try:
            with metrics.RECONCILE_DURATION.labels(kind="catch-up").time():
                await _reconcile("catch-up", body, spec, status, patch, meta, memo, kwargs[INDEX])
        except kopf.PermanentError:
            memo.catch_up.failed(uid, generation)
            raise
        return
    if "replicas" not in status:
        return  # not applied yet
    metrics.RECONCILES.labels(kind="timer").inc()
    owner = Owner(name=str(meta["name"]), namespace=str(meta["namespace"]), uid=str(meta["uid"]))
    async with _lock(owner.uid):
        with metrics.RECONCILE_DURATION.labels(kind="timer").time():
            image, starts, queued = _broker_image(memo, owner, parsed, body, kwargs[INDEX])
            applied, failure = await _repair(memo, owner, parsed, status, image, starts)
            seen = {**dict(status), **applied.status}
            observed = await observe(memo.kube, memo.brokers, owner, applied.spec or parsed, seen,
                                     int(meta.get("generation", 0)))
    _post(body, applied)
    _post(body, observed)
    patch.status.update({**applied.status, **observed.status})
    problems = [*applied.status.get("problems", status.get("problems") or []), *failure, *observed.problems]
    waiting, not_waiting = _queue_conditions(queued)
    conditions = [*observed.conditions, degraded(problems, observed.status["brokers"]), *waiting]
    patch.status["conditions"] = merge_conditions(status.get("conditions"), conditions,
                                                  int(status.get("observedGeneration") or 0),
                                                  drop=[*observed.dropped, PAUSED, *not_waiting])
    metrics.record_conditions(owner.namespace, owner.name, patch.status["conditions"])


# optional: it asks for no finalizer of its own (the timer's is there anyway, see the module
# docstring); a RocketStore deleted while no operator runs has no series in the next one anyway
@kopf.on.delete(GROUP, VERSION, PLURAL, id="forget-metrics", optional=True)
async def on_delete(meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
    metrics.forget_resource(str(meta["namespace"]), str(meta["name"]))
    memo.catch_up.forget(str(meta["uid"]))


async def _repair(memo: kopf.Memo, owner: Owner, spec: Spec, status: Mapping[str, Any], image: str,
                  upgrade: bool) -> tuple[Outcome, list[dict[str, str]]]:
    """The timer's drift repair: the apply step applying only what drifted (everything when the
    store's image upgrade starts now: that is no drift); its failure is a problem of the store
    (Degraded), not an error that would skip the observation after it."""
    try:
        return await apply_objects(memo.kube, owner, spec, image, memo.brokers, memo.operator_peer,
                                   repair=not upgrade, status=status), []
    except (kopf.PermanentError, kopf.TemporaryError) as e:
        return Outcome(), [{"reason": "DriftRepairFailed", "message": str(e)}]
