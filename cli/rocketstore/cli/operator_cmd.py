"""``rocketstore operator``: the Kubernetes operator for RocketStore custom resources.

    rocketstore operator [--namespace NS ... | --all-namespaces] [--context NAME] [--liveness-port 8080]
                         [--metrics-port 8081] [--broker-address TEMPLATE] [--broker-image IMAGE]
                         [--allowed-broker-images PATTERNS] [--operator-pod-selector LABELS]
                         [--operator-namespace NS] [--interval S] [--max-concurrent-upgrades N]
                         [--leader-elect [--leader-elect-lease NAME] [--leader-elect-identity ID]
                          [--leader-elect-lease-duration S] [--leader-elect-renew-deadline S]
                          [--leader-elect-retry-period S]]
    rocketstore operator --release-finalizers DEPLOYMENT --operator-pod-selector LABELS
                         [--operator-namespace NS] [--namespace NS ... | --all-namespaces] [--stop-timeout S]

The operator itself is the ``rocketstore.operator`` package (operator/rocketstore/operator). Its
libraries (kopf, kubernetes) come with the ``operator`` extra, so broker-only and Spark installs do
without them; this module imports none of them until the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys

#: the extra that brings the operator's libraries, and the modules it provides
EXTRA_INSTALL = "pip install 'rocketstore[operator]'"
EXTRA_MODULES = ("kopf", "kubernetes")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "operator",
        help="run the Kubernetes operator (kopf) for RocketStore resources",
        description="Reconcile RocketStore custom resources into broker StatefulSets, tune retention live.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                       help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    parser.add_argument("--context", default=os.environ.get("ROCKETSTORE_OPERATOR_CONTEXT"), metavar="NAME",
                        help="kubeconfig context to use (env ROCKETSTORE_OPERATOR_CONTEXT; default: in a pod its "
                             "service account, else the kubeconfig's current context)")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address of the liveness and metrics listeners")
    parser.add_argument("--liveness-port", type=int, default=8080, help="port of /healthz (0 disables)")
    parser.add_argument("--metrics-port", type=int, default=8081, help="port of Prometheus /metrics (0 disables)")
    parser.add_argument("--broker-address", metavar="TEMPLATE",
                        help="how to reach brokers: a template with {pod} {name} {namespace} {ordinal} {port}, "
                             "or NS/POD=host:port;... (default: the pod's headless-service DNS name)")
    parser.add_argument("--broker-image", metavar="IMAGE",
                        help="image of brokers whose RocketStore sets no spec.image (default: "
                             "$ROCKETSTORE_BROKER_IMAGE, else rocketstore/rocketstore:<this version>)")
    parser.add_argument("--allowed-broker-images", metavar="PATTERNS",
                        help="comma-separated shell patterns of further images a RocketStore's spec.image may "
                             "name (default: $ROCKETSTORE_ALLOWED_BROKER_IMAGES; none: only the default "
                             "broker image runs)")
    parser.add_argument("--operator-pod-selector", metavar="LABELS",
                        help="labels of the operator's own pods (k=v,...), which every RocketStore's "
                             "NetworkPolicy lets in (default: none: run outside a pod, the policies name no operator)")
    parser.add_argument("--operator-namespace", metavar="NS",
                        help="namespace of the operator's own pods (default: $POD_NAMESPACE)")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds between observations of pods and brokers (adaptive retention timer)")
    parser.add_argument("--max-concurrent-upgrades", type=_positive, default=1, metavar="N",
                        help="RocketStores without spec.image that roll to a new default broker image at once, "
                             "each until its StatefulSets are rolled out and ready (default: %(default)s)")
    election = parser.add_argument_group(
        "leader election", "run several replicas: one reconciles while it holds a coordination.k8s.io Lease in the "
        "operator's namespace, the others wait to take over (docs/operator.md, High availability)")
    election.add_argument("--leader-elect", action="store_true",
                          help="reconcile only while holding the Lease (default: standalone, the only operator)")
    election.add_argument("--leader-elect-lease", default="rocketstore-operator", metavar="NAME",
                          help="the Lease's name (default: %(default)s)")
    election.add_argument("--leader-elect-identity", metavar="ID",
                          help="this replica's identity in the Lease (default: host name and a random suffix)")
    election.add_argument("--leader-elect-lease-duration", type=float, default=15.0, metavar="S",
                          help="how long a standby waits for a silent leader before taking over (default: %(default)s)")
    election.add_argument("--leader-elect-renew-deadline", type=float, default=10.0, metavar="S",
                          help="a leader that has not renewed for this long exits (default: %(default)s)")
    election.add_argument("--leader-elect-retry-period", type=float, default=2.0, metavar="S",
                          help="seconds between renewals and between a standby's attempts (default: %(default)s)")
    uninstall = parser.add_argument_group(
        "uninstall", "instead of running: what the chart's pre-delete hook does (docs/operator.md, Uninstalling)")
    uninstall.add_argument("--release-finalizers", metavar="DEPLOYMENT",
                           help="scale the operator's Deployment (in --operator-namespace) to 0, wait until no pod "
                                "of --operator-pod-selector is left, remove the finalizer rocketstore.io/operator "
                                "from every RocketStore of the watched namespaces, and exit")
    uninstall.add_argument("--stop-timeout", type=float, default=120.0, metavar="S",
                           help="how long to wait for the operator's pods to stop (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(handler=_run)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _run(args: argparse.Namespace) -> int:
    try:
        from rocketstore.operator.main import OperatorOptions, release_finalizers, run
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in EXTRA_MODULES:
            raise
        print(f"rocketstore operator: the operator needs {e.name}, which is not installed: {EXTRA_INSTALL}",
              file=sys.stderr)
        return 2

    opts = OperatorOptions(
        namespaces=tuple(args.namespace),
        all_namespaces=not args.namespace,
        bind_address=args.bind_address,
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
        broker_address=args.broker_address,
        broker_image=args.broker_image,
        allowed_broker_images=args.allowed_broker_images,
        operator_pod_selector=args.operator_pod_selector,
        operator_namespace=args.operator_namespace,
        interval=args.interval,
        max_concurrent_upgrades=args.max_concurrent_upgrades,
        verbose=args.verbose,
        context=args.context,
        leader_elect=args.leader_elect,
        leader_elect_lease=args.leader_elect_lease,
        leader_elect_identity=args.leader_elect_identity,
        leader_elect_lease_duration=args.leader_elect_lease_duration,
        leader_elect_renew_deadline=args.leader_elect_renew_deadline,
        leader_elect_retry_period=args.leader_elect_retry_period,
    )
    if args.release_finalizers:
        return release_finalizers(opts, args.release_finalizers, args.stop_timeout)
    return run(opts)
