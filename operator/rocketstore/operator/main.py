"""``rocketstore operator``: run the kopf operator with a liveness endpoint and Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf
from prometheus_client import start_http_server

from rocketstore.operator import metrics
from rocketstore.operator.brokers import ADDRESS_ENV, BrokerAddressing, Brokers
from rocketstore.operator.desired import default_broker_image
from rocketstore.operator.image_policy import ImagePolicy
from rocketstore.operator.kube import ConfigException, Kube, discover
from rocketstore.operator.leader import LOST_EXIT_CODE, ElectionConfig, LeaderElector
from rocketstore.operator.model import valid_label
from rocketstore.operator.uninstall import uninstall
from rocketstore.operator.upgrade import UpgradeGate

__all__ = ["BROKER_IMAGE_ENV", "NAMESPACE_ENV", "OperatorOptions", "broker_image", "election_config",
           "operator_peer", "release_finalizers", "run"]

#: the default broker image when --broker-image is not given (the chart sets it)
BROKER_IMAGE_ENV = "ROCKETSTORE_BROKER_IMAGE"
#: the operator pod's namespace when --operator-namespace is not given (the downward API's)
NAMESPACE_ENV = "POD_NAMESPACE"


@dataclass(frozen=True)
class OperatorOptions:
    namespaces: Sequence[str] = ()
    all_namespaces: bool = True
    bind_address: str = "0.0.0.0"
    liveness_port: int = 8080
    metrics_port: int = 8081
    broker_address: str | None = None
    #: image of brokers whose RocketStore names none; None = env, then the operator's own version
    broker_image: str | None = None
    #: patterns of further images a RocketStore may name; None = $ROCKETSTORE_ALLOWED_BROKER_IMAGES
    allowed_broker_images: str | None = None
    #: labels of the operator's own pods ("k=v,..."), let in by every RocketStore's NetworkPolicy
    operator_pod_selector: str | None = None
    #: their namespace; None = $POD_NAMESPACE
    operator_namespace: str | None = None
    interval: float = 30.0
    #: stores without spec.image that roll to a new default broker image at a time (:mod:`upgrade`)
    max_concurrent_upgrades: int = 1
    verbose: bool = False
    #: a kubeconfig context; None: in a pod its service account, else the current context
    context: str | None = None
    #: reconcile only while holding a Lease (:mod:`rocketstore.operator.leader`); else standalone
    leader_elect: bool = False
    #: the Lease's name, in the operator's namespace (--operator-namespace, else $POD_NAMESPACE)
    leader_elect_lease: str = "rocketstore-operator"
    #: who this process is to the others; None: the host (the pod) name and a random suffix
    leader_elect_identity: str | None = None
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0


def broker_image(opts: OperatorOptions, environ: Mapping[str, str]) -> str:
    """The image of brokers whose RocketStore names none: --broker-image, $ROCKETSTORE_BROKER_IMAGE,
    else this operator's own release."""
    return opts.broker_image or environ.get(BROKER_IMAGE_ENV) or default_broker_image()


def operator_peer(opts: OperatorOptions, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The operator's pods as a NetworkPolicyPeer, from --operator-pod-selector and the namespace
    (--operator-namespace, else $POD_NAMESPACE); None without a selector (an operator outside a
    pod, which no pod selector names). Raises ValueError for labels or a namespace that are not."""
    text = opts.operator_pod_selector
    if not text:
        return None
    labels: dict[str, str] = {}
    for pair in text.split(","):
        key, eq, value = pair.strip().partition("=")
        if not eq or not valid_label(key, value):
            raise ValueError(f"--operator-pod-selector: {pair.strip()!r} is not a label key=value")
        labels[key] = value
    namespace = opts.operator_namespace or environ.get(NAMESPACE_ENV)
    if not namespace or not valid_label("kubernetes.io/metadata.name", namespace):
        raise ValueError(f"--operator-pod-selector needs the operator's namespace (--operator-namespace or "
                         f"${NAMESPACE_ENV}), got {namespace!r}")
    # kubernetes.io/metadata.name: the label the API server sets on every namespace to its name
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "podSelector": {"matchLabels": labels}}


def election_config(opts: OperatorOptions, environ: Mapping[str, str]) -> ElectionConfig | None:
    """The leader election of --leader-elect, None without it. Raises ValueError without a
    namespace for the Lease or with timings that could let two leaders overlap."""
    if not opts.leader_elect:
        return None
    namespace = opts.operator_namespace or environ.get(NAMESPACE_ENV)
    if not namespace:
        raise ValueError(f"--leader-elect needs the operator's namespace, where its Lease lives "
                         f"(--operator-namespace or ${NAMESPACE_ENV})")
    # the host name is the pod's name in a pod; the suffix tells a restarted process from its predecessor
    identity = opts.leader_elect_identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    config = ElectionConfig(namespace=namespace, name=opts.leader_elect_lease, identity=identity,
                            lease_duration=opts.leader_elect_lease_duration,
                            renew_deadline=opts.leader_elect_renew_deadline,
                            retry_period=opts.leader_elect_retry_period)
    problem = config.problem()
    if problem is not None:
        raise ValueError(f"--leader-elect: {problem}")
    return config


@contextlib.contextmanager
def _standby_liveness(address: str, port: int) -> Iterator[None]:
    """/healthz of a standby: kopf serves it only once it runs, and a standby waiting for the Lease
    is alive too (the pod's probes would otherwise restart it forever). JSON, as kopf's answer is:
    the Service behind the chart's `helm test` reaches the leader or a standby alike."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"standby": true}\n')

        def log_message(self, format: str, *args: Any) -> None:
            pass

    if port <= 0:
        yield
        return
    server = http.server.ThreadingHTTPServer((address, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="standby-healthz", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def _lost(reason: str) -> None:
    """Stop reconciling at once: exit, handlers halfway included (see :mod:`rocketstore.operator.leader`)."""
    logging.getLogger(__name__).critical("leadership lost: %s; exiting to restart as a standby", reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(LOST_EXIT_CODE)


def _kube(opts: OperatorOptions) -> Kube | None:
    """The API client, or None after saying why there is none."""
    credentials = discover(opts.context)
    try:
        return Kube(credentials)
    except ConfigException as e:
        tried = "the " if opts.context else "not in a pod with a service account, and the "
        print(f"rocketstore operator: no API server to use: {tried}{credentials.source}: {e}", file=sys.stderr)
        return None


def release_finalizers(opts: OperatorOptions, deployment: str, timeout: float) -> int:
    """``--release-finalizers``: stop the operator's Deployment and release its RocketStores
    (:mod:`rocketstore.operator.uninstall`) instead of running; returns the exit code."""
    logging.basicConfig(level=logging.DEBUG if opts.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        peer = operator_peer(opts, os.environ)
    except ValueError as e:
        print(f"rocketstore operator: {e}", file=sys.stderr)
        return 2
    if peer is None:
        print("rocketstore operator: --release-finalizers needs --operator-pod-selector: the operator pods to wait for",
              file=sys.stderr)
        return 2
    kube = _kube(opts)
    if kube is None:
        return 2
    namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]

    async def release() -> list[str]:
        try:
            return await uninstall(kube, operator_namespace=namespace, deployment=deployment,
                                   pods=peer["podSelector"]["matchLabels"], namespaces=opts.namespaces,
                                   timeout=timeout)
        finally:
            await kube.close()

    try:
        stores = asyncio.run(release())
    except (TimeoutError, RuntimeError) as e:
        print(f"rocketstore operator: {e}", file=sys.stderr)
        return 1
    print(f"operator {namespace}/{deployment} stopped; released {len(stores)} RocketStore(s) from "
          f"the finalizer: {', '.join(stores) or 'none carried it'}")
    return 0


def run(opts: OperatorOptions) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    # kopf's own format: a handler's or timer's line names its store ("[namespace/name]")
    kopf.configure(verbose=opts.verbose, log_format=kopf.LogFormat.FULL, log_prefix=True)
    # read by the handlers module at import (timer interval)
    os.environ["ROCKETSTORE_OPERATOR_INTERVAL"] = str(opts.interval)
    from rocketstore.operator import handlers  # noqa: F401  (registers the handlers)

    addressing = BrokerAddressing.from_text(opts.broker_address or os.environ.get(ADDRESS_ENV))
    kube = _kube(opts)
    if kube is None:
        return 2
    try:
        peer = operator_peer(opts, os.environ)
    except ValueError as e:
        print(f"rocketstore operator: {e}", file=sys.stderr)
        return 2
    try:
        election = election_config(opts, os.environ)
    except ValueError as e:
        print(f"rocketstore operator: {e}", file=sys.stderr)
        return 2
    default_image = broker_image(opts, os.environ)
    memo = kopf.Memo(brokers=Brokers(addressing), kube=kube, broker_image=default_image,
                     image_policy=ImagePolicy.from_options(default_image, opts.allowed_broker_images, os.environ),
                     operator_peer=peer, identity=None if election is None else election.identity,
                     upgrades=UpgradeGate(opts.max_concurrent_upgrades))
    if opts.metrics_port > 0:
        start_http_server(opts.metrics_port, addr=opts.bind_address)
    elector = None if election is None else LeaderElector(kube, election)
    stop_renewing = threading.Event()
    renewal = None
    if elector is not None:
        with _standby_liveness(opts.bind_address, opts.liveness_port):
            asyncio.run(elector.acquire())
        renewal = threading.Thread(target=asyncio.run, args=(elector.keep(stop_renewing, _lost),),
                                   name="lease-renewal", daemon=True)
        renewal.start()
    else:
        metrics.LEADER.set(1)
    liveness = f"http://{opts.bind_address}:{opts.liveness_port}/healthz" if opts.liveness_port > 0 else None
    # standalone: kopf's own peering stays off; with --leader-elect the Lease already makes this
    # process the only one reconciling (docs/operator.md, "High availability", says why not peering)
    kopf.run(
        standalone=True,
        clusterwide=opts.all_namespaces and not opts.namespaces,
        namespaces=list(opts.namespaces),
        liveness_endpoint=liveness,
        memo=memo,
    )
    if elector is not None and renewal is not None:
        stop_renewing.set()
        renewal.join()  # a renewal running now would otherwise take the Lease back after the release
        asyncio.run(elector.release())
    return 0
