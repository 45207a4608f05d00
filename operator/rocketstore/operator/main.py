"""``rocketstore operator``: run the kopf operator with a liveness endpoint and Prometheus metrics."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf
from prometheus_client import start_http_server

from rocketstore.operator.brokers import ADDRESS_ENV, BrokerAddressing, Brokers
from rocketstore.operator.desired import default_broker_image
from rocketstore.operator.image_policy import ImagePolicy
from rocketstore.operator.kube import ConfigException, Kube, discover
from rocketstore.operator.model import valid_label

__all__ = ["BROKER_IMAGE_ENV", "NAMESPACE_ENV", "OperatorOptions", "broker_image", "operator_peer", "run"]

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
    verbose: bool = False
    #: a kubeconfig context; None: in a pod its service account, else the current context
    context: str | None = None


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


def run(opts: OperatorOptions) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    logging.basicConfig(level=logging.DEBUG if opts.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # read by the handlers module at import (timer interval)
    os.environ["ROCKETSTORE_OPERATOR_INTERVAL"] = str(opts.interval)
    from rocketstore.operator import handlers  # noqa: F401  (registers the handlers)

    addressing = BrokerAddressing.from_text(opts.broker_address or os.environ.get(ADDRESS_ENV))
    credentials = discover(opts.context)
    try:
        kube = Kube(credentials)
    except ConfigException as e:
        tried = "the " if opts.context else "not in a pod with a service account, and the "
        print(f"rocketstore operator: no API server to use: {tried}{credentials.source}: {e}", file=sys.stderr)
        return 2
    try:
        peer = operator_peer(opts, os.environ)
    except ValueError as e:
        print(f"rocketstore operator: {e}", file=sys.stderr)
        return 2
    default_image = broker_image(opts, os.environ)
    memo = kopf.Memo(brokers=Brokers(addressing), kube=kube, broker_image=default_image,
                     image_policy=ImagePolicy.from_options(default_image, opts.allowed_broker_images, os.environ),
                     operator_peer=peer)
    if opts.metrics_port > 0:
        start_http_server(opts.metrics_port, addr=opts.bind_address)
    liveness = f"http://{opts.bind_address}:{opts.liveness_port}/healthz" if opts.liveness_port > 0 else None
    kopf.run(
        standalone=True,
        clusterwide=opts.all_namespaces and not opts.namespaces,
        namespaces=list(opts.namespaces),
        liveness_endpoint=liveness,
        memo=memo,
    )
    return 0
