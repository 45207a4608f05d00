"""Reconciliation steps: the async code between the pure builders and the kopf handlers.

``apply_objects``  desired objects -> server-side apply (with ``repair``, on the timer: only the
                   objects that drifted, :mod:`rocketstore.operator.drift`); storage growth; refused changes;
                   objects no longer wanted (external Services of removed brokers, the
                   StatefulSet of removed slaves, PodDisruptionBudgets, the NetworkPolicy once
                   spec.networkPolicy is removed) deleted; with slaves,
                   the masters' rolling update partition (slaves first)
``observe``        pods and brokers -> retention push, manual deletes, adaptive retention; the
                   ACL / TLS Secrets the spec references; external addresses (nodes, load
                   balancers) -> addresses ConfigMap, clusterPeers; masters' HA metrics -> broker
                   groups' lag and the masters' partition; what it saw -> the status and
                   conditions :mod:`rocketstore.operator.status` decides

Both return plain dicts for ``status`` and a list of events; the handlers write them with kopf's
``patch`` (so the operator patches its own object, never updates it).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import kopf

from rocketstore.client import SessionCredentials
from rocketstore.common import replica_lease
from rocketstore.operator import metrics
from rocketstore.operator.auth import converge as converge_auth
from rocketstore.operator.brokers import (
    BrokerAccess,
    BrokerError,
    BrokerRuntime,
    Brokers,
    HeldMessages,
    ReplicationView,
)
from rocketstore.operator.conditions import Condition, now
from rocketstore.operator.desired import (
    Owner,
    Plan,
    addresses_configmap,
    addresses_name,
    all_objects,
    cluster_peers,
    listen_port,
    load_balancer_addresses,
    namesrv_peers,
    pod_name,
    pvc_name,
    replica_id,
    selector,
    selector_text,
    slave_pod_name,
    slave_statefulset_name,
    stale_names,
    statefulset,
)
from rocketstore.operator.drift import drifted_fields
from rocketstore.operator.kube import ApiError, Kube
from rocketstore.operator.model import MAX_REPLICAS_PER_GROUP, Spec, format_quantity, parse_quantity
from rocketstore.operator.retention import decide
from rocketstore.operator.rollout import (
    GroupRollout,
    LeaseMember,
    group_rollouts,
    held_masters,
    lease_failover_kept,
    lease_group_restart,
    master_partition,
    pod_updated,
)
from rocketstore.operator.scaling import (
    DRAIN_CONDITION,
    backlog,
    drain_condition,
    drain_step,
    leaving_brokers,
    scale_down_replicas,
    topics_to_copy,
)
from rocketstore.operator.secrets import SecretNotFound, read_secret
from rocketstore.operator.sizing import segments_that_fit, volume_size
from rocketstore.operator.status import (
    BrokerObservation,
    ExternalView,
    GroupView,
    elections,
    external_view,
    group_views,
    masters_status,
    max_disk_usage,
    observed_status,
    pod_ready,
    same_setting,
)

__all__ = ["Event", "Outcome", "apply_objects", "broker_access", "observe", "referenced_secrets"]

RBAC = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Outcome:
    status: dict[str, Any] = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: problems found while observing (reason, message), for the Degraded condition
    problems: list[dict[str, str]] = field(default_factory=list)
    #: condition types that no longer apply (ExternalAccessReady once external access is off)
    dropped: list[str] = field(default_factory=list)
    #: the spec the apply step applied: the resource's, unless a change of it was refused (the
    #: observer follows what runs); None: nothing applied
    spec: Spec | None = None


def _claim_size(sts: Mapping[str, Any]) -> int | None:
    for tpl in sts.get("spec", {}).get("volumeClaimTemplates", []):
        storage = tpl.get("spec", {}).get("resources", {}).get("requests", {}).get("storage")
        if storage is not None:
            return parse_quantity(storage)
    return None


async def _wait_gone(kube: Kube, api_version: str, kind: str, namespace: str, name: str, seconds: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        if await kube.get(api_version, kind, namespace, name) is None:
            return True
        await asyncio.sleep(0.2)
    return False


async def apply_objects(kube: Kube, owner: Owner, spec: Spec, default_image: str,
                        brokers: Brokers | None = None, operator_peer: Mapping[str, Any] | None = None,
                        *, repair: bool = False, status: Mapping[str, Any] | None = None) -> Outcome:
    """Apply every desired object; expand PVCs when the volume grows; refuse shrink, and scale
    down without ``scaling.allowScaleDown``.

    A scale-down keeps the running groups until ``status.drain`` (``status``: the RocketStore's
    last status) says the leaving brokers drained or their deadline passed
    (:func:`rocketstore.operator.scaling.scale_down_replicas`); a scale-up lists the new brokers in
    ``status.topicCopyPending``, for the observer to give them the store's topics.

    ``repair`` (the timer's drift repair) reads each desired object first and applies only those
    missing or whose fields of ours differ (:func:`rocketstore.operator.drift.drifted_fields`), with
    a ``DriftRepaired`` event each: a store nobody touched costs reads, never a write.

    ``default_image`` is the broker image when the spec names none (the operator's --broker-image);
    ``operator_peer`` the operator's pods, which a NetworkPolicy lets in (see :class:`Plan`).
    With slaves, the masters' StatefulSet goes last, with the partition decided after the slaves'
    StatefulSets took the new template (``brokers`` reads the masters' lag; without it no slave
    counts as in sync, so only masters that are not ready may restart until the next observation).
    """
    out = Outcome()
    problems: list[dict[str, str]] = []
    want_volume = volume_size(spec)
    if segments_that_fit(want_volume, spec.commit_log.segment_size, spec.storage.average_message_size,
                         spec.retention.disk_max_used_space_ratio) < 1:
        raise kopf.PermanentError(
            f"spec.storage.size {format_quantity(want_volume)} cannot hold one CommitLog segment "
            f"under diskMaxUsedSpaceRatio {spec.retention.disk_max_used_space_ratio}%")
    replicas, volume = spec.brokers, want_volume
    sts = await kube.get("apps/v1", "StatefulSet", owner.namespace, owner.name)
    out.spec, refused = lease_failover_kept(spec, sts)
    spec = out.spec
    if refused is not None:
        problems.append(refused)
    if sts is not None:
        current_replicas = int(sts.get("spec", {}).get("replicas", 0))
        if replicas < current_replicas and not spec.allow_scale_down:
            replicas = current_replicas
            problems.append({"reason": "ScaleDownRefused", "message": (
                f"spec.brokers {spec.brokers} < {current_replicas} running: set spec.scaling.allowScaleDown "
                "to drain and remove the brokers (their PVCs are kept)")})
        elif replicas < current_replicas:
            replicas = scale_down_replicas(owner.name, current_replicas, replicas, (status or {}).get("drain"),
                                           spec.drain_timeout_s)
            if replicas < current_replicas:
                out.events.append(Event("Normal", "ScaledDown", f"{current_replicas} -> {replicas} broker groups: "
                                        + ", ".join(leaving_brokers(owner.name, current_replicas, replicas))
                                        + " removed, their PVCs kept"))
        elif replicas > current_replicas:
            pending = {*((status or {}).get("topicCopyPending") or []),
                       *(pod_name(owner.name, i) for i in range(current_replicas, replicas))}
            out.status["topicCopyPending"] = sorted(pending)
        current_volume = _claim_size(sts)
        if current_volume is not None and want_volume < current_volume:
            volume = current_volume
            problems.append({"reason": "StorageShrinkRefused", "message": (
                f"volume {format_quantity(want_volume)} < current {format_quantity(current_volume)}: "
                "PVCs cannot shrink; keeping the current size")})
        elif current_volume is not None and want_volume > current_volume:
            grown = True
            for sts_name in [*await _slave_statefulset_names(kube, owner), owner.name]:
                grown = grown and await _grow_storage(kube, owner, sts_name, current_replicas, want_volume, out)
            if not grown:
                volume = current_volume
                problems.append({"reason": "StorageExpansionFailed", "message": out.events[-1].message})
    services = await kube.list("v1", "Service", owner.namespace, selector(owner.name))
    ext = spec.external_access
    addresses = load_balancer_addresses(owner, replicas, services) if ext is not None and ext.load_balancer else {}
    plan = Plan(owner=owner, spec=spec, replicas=replicas, volume_bytes=volume, default_image=default_image,
                external_addresses=addresses, operator_peer=operator_peer)
    desired = all_objects(plan)
    if spec.replication.failover.lease:
        await _on_delete(kube, owner)
    for obj in desired[:-1]:
        await _apply(kube, owner, obj, repair, out)
    masters = desired[-1]
    if spec.replication.slaves:
        pods = {p["metadata"]["name"]: p for p in await kube.list("v1", "Pod", owner.namespace, selector(owner.name))}
        groups = await _group_views(brokers, owner, spec, replicas, pods)
        # the masters' template may be about to change: none counts as updated yet
        rollouts = [replace(r, master_updated=False) for r in await _group_rollouts(kube, owner, groups)]
        masters = statefulset(replace(plan, master_partition=master_partition(replicas, rollouts)))
    await _apply(kube, owner, masters, repair, out)
    if not spec.replication.slaves and _partition(sts):
        # the slaves are gone: the partition the observer set (an update, not part of the applied
        # object) would hold the masters' rolling updates for good
        await _api_step("apply", f"releasing the partition of StatefulSet {owner.name}", kube.merge_patch(
            "apps/v1", "StatefulSet", owner.namespace, owner.name,
            {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}))
    configmaps = await kube.list("v1", "ConfigMap", owner.namespace, selector(owner.name))
    budgets = await kube.list("policy/v1", "PodDisruptionBudget", owner.namespace, selector(owner.name))
    statefulsets = await kube.list("apps/v1", "StatefulSet", owner.namespace, selector(owner.name))
    policies = await kube.list("networking.k8s.io/v1", "NetworkPolicy", owner.namespace, selector(owner.name))
    # the brokers' Lease Role and RoleBinding once failover is switched off
    roles = await kube.list(RBAC, "Role", owner.namespace, selector(owner.name))
    bindings = await kube.list(RBAC, "RoleBinding", owner.namespace, selector(owner.name))
    for api_version, kind, existing in (("v1", "Service", services), ("v1", "ConfigMap", configmaps),
                                        ("policy/v1", "PodDisruptionBudget", budgets),
                                        ("apps/v1", "StatefulSet", statefulsets),
                                        ("networking.k8s.io/v1", "NetworkPolicy", policies),
                                        (RBAC, "Role", roles), (RBAC, "RoleBinding", bindings)):
        for name in stale_names(owner, desired, kind, existing):
            await _api_step("delete", f"deleting {kind} {name}", kube.delete(api_version, kind, owner.namespace, name))
            out.events.append(Event("Normal", "Deleted", f"{kind} {name}: no longer part of the spec"))
    out.status.update({
        "volumeSize": format_quantity(volume),
        "replicas": replicas,
        # the scale subresource's labelSelectorPath: every pod of the store, as a selector string
        "selector": selector_text(owner.name),
        "problems": problems,
    })
    return out


async def _on_delete(kube: Kube, owner: Owner) -> None:
    """Switch the store's StatefulSets that still roll (failover Lease just switched on) to
    OnDelete, dropping their ``rollingUpdate``: the apply alone cannot, the API server refuses an
    OnDelete strategy with a ``rollingUpdate`` and keeps the fields the apply does not own, the
    partition the observer set by patch and the defaults it filled in itself."""
    for sts in await kube.list("apps/v1", "StatefulSet", owner.namespace, selector(owner.name)):
        if (sts.get("spec", {}).get("updateStrategy") or {}).get("rollingUpdate") is None:
            continue
        name = str(sts["metadata"]["name"])
        await _api_step("apply", f"switching StatefulSet {name} to OnDelete", kube.merge_patch(
            "apps/v1", "StatefulSet", owner.namespace, name,
            {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}}))


def _observer_owned(owner: Owner, obj: Mapping[str, Any]) -> set[tuple[str, ...]]:
    """The fields of a child the observer sets between applies and keeps right itself, which the
    drift repair leaves to it: the masters' rolling update partition, the load balancer addresses
    (:func:`_publish_addresses`)."""
    if obj["kind"] == "StatefulSet":
        return {("spec", "updateStrategy", "rollingUpdate", "partition")}
    if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == addresses_name(owner.name):
        return {("data",)}
    return set()


async def _apply(kube: Kube, owner: Owner, obj: Mapping[str, Any], repair: bool, out: Outcome) -> None:
    """Server-side apply one desired object; with ``repair`` only when it drifted."""
    api_version, kind, name = str(obj["apiVersion"]), str(obj["kind"]), str(obj["metadata"]["name"])
    namespace = obj["metadata"].get("namespace")
    if not repair:
        await _api_step("apply", f"applying {kind} {name}", kube.apply(obj))
        return
    current = await kube.get(api_version, kind, namespace, name)
    drifted = drifted_fields(obj, current, _observer_owned(owner, obj))
    if not drifted:
        return
    metrics.DRIFT_REPAIRS.labels(kind=kind).inc()
    what = "recreated" if current is None else "restored " + ", ".join(drifted[:10])
    try:
        await kube.apply(obj)
    except ApiError as e:
        if e.status != 422 or current is None or kind == "StatefulSet":
            raise _api_failure("apply", f"applying {kind} {name}", e) from e
        # an edit apply cannot merge back: a Service port renumbered by hand is another item of the
        # ports list (keyed by port), whose name then clashes with ours. The object is replaced (a
        # StatefulSet never: its pods would go with it)
        await _api_step("delete", f"deleting {kind} {name}", kube.delete(api_version, kind, namespace, name))
        await _api_step("apply", f"applying {kind} {name}", kube.apply(obj))
        what = f"recreated, the edit could not be merged back ({e})"[:300]
    out.events.append(Event("Warning", "DriftRepaired", f"{kind} {name}: {what}"))


async def _api_step(step: str, what: str, call: Awaitable[Any]) -> None:
    """One API call of the apply step; a failure becomes kopf's retry (409, 429, 5xx) or a
    permanent error naming the object."""
    try:
        await call
    except ApiError as e:
        raise _api_failure(step, what, e) from e


def _api_failure(step: str, what: str, e: ApiError) -> kopf.TemporaryError | kopf.PermanentError:
    metrics.ERRORS.labels(step=step).inc()
    if e.retriable:
        return kopf.TemporaryError(f"{what}: {e}", delay=5)
    return kopf.PermanentError(f"{what}: {e}")


async def _slave_statefulset_names(kube: Kube, owner: Owner) -> list[str]:
    """The slave StatefulSets that exist now, whatever replicasPerGroup says (their PVCs grow with
    the masters')."""
    names = {slave_statefulset_name(owner.name, k) for k in range(1, MAX_REPLICAS_PER_GROUP)}
    existing = await kube.list("apps/v1", "StatefulSet", owner.namespace, selector(owner.name))
    return sorted(str(s["metadata"]["name"]) for s in existing if s["metadata"]["name"] in names)


def _partition(sts: Mapping[str, Any] | None) -> int | None:
    """The rolling update partition of a StatefulSet (None: none, or no StatefulSet)."""
    strategy = ((sts or {}).get("spec") or {}).get("updateStrategy") or {}
    partition = (strategy.get("rollingUpdate") or {}).get("partition")
    return None if partition is None else int(partition)


async def _grow_storage(kube: Kube, owner: Owner, sts_name: str, replicas: int, volume: int, out: Outcome) -> bool:
    """Expand the PVCs of StatefulSet ``sts_name``, then recreate it (orphaning its pods) with the
    new template."""
    size = format_quantity(volume)
    for i in range(replicas):
        name = pvc_name(sts_name, i)
        try:
            await kube.merge_patch("v1", "PersistentVolumeClaim", owner.namespace, name,
                                   {"spec": {"resources": {"requests": {"storage": size}}}})
        except ApiError as e:
            if e.status == 404:
                continue  # not created yet: the new template covers it
            metrics.ERRORS.labels(step="expand").inc()
            out.events.append(Event("Warning", "StorageExpansionFailed", f"PVC {name} to {size}: {e}"))
            return False
    out.events.append(Event("Normal", "StorageExpanded", f"PVCs of {replicas} brokers of {sts_name} requested {size}"))
    # volumeClaimTemplates are immutable: replace the StatefulSet, keeping its pods running
    await kube.delete("apps/v1", "StatefulSet", owner.namespace, sts_name, propagation="Orphan")
    if not await _wait_gone(kube, "apps/v1", "StatefulSet", owner.namespace, sts_name, 30):
        raise kopf.TemporaryError(f"StatefulSet {sts_name} still terminating after the orphan delete", delay=5)
    out.events.append(Event("Normal", "StatefulSetReplaced", f"{sts_name} recreated with volume template {size}"))
    return True


# -- observation and broker tuning -----------------------------------------------------------------

async def referenced_secrets(kube: Kube, owner: Owner, spec: Spec) -> tuple[dict[str, dict[str, bytes]],
                                                                           list[dict[str, str]]]:
    """The ACL / TLS Secrets the spec references, by name, and what is wrong with them.

    Problems: a Secret missing or lacking a key. Kubelet leaves a pod whose Secret volume cannot be
    set up in ContainerCreating, and a broker without its ACL file refuses every request: the
    RocketStore's status says why. Checked on every observation, so creating or fixing the Secret
    clears the problem without touching the spec. Reading Secrets is a privilege the chart grants
    only on request (``rbac.readReferencedSecrets``): without it (403) the brokers' own Secrets are
    not checked (and TLS is spoken without verifying, see :func:`broker_access`), but operator
    credentials that cannot be read are a problem: the operator cannot sign without them.
    """
    acl, tls = spec.acl, spec.tls
    creds = None if acl is None else acl.operator_credentials
    wanted: list[tuple[str, str, tuple[str, ...], bool]] = []  # spec path, Secret, keys, the operator's own
    if acl is not None:
        wanted.append(("acl", acl.secret_name, (acl.key,), False))
    if creds is not None:
        wanted.append(("acl.operatorCredentials", creds.secret_name, (creds.access_key_key, creds.secret_key_key),
                       True))
    wanted.extend(_auth_secrets(spec))
    if tls is not None:
        tls_keys = (tls.cert_key, tls.key_key, tls.trust_cert_key)
        wanted.append(("tls", tls.secret_name, tuple(k for k in tls_keys if k is not None), False))
    problems: list[dict[str, str]] = []
    found: dict[str, dict[str, bytes]] = {}
    for section, name, keys, own in wanted:
        try:
            data = found[name] if name in found else await read_secret(kube, owner.namespace, name)
        except SecretNotFound as e:
            problems.append({"reason": "SecretNotFound", "message": f"spec.{section}.secretName: {e}" + (
                "" if own else "; broker pods wait for it")})
            continue
        except ApiError as e:
            if e.status == 403 and not own:
                continue  # no RBAC to read Secrets (the chart's default): the check is skipped
            problems.append({"reason": "SecretUnreadable", "message": f"spec.{section}.secretName {name}: {e}"})
            continue
        found[name] = data
        missing = [k for k in keys if k not in data]
        if missing:
            problems.append({"reason": "SecretKeyMissing", "message": (
                f"spec.{section}: Secret {name} has no key {', '.join(missing)}")})
    return found, problems


def _auth_secrets(spec: Spec) -> list[tuple[str, str, tuple[str, ...], bool]]:
    """spec.auth's Secrets as :func:`referenced_secrets` checks them: the inner client's and the
    users' passwords are the operator's own (it signs with the one, creates users with the others),
    the initial user's only the brokers' (their pods wait for it)."""
    auth = spec.auth
    if auth is None:
        return []
    inner = auth.inner_client
    wanted: list[tuple[str, str, tuple[str, ...], bool]] = [
        ("auth.innerClient", inner.secret_name, (inner.access_key_key, inner.secret_key_key), True)]
    if auth.initial_user is not None:
        init = auth.initial_user
        wanted.append(("auth.initialUser", init.secret_name, (init.access_key_key, init.secret_key_key), False))
    wanted.extend((f"auth.users[{i}].passwordSecretKeyRef", u.password.secret_name, (u.password.key,), True)
                  for i, u in enumerate(auth.users))
    return wanted


def broker_access(spec: Spec, secrets: Mapping[str, Mapping[str, bytes]]) -> BrokerAccess:
    """How the operator speaks to the brokers, from the spec and the Secrets it could read.

    TLS unless ``spec.tls`` is absent or its mode disabled, trusting the TLS Secret's ``caKey``
    when it has one (otherwise unverified, as RocketMQ's clients by default), presenting the
    Secret's certificate and key when brokers ask for client certificates; ACL signing with
    ``spec.acl.operatorCredentials`` when both values are there (stripped of surrounding
    whitespace: a Secret made from files often ends in a newline).
    """
    creds = spec.auth.inner_client if spec.auth is not None else (
        None if spec.acl is None else spec.acl.operator_credentials)
    credentials = None
    if creds is not None and creds.secret_name in secrets:
        data = secrets[creds.secret_name]
        access_key = data.get(creds.access_key_key, b"").decode("utf-8", "replace").strip()
        secret_key = data.get(creds.secret_key_key, b"").decode("utf-8", "replace").strip()
        if access_key and secret_key:
            credentials = SessionCredentials(access_key, secret_key)
    tls = spec.tls
    if tls is None or tls.mode == "disabled":
        return BrokerAccess(credentials=credentials)
    material = secrets.get(tls.secret_name, {})
    ca = material.get(tls.ca_key)
    present = tls.client_auth != "none" and tls.cert_key in material and tls.key_key in material
    return BrokerAccess(
        credentials=credentials, tls=True, trust_pem=None if ca is None else ca.decode("ascii", "replace"),
        client_cert_pem=material[tls.cert_key] if present else None,
        client_key_pem=material[tls.key_key] if present else None,
    )


def _denied(name: str, error: BrokerError, spec: Spec) -> dict[str, str]:
    """The problem of a broker whose ACL refused the operator: credentials, not the network."""
    creds = None if spec.acl is None else spec.acl.operator_credentials
    hint = ("set spec.acl.operatorCredentials to an admin account of the ACL file" if creds is None
            else f"check the account in Secret {creds.secret_name} (it needs admin: true)")
    return {"reason": "BrokerAccessDenied", "message": f"{name} refused the operator ({error}); {hint}"}


async def observe(
    kube: Kube, brokers: Brokers, owner: Owner, spec: Spec, status: Mapping[str, Any], generation: int
) -> Outcome:
    """Observe pods and brokers, converge each broker's retention, run a new manual delete token.

    The reads and the tuning happen here; what the status and conditions say about them is
    :func:`rocketstore.operator.status.observed_status`."""
    out = Outcome()
    secrets, out.problems = await referenced_secrets(kube, owner, spec)
    access = broker_access(spec, secrets)
    replicas = int(status.get("replicas") or spec.brokers)
    pods = {p["metadata"]["name"]: p for p in await kube.list("v1", "Pod", owner.namespace, selector(owner.name))}
    old_brokers = {b.get("name"): b for b in status.get("brokers", []) or []}
    token = spec.maintenance.delete_expired_request
    addresses = [brokers.address(owner.name, owner.namespace, i, listen_port(spec, i)) for i in range(replicas)]

    # 1. runtime info of every broker, to decide the retention to run with
    runtimes: dict[int, BrokerRuntime] = {}
    errors: dict[int, str] = {}
    for i, addr in enumerate(addresses):
        try:
            runtimes[i] = await brokers.runtime(addr, access)
        except BrokerError as e:
            errors[i] = str(e)
            if e.denied:
                out.problems.append(_denied(pod_name(owner.name, i), e, spec))
    max_usage = max_disk_usage(runtimes.values())
    previous_hours = status.get("effectiveFileReservedTime")
    decision = decide(spec.retention, int(previous_hours) if previous_hours is not None else None, max_usage)
    if (spec.retention.policy == "adaptive" and max_usage is not None and previous_hours is not None
            and decision.file_reserved_time != int(previous_hours)):
        action = "lowered" if decision.file_reserved_time < int(previous_hours) else "raised"
        metrics.TUNING_ACTIONS.labels(action=f"adaptive_{action}").inc()
        out.events.append(Event(
            "Warning" if action == "lowered" else "Normal", f"Retention{action.capitalize()}",
            f"fileReservedTime {previous_hours}h -> {decision.file_reserved_time}h "
            f"(max disk usage {max_usage:.2%}, forced cleanup at "
            f"{spec.retention.disk_space_clean_forcibly_ratio:.0%}, spec {spec.retention.file_reserved_time}h)"))
    want = spec.retention.broker_properties(decision.file_reserved_time)
    # with external access, routes carry the address of each broker's node (status.hostIP) or
    # load balancer (its Service's status), as far as known
    external = await _observe_external_access(kube, owner, spec, replicas, pods, out)
    peers = {"clusterPeers": cluster_peers(owner, replicas, spec, {} if external is None else external.hosts),
             "namesrvPeers": namesrv_peers(owner, replicas, spec),
             **spec.metrics.broker_properties()}  # pushed with the peers: not part of the retention status

    # 2. per broker: converge retention, run the manual delete once per token
    observed: list[BrokerObservation] = []
    for i, addr in enumerate(addresses):
        name = pod_name(owner.name, i)
        old = old_brokers.get(name, {})
        applied, last_delete = old.get("appliedRetention"), old.get("lastManualDelete")
        rt = runtimes.get(i)
        if rt is not None:
            if rt.disk_usage_ratio is not None:
                metrics.BROKER_DISK_USAGE.labels(owner.namespace, owner.name, name).set(rt.disk_usage_ratio)
            running, pushed = await _converge_retention(brokers, access, addr, name, want, peers, out, spec)
            if pushed is not None:
                applied = pushed
            segment_size = int(running.get("mappedFileSizeCommitLog") or spec.commit_log.segment_size)
            last_delete = await _manual_delete(brokers, access, addr, name, token, rt, segment_size, last_delete,
                                               out, spec)
        observed.append(BrokerObservation(name, addr, pods.get(name, {}), rt, errors.get(i), applied, last_delete))

    # 3. slaves: the same live keys (retention, clusterPeers), which a restart of theirs would
    # otherwise be the only way to change; their lag; the masters' rollout partition
    groups: list[GroupView] = []
    held: list[str] = []
    # with Lease failover the brokers' Leases, read once: they order the groups' restarts and make status.masters
    leases = await kube.list(replica_lease.API_VERSION, replica_lease.KIND, owner.namespace,
                             replica_lease.lease_selector(owner.name)) if spec.replication.failover.lease else []
    if spec.auth is not None:  # users and ACLs (RocketMQ 5.3, spec.auth)
        targets = auth_targets(brokers, owner, spec, replicas, addresses, runtimes.keys(), pods)
        auth_problems, auth_done = await converge_auth(brokers, access, spec.auth, secrets, targets)
        out.problems.extend(auth_problems)
        out.events.extend(Event("Normal", "AuthConverged", done) for done in auth_done)
    if spec.replication.slaves:
        await _converge_slaves(brokers, access, owner, spec, replicas, pods, want, peers, out)
        groups, held = await _observe_groups(kube, brokers, owner, spec, replicas, pods, leases, out)
    report = observed_status(spec, replicas, observed, decision, external, now(), groups, held)
    out.status.update(report.status)
    _observe_masters(spec, status, leases, out)
    out.conditions.extend(report.conditions)
    out.dropped.extend(report.dropped)

    # 4. scaling: drain the brokers a scale-down removes, give the ones a scale-up added the topics
    await _drain(brokers, access, owner, spec, replicas, pods, status, out)
    await _copy_topics(brokers, access, owner, spec, replicas, pods, status, out)
    return out


async def _namesrv_addresses(brokers: Brokers, access: BrokerAccess, owner: Owner, spec: Spec, replicas: int,
                             pods: Mapping[str, Mapping[str, Any]], out: Outcome) -> list[str]:
    """The name servers of the store: one embedded in every ready pod, masters and slaves."""
    addrs = []
    for k in range(spec.replication.replicas_per_group):
        for i in range(replicas):
            name = slave_pod_name(owner.name, k, i) if k else pod_name(owner.name, i)
            if not pod_ready(pods.get(name, {})):
                continue
            addr = brokers.address(owner.name, owner.namespace, i, listen_port(spec, i, k), slave=k)
            try:
                addrs.append(await brokers.namesrv_address(addr, access))
            except BrokerError as e:
                out.events.append(Event("Warning", "NameServerUnreachable", f"{name}: {e}"))
    return addrs


async def _write_perm(brokers: Brokers, access: BrokerAccess, namesrvs: list[str], broker_names: list[str],
                      add: bool, out: Outcome) -> None:
    for broker_name in broker_names:
        for namesrv in namesrvs:
            try:
                await brokers.write_perm(namesrv, broker_name, add=add, access=access)
            except BrokerError as e:
                metrics.ERRORS.labels(step="write_perm").inc()
                out.events.append(Event("Warning", "WritePermNotChanged", (
                    f"{'add' if add else 'wipe'} write permission of {broker_name} at {namesrv}: {e}")))


async def _drain(brokers: Brokers, access: BrokerAccess, owner: Owner, spec: Spec, replicas: int,
                 pods: Mapping[str, Mapping[str, Any]], status: Mapping[str, Any], out: Outcome) -> None:
    """While a scale-down waits (``replicas``, the groups running, above ``spec.brokers``): wipe the
    leaving brokers' write permission on every name server (again each pass: a name server that
    restarted forgot it), read their backlog, and move ``status.drain`` on
    (:mod:`rocketstore.operator.scaling`). Brokers that no longer leave get it back."""
    previous = status.get("drain")
    draining = spec.allow_scale_down and spec.drain_timeout_s > 0 and spec.brokers < replicas
    leaving = leaving_brokers(owner.name, replicas, spec.brokers) if draining else []
    running = {pod_name(owner.name, i) for i in range(replicas)}
    restore = sorted(set((previous or {}).get("brokers") or []) - set(leaving) & running)
    if not draining:
        out.dropped.append(DRAIN_CONDITION)
        if previous is not None:
            out.status["drain"] = None
    if not leaving and not restore:
        return
    namesrvs = await _namesrv_addresses(brokers, access, owner, spec, replicas, pods, out)
    await _write_perm(brokers, access, namesrvs, restore, True, out)
    if restore:
        out.events.append(Event("Normal", "DrainCancelled", f"{', '.join(restore)} stay: write permission added back"))
    if not draining:
        return
    await _write_perm(brokers, access, namesrvs, leaving, False, out)
    if not namesrvs:  # no pod ready yet: the name servers are unknown, producers still see the old routes
        out.events.append(Event("Warning", "WritePermNotChanged", (
            f"wipe write permission of {', '.join(leaving)}: no ready pod, so no name server known yet")))
    stats = []
    held = HeldMessages()
    unreachable = []
    for i in range(spec.brokers, replicas):
        try:
            stats += await brokers.consume_stats(brokers.address(owner.name, owner.namespace, i, listen_port(spec, i)),
                                                 access)
            held += await brokers.held(brokers.addressing.http_address(owner.name, owner.namespace, i,
                                                                       spec.metrics.port))
        except BrokerError as e:
            unreachable.append(pod_name(owner.name, i))
            out.events.append(Event("Warning", "DrainUnobserved", f"{pod_name(owner.name, i)}: {e}"))
    drain = drain_step(previous, leaving, spec.brokers, backlog(stats), unreachable,
                       datetime.datetime.now(datetime.UTC), spec.drain_timeout_s, held=held)
    out.status["drain"] = drain
    out.conditions.append(drain_condition(drain))
    if drain["phase"] != (previous or {}).get("phase"):
        reason = {"Draining": "DrainStarted", "Drained": "Drained"}.get(drain["phase"], "DrainDeadlineExceeded")
        out.events.append(Event("Warning" if reason == "DrainDeadlineExceeded" else "Normal", reason,
                                drain_condition(drain).message))


async def _copy_topics(brokers: Brokers, access: BrokerAccess, owner: Owner, spec: Spec, replicas: int,
                       pods: Mapping[str, Mapping[str, Any]], status: Mapping[str, Any], out: Outcome) -> None:
    """Give each ready broker of ``status.topicCopyPending`` the topics a running broker has that
    it lacks, and its write permission on every name server (a drain may have wiped its name)."""
    pending = list(status.get("topicCopyPending") or [])
    if not pending:
        return
    ordinals = {pod_name(owner.name, i): i for i in range(replicas)}
    source = next((i for name, i in ordinals.items() if name not in pending and pod_ready(pods.get(name, {}))), None)
    remaining = []
    namesrvs: list[str] | None = None
    for name in pending:
        i = ordinals.get(name)
        if i is None:
            continue  # scaled down again before it was ready
        if source is None or not pod_ready(pods.get(name, {})):
            remaining.append(name)
            continue
        try:
            have = await brokers.topic_configs(
                brokers.address(owner.name, owner.namespace, source, listen_port(spec, source)), access)
            addr = brokers.address(owner.name, owner.namespace, i, listen_port(spec, i))
            copies = topics_to_copy(have, await brokers.topic_configs(addr, access), {owner.name, *ordinals})
            await brokers.create_topics(addr, copies, access)
        except BrokerError as e:
            remaining.append(name)
            metrics.ERRORS.labels(step="topic_copy").inc()
            out.events.append(Event("Warning", "TopicCopyFailed", f"{name}: {e}"))
            if e.denied:
                out.problems.append(_denied(name, e, spec))
            continue
        if namesrvs is None:
            namesrvs = await _namesrv_addresses(brokers, access, owner, spec, replicas, pods, out)
        await _write_perm(brokers, access, namesrvs, [name], True, out)
        names = f" ({', '.join(c.topic_name for c in copies[:20])})" if copies else ""
        out.events.append(Event("Normal", "TopicsCopied",
                                f"{name}: {len(copies)} topics from {pod_name(owner.name, source)}{names}"))
    out.status["topicCopyPending"] = remaining or None


def auth_targets(brokers: Brokers, owner: Owner, spec: Spec, replicas: int, addresses: Sequence[str],
                 answered: Collection[int], pods: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The brokers whose users and ACLs are converged, as (pod, address): every master that
    answered this observation, and every ready slave. Each broker keeps its own users and ACLs, a
    slave serves reads (slaveReadEnable) and, with failover, may be the next master."""
    targets = [(pod_name(owner.name, i), addr) for i, addr in enumerate(addresses) if i in answered]
    for k in range(1, spec.replication.replicas_per_group):
        for i in range(replicas):
            if pod_ready(pods.get(name := slave_pod_name(owner.name, k, i), {})):
                targets.append((name, brokers.address(owner.name, owner.namespace, i, listen_port(spec, i, k),
                                                      slave=k)))
    return targets


async def _converge_slaves(brokers: Brokers, access: BrokerAccess, owner: Owner, spec: Spec, replicas: int,
                           pods: Mapping[str, Mapping[str, Any]], want: Mapping[str, str],
                           peers: Mapping[str, str], out: Outcome) -> None:
    """Push the retention keys and the peer keys to every ready slave where they differ."""
    for k in range(1, spec.replication.replicas_per_group):
        for i in range(replicas):
            name = slave_pod_name(owner.name, k, i)
            if pod_ready(pods.get(name, {})):
                addr = brokers.address(owner.name, owner.namespace, i, listen_port(spec, i, k), slave=k)
                await _converge_retention(brokers, access, addr, name, want, peers, out, spec)


async def _group_views(brokers: Brokers | None, owner: Owner, spec: Spec, replicas: int,
                       pods: Mapping[str, Mapping[str, Any]],
                       leases: Sequence[Mapping[str, Any]] = ()) -> list[GroupView]:
    """Each broker group with its members' roles and lag, from every member's ``/metrics`` (a
    member without a pod is not asked: there is no broker to answer)."""
    seen: dict[str, ReplicationView] = {}
    errors: dict[str, str] = {}
    if brokers is not None:
        for k in range(spec.replication.replicas_per_group):
            for i in range(replicas):
                name = slave_pod_name(owner.name, k, i) if k else pod_name(owner.name, i)
                if k and name not in pods:
                    continue
                addr = brokers.addressing.http_address(owner.name, owner.namespace, i, spec.metrics.port, slave=k)
                try:
                    seen[name] = await brokers.replication(addr)
                except BrokerError as e:
                    errors[name] = str(e)
    return group_views(owner, spec, replicas, pods, seen, errors, _lease_infos(leases))


def _lease_infos(leases: Sequence[Mapping[str, Any]]) -> dict[str, replica_lease.ReplicaInfo]:
    """The groups' Leases by brokerName (a Lease that cannot be read is left out here;
    ``status.masters`` names it)."""
    infos: dict[str, replica_lease.ReplicaInfo] = {}
    for obj in leases:
        with contextlib.suppress(replica_lease.LeaseFormatError):
            lease = replica_lease.parse_lease(obj)
            infos[lease.broker_name] = lease.info
    return infos


async def _group_rollouts(kube: Kube, owner: Owner, groups: list[GroupView]) -> list[GroupRollout]:
    statefulsets = {str(s["metadata"]["name"]): s
                    for s in await kube.list("apps/v1", "StatefulSet", owner.namespace, selector(owner.name))}
    return group_rollouts(owner.name, groups, statefulsets)


async def _observe_groups(kube: Kube, brokers: Brokers, owner: Owner, spec: Spec, replicas: int,
                          pods: Mapping[str, Mapping[str, Any]], leases: Sequence[Mapping[str, Any]],
                          out: Outcome) -> tuple[list[GroupView], list[str]]:
    """The groups' lag, and the masters' partition moved to what the groups allow now; returns
    the groups and the masters the partition holds back from a new template."""
    groups = await _group_views(brokers, owner, spec, replicas, pods, leases)
    if spec.replication.failover.lease:  # no partition: the Leases order each group's restarts
        await _roll_lease_groups(kube, owner, groups, leases, out)
        return groups, []
    rollouts = await _group_rollouts(kube, owner, groups)
    partition = master_partition(replicas, rollouts)
    held = held_masters(owner.name, partition, rollouts)
    sts = await kube.get("apps/v1", "StatefulSet", owner.namespace, owner.name)
    if sts is None:
        return groups, held
    current = _partition(sts)
    if current != partition:
        try:
            await kube.merge_patch("apps/v1", "StatefulSet", owner.namespace, owner.name,
                                   {"spec": {"updateStrategy": {"rollingUpdate": {"partition": partition}}}})
        except ApiError as e:
            metrics.ERRORS.labels(step="partition").inc()
            out.problems.append({"reason": "RolloutNotAdvanced", "message": f"StatefulSet {owner.name}: {e}"})
            return groups, held
        released = [pod_name(owner.name, i) for i in range(partition, replicas)]
        out.events.append(Event("Normal", "MasterRolloutPartition", f"partition {current} -> {partition}: " + (
            f"{', '.join(released)} may take a new template" if released else
            "masters wait for their slaves to be updated and in sync")))
    return groups, held


async def _roll_lease_groups(kube: Kube, owner: Owner, groups: Sequence[GroupView],
                             leases: Sequence[Mapping[str, Any]], out: Outcome) -> None:
    """With Lease failover every StatefulSet of the store updates OnDelete: this deletes, in each
    group, the member :func:`~rocketstore.operator.rollout.lease_group_restart` names, so the
    Lease's master restarts last and hands its Lease over on SIGTERM (and, while no Lease names a
    master, the member serving as master first)."""
    statefulsets = {str(s["metadata"]["name"]): s
                    for s in await kube.list("apps/v1", "StatefulSet", owner.namespace, selector(owner.name))}
    infos = _lease_infos(leases)
    for group in groups:
        members = []
        for m in group.members:
            sts_name = owner.name if m.member == 0 else slave_statefulset_name(owner.name, m.member)
            pod = m.pod or None
            # an absent pod is being created from the update revision: it counts as updated, not ready
            members.append(LeaseMember(m.name, replica_id(m.member), pod is not None and pod_ready(pod),
                                       pod is None or pod_updated(statefulsets.get(sts_name), pod), m.role))
        info = infos.get(group.name)
        victim = lease_group_restart(members, None if info is None else info.master_replica_id,
                                     frozenset() if info is None else info.sync_state_set)
        if victim is None:
            continue
        try:
            await kube.delete("v1", "Pod", owner.namespace, victim)
        except ApiError as e:
            metrics.ERRORS.labels(step="rollout").inc()
            out.problems.append({"reason": "RolloutNotAdvanced", "message": f"pod {victim}: {e}"})
            continue
        if info is not None and info.master_replica_id is not None:
            master = any(m.pod == victim and m.replica_id == info.master_replica_id for m in members)
            note = " (the group's master: it hands its Lease to an in-sync member first)"
        else:
            master = any(m.pod == victim and m.role == "MASTER" for m in members)
            note = " (the group's master, before any other member: it takes the Lease with every acknowledged message)"
        out.events.append(Event("Normal", "MemberRestarted",
                                f"{victim} restarts for the new template" + (note if master else "")))


def _observe_masters(spec: Spec, status: Mapping[str, Any], leases: Sequence[Mapping[str, Any]], out: Outcome) -> None:
    """With Lease failover: each group's master, epoch and SyncStateSet from the Leases the brokers
    hold (``status.masters``), and a ``MasterElected`` event for each epoch that changed since the
    last observation. Without it, ``status.masters`` is cleared."""
    if not spec.replication.failover.lease:
        if status.get("masters") is not None:
            out.status["masters"] = None
        return
    masters = masters_status(leases)
    out.status["masters"] = masters
    for message in elections(status.get("masters") or [], masters):
        out.events.append(Event("Normal", "MasterElected", message))


async def _observe_external_access(kube: Kube, owner: Owner, spec: Spec, replicas: int,
                                   pods: Mapping[str, Mapping[str, Any]], out: Outcome) -> ExternalView | None:
    """:func:`rocketstore.operator.status.external_view` from this RocketStore's Services (read
    with LoadBalancer only); publishes load balancer addresses to the brokers that wait for them
    (the addresses ConfigMap)."""
    ext = spec.external_access
    balanced = ext is not None and ext.load_balancer
    services = await kube.list("v1", "Service", owner.namespace, selector(owner.name)) if balanced else []
    view = external_view(owner, spec, replicas, pods, services)
    if view is not None and ext is not None and ext.load_balancer and ext.waits_for_address:
        await _publish_addresses(kube, owner, replicas, view.hosts, out)
    return view


async def _publish_addresses(kube: Kube, owner: Owner, replicas: int, hosts: Mapping[int, str],
                             out: Outcome) -> None:
    """Write the brokers' load balancer addresses into the addresses ConfigMap when they changed
    (the same full object the apply step writes, so the two never undo each other)."""
    want = addresses_configmap(owner, replicas, hosts)
    current = await kube.get("v1", "ConfigMap", owner.namespace, addresses_name(owner.name))
    have = (current or {}).get("data") or {}
    if have == want["data"]:
        return
    try:
        await kube.apply(want)
    except ApiError as e:
        metrics.ERRORS.labels(step="addresses").inc()
        out.problems.append({"reason": "AddressesNotPublished",
                             "message": f"ConfigMap {addresses_name(owner.name)}: {e}"})
        return
    for pod, address in sorted(want["data"].items()):
        if have.get(pod) != address:
            out.events.append(Event("Normal", "LoadBalancerAddress", f"{pod} advertises {address}"))


async def _converge_retention(
    brokers: Brokers, access: BrokerAccess, addr: str, name: str, want: Mapping[str, str],
    peers: Mapping[str, str], out: Outcome, spec: Spec,
) -> tuple[dict[str, str], dict[str, str] | None]:
    """Push the retention keys (and the peer keys, clusterPeers and namesrvPeers, so scale-up
    needs no restart, and metricsPerQueueEnable) where they differ. Keys newer than clusterPeers
    go only to a broker that reports them: one of an older image refuses an unknown key, and the
    whole update with it.

    Returns the broker's configuration as read before the push ({} when it could not be read) and
    the retention keys it runs with now (None when they could not be read or pushed).
    """
    try:
        running = await brokers.config(addr, access)
        live = {**want, **{k: v for k, v in peers.items() if k == "clusterPeers" or k in running}}
        current = {k: running.get(k, "") for k in live}
        stale = {k: v for k, v in live.items() if not same_setting(current[k], v)}
        if stale:
            current.update(await brokers.push_config(addr, stale, access))
            metrics.TUNING_ACTIONS.labels(action="retention_push").inc()
            out.events.append(Event("Normal", "BrokerConfigApplied", f"{name}: " + ", ".join(
                f"{k}={v}" for k, v in stale.items())))
        return running, {k: current[k] for k in want}
    except BrokerError as e:
        metrics.ERRORS.labels(step="retention_push").inc()
        out.events.append(Event("Warning", "RetentionPushFailed", f"{name}: {e}"))
        if e.denied:
            out.problems.append(_denied(name, e, spec))
        return {}, None


async def _manual_delete(
    brokers: Brokers, access: BrokerAccess, addr: str, name: str, token: str | None, rt: BrokerRuntime,
    segment_size: int, previous: Mapping[str, Any] | None, out: Outcome, spec: Spec,
) -> Mapping[str, Any] | None:
    """Run ``deleteExpiredCommitLog`` once per token; returns the broker's ``lastManualDelete``
    (``previous`` when there is nothing to run)."""
    last = previous or {}
    if token is None:
        return previous
    if last.get("token") == token:
        # already run for this token: follow how many segments the cleanup removed since
        before = last.get("commitLogMinOffsetBefore")
        if before is not None and rt.commit_log_min_offset is not None:
            return {**last, "filesDeleted": max(0, (rt.commit_log_min_offset - before) // segment_size)}
        return previous
    try:
        await brokers.delete_expired(addr, access)
        result = "Requested"
        metrics.TUNING_ACTIONS.labels(action="manual_delete").inc()
        out.events.append(Event("Normal", "ManualDeleteRequested", f"{name}: deleteExpiredCommitLog, token {token}"))
    except BrokerError as e:
        result = f"Failed: {e}"[:300]
        metrics.ERRORS.labels(step="manual_delete").inc()
        out.events.append(Event("Warning", "ManualDeleteFailed", f"{name}: token {token}: {e}"))
        if e.denied:
            out.problems.append(_denied(name, e, spec))
    return {
        "token": token,
        "result": result,
        "time": now(),
        "commitLogMinOffsetBefore": rt.commit_log_min_offset,
        "filesDeleted": 0,
    }
