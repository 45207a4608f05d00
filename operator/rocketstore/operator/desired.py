"""Desired state: pure builders from a :class:`~rocketstore.operator.model.Spec` to manifests.

Nothing here calls the API. Every object carries the same labels and a controller owner reference
to its ``RocketStore``, so deleting the RocketStore lets Kubernetes' garbage collector remove them
(PVCs are the exception, see :func:`statefulset`).

Objects for a RocketStore ``NAME`` in namespace ``NS``:

=======================  ==============================================================
``NAME``                 StatefulSet of brokers; volumeClaimTemplate ``store`` (PVC ``store-NAME-<i>``)
``NAME-headless``        headless Service: stable DNS ``NAME-<i>.NAME-headless.NS.svc``
``NAME``                 client Service (remoting 10911, name server 9876, gRPC 8081, HTTP/metrics)
``NAME-config``          ConfigMap with ``broker.conf``
``NAME``                 PodDisruptionBudget, maxUnavailable 1
``NAME-broker``          ServiceAccount of the broker pods (no API access: token not mounted); with
                         ``replication.failover`` Lease also a Role and RoleBinding of that name (get,
                         create, update Leases: :func:`lease_role`, :func:`lease_role_binding`) and the
                         token mounted into the pods, for their Lease elector
``NAME-<i>-external``    with ``spec.externalAccess``: broker ``i``'s NodePort or LoadBalancer Service
                         (and ``NAME-namesrv-external``, the name servers')
``NAME-addresses``       with a LoadBalancer and no ``host``: ConfigMap of the brokers' addresses
``NAME-slave-<k>``       with ``replication.replicasPerGroup`` above 1: StatefulSet of every group's
                         slave ``k`` (brokerId ``k``), PVC ``store-NAME-slave-<k>-<i>``
``NAME-<i>``             with slaves: PodDisruptionBudget of broker group ``i``, all members but one
                         available (replaces ``NAME``)
``NAME``                 with ``spec.networkPolicy``: NetworkPolicy of the store's pods
=======================  ==============================================================

Every master reads the same broker.conf; its ``brokerName`` is its pod name (``NAME-<i>``),
appended by the container's start command, so a pod's identity follows its ordinal.

Broker groups (``spec.replication``): group ``i`` is the master ``NAME-<i>`` and the slaves
``NAME-slave-<k>-<i>``, all with brokerName ``NAME-<i>``. A StatefulSet per slave index, not one
per group nor one for all, because it keeps every name stable whichever count changes: a master
stays ``NAME-<i>`` on PVC ``store-NAME-<i>`` whatever ``replicasPerGroup`` is (raising it adds
StatefulSets, and the masters' pod template does not change, so no master restarts), and adding
groups adds the same ordinal to every StatefulSet. The StatefulSet controller labels each pod with
its ordinal (``apps.kubernetes.io/pod-index``, Kubernetes 1.28+), which is therefore the group:
the per-group PodDisruptionBudgets select on it, and the slaves' topology spread constraint
counts the pods of their own group only (``matchLabelKeys``). A slave reads
``broker-slave-<k>.conf`` (brokerRole SLAVE, brokerId ``k``); its start command appends its
group's brokerName and ``namesrvAddr``, the name server embedded in its master, whose
registration answer carries the master's HA address (so a later role change needs no new pod
template). The masters' StatefulSet rolls under a ``partition`` the operator lowers group by
group once the slaves run the new template and are in sync (:mod:`rocketstore.operator.rollout`).

Automatic failover (``replication.failover.mode: Lease``): every member of a group is a candidate,
so no member's broker.conf names a role. Member ``k`` of a group (``k`` 0: the masters'
StatefulSet, which is only where each group's first master starts) gets brokerId ``k + 1``, its
stable replica id: the elector needs an id above 0 that never changes with the role (brokerId 0
means "the master" in RocketMQ and is taken by whoever wins), and the index of its StatefulSet is
the one identity a member keeps across restarts and reschedules. The same rule for every
StatefulSet keeps the names and the slave StatefulSets as they are, so switching failover on or
off restarts the pods (new broker.conf) but moves no data.

``spec.acl`` / ``spec.tls`` Secrets are mounted whole (never with ``subPath``, whose files kubelet
never updates) at :data:`ACL_DIR` / :data:`TLS_DIR`, and broker.conf points ``rocketmq.acl.plain.file``
and the ``tls.server.*`` paths into them. Kubelet swaps a Secret volume's ``..data`` symlink when
the Secret changes, and the broker reloads those files itself, so a new ACL or a renewed
certificate needs no restart: nothing in the pod template depends on the Secret's contents.
Referencing another Secret or key changes the template (volume or broker.conf) and rolls the pods.

External access by LoadBalancer: a broker must advertise its reachable address (``brokerIP1``)
from its start, and a load balancer's address exists only once the cloud has provisioned it
(the Service's ``status.loadBalancer.ingress``). The operator observes the Services and writes
each address into ``NAME-addresses`` (key: the pod name), mounted whole into the pods at
:data:`ADDRESS_DIR`; an init container waits until its pod's key is there (kubelet refreshes a
mounted ConfigMap in place), then the broker starts advertising it. Waiting in an init container,
not in the broker's start command, keeps the liveness probe from killing a broker whose balancer
takes minutes. The peers' addresses reach running brokers live, in ``clusterPeers``.

Broker pods meet the "restricted" Pod Security Standard (non-root as the image's user, seccomp
RuntimeDefault, no capabilities, no privilege escalation, read-only root filesystem with emptyDirs
where the broker writes besides its volume). ``spec.podTemplate`` and ``spec.scheduling`` add to
the pod template; the operator's own labels, annotations and env are applied over them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Final

from rocketstore.operator import FIELD_MANAGER, GROUP, KIND, VERSION
from rocketstore.operator.model import LIVE_KEYS, Acl, Auth, Spec, Tls, format_quantity

__all__ = [
    "ACL_DIR",
    "ADDRESS_DIR",
    "AUTH_DIR",
    "GRPC_PORT",
    "HTTP_PORT_NAME",
    "LISTEN_PORT",
    "NAMESRV_PORT",
    "PEER_KEYS",
    "STORE_DIR",
    "TLS_DIR",
    "Owner",
    "Plan",
    "addresses_configmap",
    "addresses_name",
    "all_objects",
    "broker_conf",
    "broker_conf_text",
    "client_service",
    "cluster_peers",
    "config_hash",
    "configmap",
    "default_broker_image",
    "external_service_name",
    "external_services",
    "failover_properties",
    "group_pdbs",
    "headless_service",
    "ingress_address",
    "labels",
    "lease_role",
    "lease_role_binding",
    "listen_port",
    "load_balancer_addresses",
    "namesrv_external_name",
    "namesrv_peers",
    "network_policy",
    "pdb",
    "pod_name",
    "pvc_name",
    "replica_id",
    "service_account",
    "slave_conf_name",
    "slave_pod_name",
    "slave_statefulset",
    "slave_statefulset_name",
    "stale_names",
    "statefulset",
]

#: broker.conf keys naming the store's other brokers, pushed live (scale-up restarts nobody)
PEER_KEYS: Final = frozenset({"clusterPeers", "namesrvPeers"})
LISTEN_PORT: Final = 10911
NAMESRV_PORT: Final = 9876
#: RocketMQ 5.x clients' gRPC port (the proxy's default; every broker is its own proxy)
GRPC_PORT: Final = 8081
HTTP_PORT_NAME: Final = "http"
STORE_DIR: Final = "/home/rocketmq/store"
CONF_DIR: Final = "/etc/rocketstore"
RUN_DIR: Final = "/var/run/rocketstore"
VOLUME_NAME: Final = "store"
#: Secret mounts: beside CONF_DIR, not inside it (a mount point inside the read-only ConfigMap
#: volume could not be created)
ACL_DIR: Final = "/etc/rocketstore-acl"
TLS_DIR: Final = "/etc/rocketstore-tls"
#: spec.auth's inner-client (``inner/``) and initial-user (``init/``) Secrets, read by the start command
AUTH_DIR: Final = "/etc/rocketstore-auth"
#: the ConfigMap of the brokers' load balancer addresses (a file per pod name)
ADDRESS_DIR: Final = "/etc/rocketstore-addresses"
#: Secret files readable by the broker's group (fsGroup) only: the TLS key is private
SECRET_MODE: Final = 0o440
CONFIG_HASH_ANNOTATION: Final = f"{GROUP}/config-hash"
#: the slave index ``k`` of a slave pod (part of its StatefulSet's selector; masters have none,
#: so the masters' selector and template stay what they were before broker groups)
SLAVE_LABEL: Final = f"{GROUP}/slave"
#: the brokerRole of a pod whose role the operator writes (SLAVE, SYNC_MASTER; ASYNC_MASTER is the
#: broker's default and unlabelled, so adding slaves leaves masters' pods alone): the chart's
#: PodMonitor copies it to the ``broker_role`` label its alerts tell SYNC_MASTER groups apart by
ROLE_LABEL: Final = f"{GROUP}/broker-role"
#: set by the StatefulSet controller on every pod (Kubernetes 1.28+): its ordinal, i.e. its group
POD_INDEX_LABEL: Final = "apps.kubernetes.io/pod-index"
#: Scratch space for the broker and Python's tempfile: the root filesystem is read-only
TMP_DIR: Final = "/tmp"
#: The image's user (Dockerfile: useradd --uid 10001, whose user group gets the same id)
BROKER_UID: Final = 10001
#: what a broker pod is given to stop beyond a graceful stop's wait: a hand-over, the flush, the close
STOP_GRACE_S: Final = 60
#: a Lease failover member's graceful stop: as long as the Java clients' default route poll
DEFAULT_SHUTDOWN_WAIT_S: Final = 30
IMAGE_REPOSITORY: Final = "rocketstore/rocketstore"

#: Container resources when spec.resources is empty. The broker is one Python process: one core
#: keeps up with a busy broker's remoting, dispatch and flush threads (the GIL lets it use about
#: one), so the request is half a core and no CPU limit (a limit throttles latency, it protects
#: nothing). Memory: the process itself stays in the low hundreds of MiB; the rest is page cache
#: of the mapped CommitLog and ConsumeQueue files, charged to the pod's cgroup and reclaimable.
#: 1Gi requested keeps the active segment cached; the 2Gi limit leaves room for a reader catching
#: up on an older segment before the kernel has to evict.
DEFAULT_RESOURCES: Final[Mapping[str, Mapping[str, str]]] = {
    "requests": {"cpu": "500m", "memory": "1Gi"},
    "limits": {"memory": "2Gi"},
}


def default_broker_image() -> str:
    """The broker image of this operator's own release: upgrading the operator moves every
    RocketStore that does not pin ``spec.image``."""
    return f"{IMAGE_REPOSITORY}:{version('rocketstore')}"


@dataclass(frozen=True)
class Owner:
    """The RocketStore the objects belong to."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class Plan:
    """What to build: the spec plus the values the reconciler settled on.

    ``replicas`` and ``volume_bytes`` differ from what the spec asks for when a change is refused
    (scale down without ``scaling.allowScaleDown``, a smaller volume): the objects then keep the
    current values.
    """

    owner: Owner
    spec: Spec
    replicas: int
    volume_bytes: int
    #: the image of brokers whose spec names none (the operator's --broker-image)
    default_image: str = field(default_factory=default_broker_image)
    #: load balancer addresses assigned so far, by broker ordinal (observed on the Services)
    external_addresses: Mapping[int, str] = field(default_factory=dict)
    #: with slaves: masters of this ordinal and above may take a new pod template
    #: (:func:`rocketstore.operator.rollout.master_partition`)
    master_partition: int = 0
    #: the operator's own pods as a NetworkPolicyPeer (namespaceSelector + podSelector), which
    #: every NetworkPolicy allows; None when the operator does not know them (not run in a pod)
    operator_peer: Mapping[str, Any] | None = None


def labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "rocketstore",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "broker",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
    }


def selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "rocketstore", "app.kubernetes.io/instance": name}


def selector_text(name: str) -> str:
    """:func:`selector` as a label selector string (the scale subresource's ``status.selector``)."""
    return ",".join(f"{k}={v}" for k, v in selector(name).items())


def headless_name(name: str) -> str:
    return f"{name}-headless"


def pod_name(name: str, ordinal: int) -> str:
    return f"{name}-{ordinal}"


def pvc_name(name: str, ordinal: int) -> str:
    """The PVC of pod ``ordinal`` of StatefulSet ``name`` (a slave StatefulSet's name for slaves)."""
    return f"{VOLUME_NAME}-{name}-{ordinal}"


def slave_statefulset_name(name: str, slave: int) -> str:
    return f"{name}-slave-{slave}"


def slave_pod_name(name: str, slave: int, ordinal: int) -> str:
    """Slave ``slave`` (its brokerId) of broker group ``ordinal``."""
    return pod_name(slave_statefulset_name(name, slave), ordinal)


def slave_conf_name(slave: int) -> str:
    return f"broker-slave-{slave}.conf"


def pod_dns(name: str, namespace: str, ordinal: int, slave: int = 0) -> str:
    """The stable DNS name of broker ``ordinal`` (its slave ``slave``): every pod of the store is
    under the store's headless Service."""
    pod = slave_pod_name(name, slave, ordinal) if slave else pod_name(name, ordinal)
    return f"{pod}.{headless_name(name)}.{namespace}.svc"


def external_service_name(name: str, ordinal: int) -> str:
    return f"{pod_name(name, ordinal)}-external"


def namesrv_external_name(name: str) -> str:
    return f"{name}-namesrv-external"


def addresses_name(name: str) -> str:
    return f"{name}-addresses"


def _meta(owner: Owner, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner.name),
        "ownerReferences": [owner.reference()],
    }


def listen_port(spec: Spec, ordinal: int, slave: int = 0) -> int:
    """The remoting port broker ``ordinal`` (its slave ``slave``) listens on: per broker with
    external access."""
    return LISTEN_PORT if spec.external_access is None else spec.external_access.listen_port(ordinal, slave)


def cluster_peers(owner: Owner, replicas: int, spec: Spec, hosts: Mapping[int, str] | None = None) -> str:
    """``clusterPeers``: every broker as brokerName@address (a broker skips itself), which the
    embedded name servers put into routes: the stable DNS name, or with external access the
    address clients outside reach, ``externalAccess.host`` or the observed one (``hosts``: the
    node of the broker's pod, or its load balancer; DNS until the pod is placed or the balancer
    provisioned)."""
    peers = []
    ext = spec.external_access
    for i in range(replicas):
        host = pod_dns(owner.name, owner.namespace, i)
        if ext is not None:
            host = ext.host or (hosts or {}).get(i) or host
        peers.append(f"{pod_name(owner.name, i)}@{host}:{listen_port(spec, i)}")
    return ",".join(peers)


def namesrv_peers(owner: Owner, replicas: int, spec: Spec) -> str:
    """``namesrvPeers``: the embedded name server of every pod of the store, masters and slaves,
    at its stable DNS name (each broker registers with all of them, so every name server lists
    each group's live members: a group whose master is down, with its slaves). The list is the
    same for every pod (one broker.conf per role): a name server keeps no registration of its
    own broker."""
    return ";".join(f"{pod_dns(owner.name, owner.namespace, i, k)}:{NAMESRV_PORT}"
                    for k in range(spec.replication.replicas_per_group) for i in range(replicas))


def broker_conf(plan: Plan, slave: int = 0) -> dict[str, str]:
    """broker.conf as ordered key/values (RocketMQ keys plus RocketStore's extensions): the
    masters' (``slave`` 0) or that of every group's slave ``slave``; with Lease failover, member
    ``slave`` of every group, which is a candidate (:func:`failover_properties`).

    A master's brokerRole is written only for SYNC_MASTER: ASYNC_MASTER is the broker's default,
    so raising replicasPerGroup under ASYNC_MASTER leaves the masters' configuration, and so their
    pods, as they are. haListenPort stays the broker's default (listenPort + 1, as RocketMQ
    4.9.7's BrokerStartup sets it) for the same reason.
    """
    spec, owner = plan.spec, plan.owner
    peers = cluster_peers(owner, plan.replicas, spec)
    role = _written_role(spec, slave)
    failover = spec.replication.failover
    conf: dict[str, str] = {
        "brokerClusterName": owner.name,
        "brokerId": str(replica_id(slave) if failover.lease else slave),
        **({} if role is None else {"brokerRole": role}),
        "listenPort": str(LISTEN_PORT),
        "namesrvListenPort": str(NAMESRV_PORT),
        "grpcListenPort": str(GRPC_PORT),
        # with external access every broker's gRPC port is published apart (external_services)
        **({} if spec.external_access is None
           else {"grpcAdvertisedPortOffset": str(spec.external_access.grpc_offset)}),
        "httpListenPort": str(spec.metrics.port),
        "storePathRootDir": STORE_DIR,
        "mappedFileSizeCommitLog": str(spec.commit_log.segment_size),
        "flushDiskType": spec.flush_disk_type,
        **spec.retention.broker_properties(),
        **spec.metrics.broker_properties(),
        "clusterPeers": peers,
        "namesrvPeers": namesrv_peers(owner, plan.replicas, spec),
        # a slave serves pulls (consumers read on while their master is down, or far behind);
        # without it a 4.9.7 slave answers every pull PULL_RETRY_IMMEDIATELY. brokerConfig may say otherwise
        **({"slaveReadEnable": "true"} if slave or failover.lease else {}),
        **(failover_properties(spec) if failover.lease else {}),
    }
    if spec.acl is not None:
        conf.update(acl_properties(spec.acl))
    if spec.auth is not None:
        conf.update(auth_properties(spec.auth))
    if spec.tls is not None:
        conf.update(tls_properties(spec.tls))
    for key in sorted(spec.broker_config):
        conf[key] = spec.broker_config[key]
    return conf


def _written_role(spec: Spec, slave: int) -> str | None:
    """The brokerRole a member's broker.conf (and its pod label) states; None with Lease failover,
    where the group's Lease, not the configuration, decides who is master."""
    if spec.replication.failover.lease:
        return None
    return "SLAVE" if slave else "SYNC_MASTER" if spec.replication.mode == "SYNC_MASTER" else None


def replica_id(member: int) -> int:
    """The stable replica id (brokerId) of member ``member`` of a group under Lease failover: the
    masters' StatefulSet is 1, slave StatefulSet ``k`` is ``k + 1`` (above 0, as the elector needs)."""
    return member + 1


def failover_properties(spec: Spec) -> dict[str, str]:
    """broker.conf of a Lease failover candidate: controller mode with the Lease elector on the
    pod's namespace (``POD_NAMESPACE``) and its timings, and acknowledgement only once every
    member of the SyncStateSet holds a message, since any of them may be the next master."""
    failover = spec.replication.failover
    return {
        "enableControllerMode": "true",
        "controllerLeaseEnable": "true",
        "controllerLeaseDurationMills": str(failover.lease_duration_ms),
        "controllerLeaseRenewIntervalMills": str(failover.renew_interval_ms),
        "controllerLeaseMarginMills": str(failover.margin_ms),
        "allAckInSyncStateSet": "true",
        # a stopping member (a rolling upgrade's) hands the Lease over, leaves the routes and then
        # answers SERVICE_NOT_AVAILABLE for the wait: clients fail fast and move to the successor at
        # their next route poll (30 s by default in both Java clients), instead of each send waiting
        # for its timeout on a deleted pod's address. brokerConfig may change the wait
        "enableShutdownGracefully": "true",
        "shutdownWaitTimeSeconds": str(DEFAULT_SHUTDOWN_WAIT_S),
    }


def termination_grace_seconds(conf: Mapping[str, str]) -> int:
    """A broker pod's terminationGracePeriodSeconds: STOP_GRACE_S to hand over, flush and close,
    plus the graceful stop's wait when ``enableShutdownGracefully`` is on (the broker's default wait
    is 30 s), so the kubelet's SIGKILL never cuts the wait short."""
    if conf.get("enableShutdownGracefully", "false").strip().lower() != "true":  # as the broker parses it
        return STOP_GRACE_S
    return STOP_GRACE_S + int(conf.get("shutdownWaitTimeSeconds", str(DEFAULT_SHUTDOWN_WAIT_S)))


def acl_properties(acl: Acl) -> dict[str, str]:
    """broker.conf keys that make the broker enforce the mounted plain_acl.yml (and follow its changes)."""
    return {"aclEnable": "true", "rocketmq.acl.plain.file": f"{ACL_DIR}/{acl.key}"}


def auth_properties(auth: Auth) -> dict[str, str]:
    """RocketMQ 5.3's switches; the credentials are not here (the ConfigMap is readable by anyone who
    may read the namespace's ConfigMaps) but appended at pod start from the mounted Secrets
    (:func:`auth_start_lines`)."""
    return {"authenticationEnabled": str(auth.authentication).lower(),
            "authorizationEnabled": str(auth.authorization).lower()}


def auth_start_lines(auth: Auth) -> str:
    """Shell appending ``innerClientAuthenticationCredentials`` (and ``initAuthenticationUser``) to
    the pod's own broker.conf, read from the Secret volumes at start. The values go into JSON
    unescaped: a password with ``"`` or ``\\`` makes the broker refuse the key at start."""
    inner = auth.inner_client
    lines = ('printf \'innerClientAuthenticationCredentials={"accessKey":"%s","secretKey":"%s"}\\n\' '
             f'"$(cat {AUTH_DIR}/inner/{inner.access_key_key})" "$(cat {AUTH_DIR}/inner/{inner.secret_key_key})" '
             '>> "$RUN_DIR/broker.conf"; ')
    init = auth.initial_user
    if init is not None:
        lines += ('printf \'initAuthenticationUser={"username":"%s","password":"%s"}\\n\' '
                  f'"$(cat {AUTH_DIR}/init/{init.access_key_key})" "$(cat {AUTH_DIR}/init/{init.secret_key_key})" '
                  '>> "$RUN_DIR/broker.conf"; ')
    return lines


def tls_properties(tls: Tls) -> dict[str, str]:
    """RocketMQ's ``tls.server.*`` settings, pointing at the mounted Secret's files."""
    props = {
        "tls.server.mode": tls.mode,
        "tls.server.certPath": f"{TLS_DIR}/{tls.cert_key}",
        "tls.server.keyPath": f"{TLS_DIR}/{tls.key_key}",
    }
    if tls.trust_cert_key is not None:
        props["tls.server.trustCertPath"] = f"{TLS_DIR}/{tls.trust_cert_key}"
    props["tls.server.need.client.auth"] = tls.client_auth
    return props


def _secret_volumes(spec: Spec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) of the ACL and TLS Secrets: whole-Secret mounts, so kubelet updates them."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for name, secret, path in (("acl", spec.acl, ACL_DIR), ("tls", spec.tls, TLS_DIR)):
        if secret is None:
            continue
        volumes.append({"name": name, "secret": {"secretName": secret.secret_name, "defaultMode": SECRET_MODE}})
        mounts.append({"name": name, "mountPath": path, "readOnly": True})
    auth = spec.auth
    if auth is not None:
        for sub, creds in (("inner", auth.inner_client), ("init", auth.initial_user)):
            if creds is None:
                continue
            volumes.append({"name": f"auth-{sub}", "secret": {"secretName": creds.secret_name,
                                                              "defaultMode": SECRET_MODE}})
            mounts.append({"name": f"auth-{sub}", "mountPath": f"{AUTH_DIR}/{sub}", "readOnly": True})
    return volumes, mounts


def broker_conf_text(conf: Mapping[str, str]) -> str:
    head = "# Generated by rocketstore-operator; brokerName is appended per pod at start.\n"
    return head + "".join(f"{k}={v}\n" for k, v in conf.items())


def _slave_indexes(plan: Plan) -> range:
    return range(1, plan.spec.replication.replicas_per_group)


def config_hash(conf: Mapping[str, str]) -> str:
    """Hash of the keys that need a restart.

    Retention keys, ``metricsPerQueueEnable``, ``clusterPeers`` and ``namesrvPeers`` are pushed to
    running brokers (UPDATE_BROKER_CONFIG), so changing them, or scaling up, never rolls the pods.
    """
    text = "".join(f"{k}={v}\n" for k, v in conf.items() if k not in LIVE_KEYS and k not in PEER_KEYS)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def configmap(plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan.owner, f"{plan.owner.name}-config"),
        "data": {"broker.conf": broker_conf_text(broker_conf(plan)),
                 **{slave_conf_name(k): broker_conf_text(broker_conf(plan, k)) for k in _slave_indexes(plan)}},
    }


def _ports(plan: Plan) -> list[dict[str, Any]]:
    # with external access the remoting port differs per broker: the per-broker Services carry it
    remoting = [] if plan.spec.external_access else [
        {"name": "remoting", "port": LISTEN_PORT, "targetPort": "remoting", "protocol": "TCP"}]
    return [
        *remoting,
        {"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv", "protocol": "TCP"},
        {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
        {"name": HTTP_PORT_NAME, "port": plan.spec.metrics.port, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"},
    ]


def external_services(plan: Plan) -> list[dict[str, Any]]:
    """With external access: a Service per broker on its own port (Service port = listen port =
    the port it advertises; with NodePort the node port too) and its own gRPC port (Service and
    node port ``grpcBasePort`` + the same offset, to the pod's 8081: the broker advertises it by
    ``grpcAdvertisedPortOffset``, :class:`~rocketstore.operator.model.ExternalAccess`), and one
    over every broker's name server (node port ``namesrvNodePort``, or port 9876 of its load
    balancer). A load balancer's node ports are left to Kubernetes: whether the cloud routes
    through them is its business."""
    ext = plan.spec.external_access
    if ext is None:
        return []
    name = plan.owner.name
    services: list[dict[str, Any]] = []
    # the masters, then each slave index's (NodePort only): slave k of group i on basePort + 64 k + i
    for slave in range(plan.spec.replication.replicas_per_group):
        sts_name = slave_statefulset_name(name, slave) if slave else name
        for i in range(plan.replicas):
            port, grpc_port = ext.listen_port(i, slave), ext.grpc_port(i, slave)
            remoting: dict[str, Any] = {"name": "remoting", "port": port, "targetPort": port, "protocol": "TCP"}
            grpc: dict[str, Any] = {"name": "grpc", "port": grpc_port, "targetPort": "grpc", "protocol": "TCP"}
            if not ext.load_balancer:
                remoting["nodePort"] = port
                grpc["nodePort"] = grpc_port
            services.append({
                "apiVersion": "v1", "kind": "Service",
                "metadata": _meta(plan.owner, external_service_name(sts_name, i)),
                "spec": {"type": ext.type,
                         "selector": {**selector(name), "statefulset.kubernetes.io/pod-name": pod_name(sts_name, i)},
                         "ports": [remoting, grpc]},
            })
    namesrv: dict[str, Any] = {"name": "namesrv", "port": NAMESRV_PORT, "targetPort": "namesrv", "protocol": "TCP"}
    if not ext.load_balancer:
        namesrv["nodePort"] = ext.namesrv_node_port
    services.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(plan.owner, namesrv_external_name(name)),
        "spec": {"type": ext.type, "selector": selector(name), "ports": [namesrv]},
    })
    return services


def ingress_address(service: Mapping[str, Any]) -> str | None:
    """The address a cloud assigned to a LoadBalancer Service (``status.loadBalancer.ingress``):
    its IP, else its hostname (some clouds, AWS's among them, give a DNS name only); None while
    pending."""
    for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or ():
        address = ingress.get("ip") or ingress.get("hostname")
        if address:
            return str(address)
    return None


def load_balancer_addresses(owner: Owner, replicas: int, services: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """Broker ordinal -> its load balancer's address, for the brokers whose Service has one."""
    by_name = {s.get("metadata", {}).get("name"): s for s in services}
    found = {i: ingress_address(by_name.get(external_service_name(owner.name, i), {})) for i in range(replicas)}
    return {i: address for i, address in found.items() if address}


def addresses_configmap(owner: Owner, replicas: int, addresses: Mapping[int, str]) -> dict[str, Any]:
    """``NAME-addresses``: each broker's load balancer address under its pod name, once known.

    Read by the pods' init container (which waits for its key) and start command (brokerIP1).
    Rewritten by the operator as addresses appear; nothing in the pod template depends on it.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, addresses_name(owner.name)),
        "data": {pod_name(owner.name, i): addresses[i] for i in sorted(addresses) if i < replicas},
    }


def _controlled_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    return any(ref.get("controller") and ref.get("uid") == owner.uid
               for ref in obj.get("metadata", {}).get("ownerReferences") or ())


def stale_names(owner: Owner, desired: Iterable[Mapping[str, Any]], kind: str,
                existing: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the ``existing`` objects of ``kind`` (a list's items carry no kind) that this
    RocketStore controls, by its controller owner reference (its uid, not a name or a label), and
    that ``desired`` no longer has: the external Services of brokers scaled away or of external
    access switched off, an unused addresses ConfigMap. Anyone else's objects are never named."""
    wanted = {o["metadata"]["name"] for o in desired if o["kind"] == kind}
    return sorted(str(o["metadata"]["name"]) for o in existing
                  if _controlled_by(o, owner) and o["metadata"]["name"] not in wanted)


def headless_service(plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(plan.owner, headless_name(plan.owner.name)),
        "spec": {
            "clusterIP": "None",
            # peers must resolve each other while starting, before /readyz passes
            "publishNotReadyAddresses": True,
            "selector": selector(plan.owner.name),
            "ports": _ports(plan),
        },
    }


def client_service(plan: Plan) -> dict[str, Any]:
    meta = _meta(plan.owner, plan.owner.name)
    if plan.spec.metrics.enabled:
        meta["annotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(plan.spec.metrics.port),
            "prometheus.io/path": "/metrics",
        }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"type": "ClusterIP", "selector": selector(plan.owner.name), "ports": _ports(plan)},
    }


def broker_service_account_name(name: str) -> str:
    return f"{name}-broker"


def service_account(plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(plan.owner, broker_service_account_name(plan.owner.name)),
        "automountServiceAccountToken": False,
    }


def lease_role(owner: Owner) -> dict[str, Any]:
    """What the broker pods may do with the API: get, create and update the Leases of their
    namespace, each group's source of truth for mastership (rocketstore.broker.lease_elector).
    Nothing else: no list or watch (a broker reads its own group's Lease by name), no delete."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(owner, broker_service_account_name(owner.name)),
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "create", "update"]}],
    }


def lease_role_binding(owner: Owner) -> dict[str, Any]:
    """:func:`lease_role` granted to the broker pods' ServiceAccount."""
    name = broker_service_account_name(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(owner, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def pdb(plan: Plan) -> dict[str, Any]:
    """One broker of the store down at a time (brokers without slaves: each is its own group)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(plan.owner, plan.owner.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(plan.owner.name)}},
    }


def group_pdbs(plan: Plan) -> list[dict[str, Any]]:
    """With slaves: one member of each group down at a time, so a drain never takes a group's
    master and its slave together, while groups drain in parallel. A group's pods are those of
    its ordinal (``apps.kubernetes.io/pod-index``) in every StatefulSet of the store.

    Written as ``minAvailable`` members minus one, not ``maxUnavailable: 1``: with
    maxUnavailable the disruption controller expects the full replicas of every StatefulSet a
    selected pod belongs to (here all groups' pods), so it would never allow an eviction; with an
    integer minAvailable it counts the pods the budget selects."""
    name = plan.owner.name
    return [{
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(plan.owner, pod_name(name, i)),
        "spec": {"minAvailable": plan.spec.replication.replicas_per_group - 1,
                 "selector": {"matchLabels": {**selector(name), POD_INDEX_LABEL: str(i)}}},
    } for i in range(plan.replicas)]


_START = (
    'set -e; cp "$CONF_DIR/broker.conf" "$RUN_DIR/broker.conf"; '
    'printf "brokerName=%s\\n" "$POD_NAME" >> "$RUN_DIR/broker.conf"; '
    'exec rocketstore broker -c "$RUN_DIR/broker.conf"'
)
# with external access: the broker's own port (basePort + the pod's ordinal) and the address it
# advertises (EXTERNAL_HOST, else its node's, HOST_IP, or its load balancer's, from the file the
# init container waited for: an assignment, so that a missing file stops the start); later keys
# win in broker.conf
_START_EXTERNAL = (
    'set -e; ADDRESS="${EXTERNAL_HOST:-@FALLBACK@}"; cp "$CONF_DIR/broker.conf" "$RUN_DIR/broker.conf"; '
    'printf "brokerName=%s\\nlistenPort=%s\\nbrokerIP1=%s\\n" "$POD_NAME" '
    '"$((EXTERNAL_BASE_PORT + ${POD_NAME##*-}))" "$ADDRESS" >> "$RUN_DIR/broker.conf"; '
    'exec rocketstore broker -c "$RUN_DIR/broker.conf"'
)
_NODE_ADDRESS = "$HOST_IP"
_BALANCER_ADDRESS = '$(cat "$ADDRESS_DIR/$POD_NAME")'
# the init container of a broker behind a load balancer: until the operator has written the
# balancer's address (kubelet refreshes the mounted ConfigMap in place)
_WAIT_FOR_ADDRESS = (
    'echo "waiting for the load balancer address of $POD_NAME in $ADDRESS_DIR"; '
    'until [ -s "$ADDRESS_DIR/$POD_NAME" ]; do sleep 2; done; '
    'echo "advertising $(cat "$ADDRESS_DIR/$POD_NAME")"'
)


# a slave: its own broker.conf (brokerRole SLAVE, its brokerId), then its group's brokerName (the
# master's pod name: NAME-<its ordinal>) and the name server embedded in that master, which
# answers its registration with the master's HA address; with external access (node ports) also
# its own port (basePort + 64 k + its ordinal) and the address it advertises, as a master does
_START_SLAVE = (
    'set -e; GROUP="@NAME@-${POD_NAME##*-}"; cp "$CONF_DIR/@CONF@" "$RUN_DIR/broker.conf"; '
    'printf "brokerName=%s\\nnamesrvAddr=%s.@HEADLESS@.%s.svc:@NAMESRV_PORT@\\n@EXTERNAL_KEYS@" '
    '"$GROUP" "$GROUP" "$POD_NAMESPACE"@EXTERNAL_VALUES@ >> "$RUN_DIR/broker.conf"; '
    'exec rocketstore broker -c "$RUN_DIR/broker.conf"'
)
_SLAVE_EXTERNAL_KEYS = "listenPort=%s\\nbrokerIP1=%s\\n"
_SLAVE_EXTERNAL_VALUES = ' "$((EXTERNAL_BASE_PORT + @OFFSET@ + ${POD_NAME##*-}))" "${EXTERNAL_HOST:-$HOST_IP}"'


def _start_command(spec: Spec, name: str, slave: int) -> str:
    command = _start_template(spec, name, slave)
    if spec.auth is None:
        return command
    return command.replace("exec rocketstore broker", auth_start_lines(spec.auth) + "exec rocketstore broker")


def _start_template(spec: Spec, name: str, slave: int) -> str:
    ext = spec.external_access
    if slave:
        offset = 0 if ext is None else ext.listen_port(0, slave) - ext.base_port
        return (_START_SLAVE.replace("@NAME@", name).replace("@CONF@", slave_conf_name(slave))
                .replace("@HEADLESS@", headless_name(name)).replace("@NAMESRV_PORT@", str(NAMESRV_PORT))
                .replace("@EXTERNAL_KEYS@", "" if ext is None else _SLAVE_EXTERNAL_KEYS)
                .replace("@EXTERNAL_VALUES@", "" if ext is None else _SLAVE_EXTERNAL_VALUES)
                .replace("@OFFSET@", str(offset)))
    if ext is None:
        return _START
    return _START_EXTERNAL.replace("@FALLBACK@", _BALANCER_ADDRESS if ext.load_balancer else _NODE_ADDRESS)


def _external_env(spec: Spec) -> list[dict[str, Any]]:
    ext = spec.external_access
    if ext is None:
        return []
    env: list[dict[str, Any]] = [{"name": "EXTERNAL_BASE_PORT", "value": str(ext.base_port)}]
    if not ext.load_balancer:
        env.insert(0, {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})
    if ext.host:
        env.append({"name": "EXTERNAL_HOST", "value": ext.host})
    if ext.waits_for_address:
        env.append({"name": "ADDRESS_DIR", "value": ADDRESS_DIR})
    return env


def _wait_for_address(container: Mapping[str, Any]) -> dict[str, Any]:
    """The init container of a broker behind a load balancer: the broker's image, user, security
    context and resources (so the pod's effective request stays the broker's), nothing else."""
    return {
        "name": "wait-for-address",
        "image": container["image"],
        "imagePullPolicy": container["imagePullPolicy"],
        "command": ["sh", "-c", _WAIT_FOR_ADDRESS],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "ADDRESS_DIR", "value": ADDRESS_DIR},
        ],
        "volumeMounts": [{"name": "addresses", "mountPath": ADDRESS_DIR, "readOnly": True}],
        "resources": container["resources"],
        "securityContext": container["securityContext"],
    }


def _affinity(plan: Plan) -> dict[str, Any]:
    if plan.spec.scheduling.affinity is not None:
        return dict(plan.spec.scheduling.affinity)
    # spread brokers over nodes when possible, never block scheduling
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": selector(plan.owner.name)},
                },
            }]
        }
    }


def _group_spread(name: str) -> dict[str, Any]:
    """A slave prefers nodes without another member of its group (its master included): the
    label selector takes the store's pods, ``matchLabelKeys`` narrows it to the slave's own
    ordinal. Preferred, not required, like the brokers' anti-affinity: a group on one node still
    serves, and a slave bound to a local volume could not move anyway."""
    return {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector(name)},
        "matchLabelKeys": [POD_INDEX_LABEL],
    }


def statefulset(plan: Plan) -> dict[str, Any]:
    """The masters (every broker without slaves). Rolling updates go one pod at a time, each
    waiting for ``/readyz``; with slaves, only down to ``plan.master_partition``.

    PVCs outlive the StatefulSet unless ``storage.deleteClaim`` is true
    (``persistentVolumeClaimRetentionPolicy``); scaling down never deletes a PVC.
    """
    return _broker_statefulset(plan, 0)


def slave_statefulset(plan: Plan, slave: int) -> dict[str, Any]:
    """Every group's slave ``slave`` (brokerId ``slave``), on PVCs of its own: a new one starts
    empty and copies its master's CommitLog over HA."""
    return _broker_statefulset(plan, slave)


def _broker_statefulset(plan: Plan, slave: int) -> dict[str, Any]:
    spec, owner = plan.spec, plan.owner
    conf = broker_conf(plan, slave)
    sts_name = slave_statefulset_name(owner.name, slave) if slave else owner.name
    # the selector is immutable: a slave StatefulSet's has its index, the masters' what it always had
    slave_labels = {SLAVE_LABEL: str(slave)} if slave else {}
    role = _written_role(spec, slave)
    pod_labels = {**slave_labels, **({} if role is None else {ROLE_LABEL: role})}
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": format_quantity(plan.volume_bytes)}},
    }
    if spec.storage.storage_class_name is not None:
        claim_spec["storageClassName"] = spec.storage.storage_class_name
    container: dict[str, Any] = {
        "name": "broker",
        "image": spec.image or plan.default_image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["sh", "-c", _start_command(spec, owner.name, slave)],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "CONF_DIR", "value": CONF_DIR},
            {"name": "RUN_DIR", "value": RUN_DIR},
            *_external_env(spec),
            *(dict(var) for var in spec.pod_template.env),
        ],
        "ports": [
            # one template for every pod: with external access each listens on its own port
            *([] if spec.external_access else [{"name": "remoting", "containerPort": LISTEN_PORT, "protocol": "TCP"}]),
            {"name": "namesrv", "containerPort": NAMESRV_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": HTTP_PORT_NAME, "containerPort": spec.metrics.port, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": HTTP_PORT_NAME},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": HTTP_PORT_NAME},
            "initialDelaySeconds": 30,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "volumeMounts": [
            {"name": VOLUME_NAME, "mountPath": STORE_DIR},
            {"name": "config", "mountPath": CONF_DIR, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR},
            {"name": "tmp", "mountPath": TMP_DIR},
        ],
        "resources": {k: dict(v) for k, v in (spec.resources or DEFAULT_RESOURCES).items()},
        # the "restricted" Pod Security Standard; the broker writes only to its volume, RUN_DIR
        # (broker.conf with its brokerName) and TMP_DIR, all mounts
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    secret_volumes, secret_mounts = _secret_volumes(spec)
    container["volumeMounts"].extend(secret_mounts)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": broker_service_account_name(owner.name),
        # the Lease elector's only credentials; without failover the brokers never call the API
        "automountServiceAccountToken": spec.replication.failover.lease,
        "terminationGracePeriodSeconds": termination_grace_seconds(conf),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": BROKER_UID,
            "runAsGroup": BROKER_UID,
            "fsGroup": BROKER_UID,
            # a volume already owned by fsGroup is not walked again at every start
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": _affinity(plan),
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": f"{owner.name}-config"}},
            {"name": "run", "emptyDir": {"sizeLimit": "16Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
            *secret_volumes,
        ],
    }
    sched = spec.scheduling
    if spec.external_access is not None and spec.external_access.waits_for_address:
        container["volumeMounts"].append({"name": "addresses", "mountPath": ADDRESS_DIR, "readOnly": True})
        pod_spec["initContainers"] = [_wait_for_address(container)]
        # mounted whole (no subPath): kubelet updates it in place as the operator adds addresses
        pod_spec["volumes"].append({"name": "addresses", "configMap": {"name": addresses_name(owner.name)}})
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if sched.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in sched.tolerations]
    if sched.node_selector:
        pod_spec["nodeSelector"] = dict(sched.node_selector)
    if sched.priority_class_name is not None:
        pod_spec["priorityClassName"] = sched.priority_class_name
    spread = [{"labelSelector": {"matchLabels": selector(owner.name)}, **c} for c in sched.topology_spread_constraints]
    if slave:
        spread.append(_group_spread(owner.name))
    if spread:
        pod_spec["topologySpreadConstraints"] = spread
    retention = "Delete" if spec.storage.delete_claim else "Retain"
    update: dict[str, Any] = {"type": "RollingUpdate"}
    if spec.replication.failover.lease:
        # any member may be the master: the operator restarts them in the Leases' order (rollout.py)
        update = {"type": "OnDelete"}
    elif spec.replication.slaves and not slave:
        update["rollingUpdate"] = {"partition": plan.master_partition}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(owner, sts_name),
        "spec": {
            "replicas": plan.replicas,
            "serviceName": headless_name(owner.name),
            "podManagementPolicy": "Parallel",
            "updateStrategy": update,
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": retention, "whenScaled": "Retain"},
            "selector": {"matchLabels": {**selector(owner.name), **slave_labels}},
            "template": {
                "metadata": {
                    # the operator's keys last: podTemplate may add, never replace (model rejects
                    # its reserved prefixes too)
                    "labels": {**spec.pod_template.labels, **labels(owner.name), **pod_labels},
                    "annotations": {**spec.pod_template.annotations, CONFIG_HASH_ANNOTATION: config_hash(conf)},
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": VOLUME_NAME, "labels": labels(owner.name)},
                "spec": claim_spec,
            }],
        },
    }


def all_objects(plan: Plan) -> list[dict[str, Any]]:
    """Every object in apply order: what pods need comes before the StatefulSet."""
    ext = plan.spec.external_access
    addresses = [addresses_configmap(plan.owner, plan.replicas, plan.external_addresses)
                 ] if ext is not None and ext.waits_for_address else []
    policy = network_policy(plan)
    return [
        service_account(plan),
        # before the pods: an elector without its Role would be refused its group's Lease
        *([lease_role(plan.owner), lease_role_binding(plan.owner)] if plan.spec.replication.failover.lease else []),
        # before the pods: they start with their ingress already limited
        *([] if policy is None else [policy]),
        configmap(plan),
        *addresses,
        headless_service(plan),
        client_service(plan),
        *external_services(plan),
        *(group_pdbs(plan) if plan.spec.replication.slaves else [pdb(plan)]),
        # slaves before masters: a rolling update reaches the slaves first (see rollout)
        *(slave_statefulset(plan, k) for k in _slave_indexes(plan)),
        statefulset(plan),
    ]


# -- NetworkPolicy ------------------------------------------------------------------------------------

def _remoting_ports(plan: Plan) -> list[dict[str, Any]]:
    """The remoting ports of every broker of the store: 10911, or with external access each
    StatefulSet's range (masters ``basePort + i``, slave ``k`` ``basePort + 64 k + i``)."""
    ext = plan.spec.external_access
    if ext is None:
        return [{"protocol": "TCP", "port": LISTEN_PORT}]
    ports: list[dict[str, Any]] = []
    for slave in range(plan.spec.replication.replicas_per_group):
        first, last = ext.listen_port(0, slave), ext.listen_port(plan.replicas - 1, slave)
        ports.append({"protocol": "TCP", "port": first, **({"endPort": last} if last > first else {})})
    return ports


def network_policy(plan: Plan) -> dict[str, Any] | None:
    """With ``spec.networkPolicy``: the ingress the store's pods (masters and slaves) accept.

    * from the store's own pods, every port: a slave's HA connection to its master (listenPort + 1),
      registrations with the peers' embedded name servers, clusterPeers;
    * from the operator (:attr:`Plan.operator_peer`), the ports it uses: remoting (retention
      push, manual delete, observation) and HTTP (a master's /metrics for the groups' lag);
    * from ``from`` peers: remoting (each broker's own port with external access), name server
      and gRPC;
    * from ``metricsFrom`` peers: the HTTP port. Nobody else by default: /metrics names the
      topics and consumer groups, and where Prometheus runs is the user's to say.

    Only ingress is limited, so the brokers' own connections out stay as they are. A list without
    peers adds no rule (an empty ``from`` in a rule would mean everyone).
    """
    policy = plan.spec.network_policy
    if policy is None:
        return None
    name = plan.owner.name
    remoting = _remoting_ports(plan)
    http = [{"protocol": "TCP", "port": plan.spec.metrics.port}]
    clients = [*remoting, {"protocol": "TCP", "port": NAMESRV_PORT}, {"protocol": "TCP", "port": GRPC_PORT}]
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {"matchLabels": selector(name)}}]}]
    if plan.operator_peer is not None:
        ingress.append({"from": [dict(plan.operator_peer)], "ports": [*remoting, *http]})
    if policy.from_peers:
        ingress.append({"from": [dict(p) for p in policy.from_peers], "ports": clients})
    if policy.metrics_from:
        ingress.append({"from": [dict(p) for p in policy.metrics_from], "ports": http})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(plan.owner, name),
        "spec": {"podSelector": {"matchLabels": selector(name)}, "policyTypes": ["Ingress"], "ingress": ingress},
    }
