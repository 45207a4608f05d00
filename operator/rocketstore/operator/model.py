"""The ``RocketStore`` spec as frozen dataclasses, parsed from the custom resource's ``spec``.

The API server has already validated and defaulted the object against the CRD's OpenAPI schema
(crds/rocketstore.yaml), so :func:`parse_spec` mostly converts. It still applies the same
defaults (so builders can be fed hand-written dicts in tests) and re-checks the cross-field rules
that a schema cannot express everywhere; a violation raises :class:`SpecError`, which the
handlers turn into a ``Degraded`` condition with reason ``InvalidSpec`` and a permanent failure.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "Acl",
    "Auth",
    "AuthAcl",
    "AuthPolicy",
    "AuthUser",
    "CommitLog",
    "ExternalAccess",
    "Failover",
    "Maintenance",
    "Metrics",
    "NetworkPolicy",
    "OperatorCredentials",
    "PodTemplate",
    "Replication",
    "Retention",
    "Scheduling",
    "SecretKeyRef",
    "Spec",
    "SpecError",
    "Storage",
    "Tls",
    "format_quantity",
    "parse_quantity",
    "parse_spec",
    "valid_label",
]

GIB: Final = 1024**3
#: a master and up to three slaves per broker group
MAX_REPLICAS_PER_GROUP: Final = 4
MAX_BROKERS: Final = 64
#: externalAccess.grpcBasePort unless written: basePort plus this, the size of the largest
#: remoting range (64 ordinals for each of at most 4 members of a group)
GRPC_BASE_PORT_OFFSET: Final = MAX_BROKERS * MAX_REPLICAS_PER_GROUP
#: scaling.drainTimeoutSeconds: 30 minutes by default, at most a week
DEFAULT_DRAIN_TIMEOUT_S: Final = 1800
MAX_DRAIN_TIMEOUT_S: Final = 7 * 24 * 3600

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_FACTORS: Final = {
    None: 1,
    "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_DELETE_WHEN = re.compile(r"^([01]?[0-9]|2[0-3])(;([01]?[0-9]|2[0-3]))*$")
# a Secret's name (DNS-1123 subdomain) and a Secret key (Kubernetes' IsConfigMapKey: no ".", no
# leading "..", which kubelet reserves for a Secret volume's own ..data / ..<timestamp> entries)
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^(\.[-_a-zA-Z0-9]|[-_a-zA-Z0-9])[-._a-zA-Z0-9]*$")


class SpecError(ValueError):
    """The spec cannot be reconciled as written; ``field`` is the JSON path of the culprit."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"spec.{field_path}: {message}")
        self.field = field_path


def parse_quantity(text: str | int, field_path: str = "quantity") -> int:
    """A Kubernetes byte quantity ("1Gi", "500M", "1073741824") as an int number of bytes."""
    if isinstance(text, int):
        return text
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise SpecError(field_path, f"{text!r} is not a byte quantity such as 1Gi or 500Mi")
    number, suffix = m.groups()
    value = float(number) * _FACTORS[suffix] if "." in number else int(number) * _FACTORS[suffix]
    return int(value)


def format_quantity(n: int) -> str:
    """Bytes as the largest exact binary quantity ("17Gi", "1536Mi", "1000")."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _FACTORS[suffix]
        if n >= factor and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)


def _ratio(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".") if x != int(x) else f"{x:.1f}"


@dataclass(frozen=True)
class Storage:
    segments: int = 10
    #: explicit volume size in bytes; None = computed by :mod:`sizing`
    size: int | None = None
    average_message_size: int = 1024
    storage_class_name: str | None = None
    delete_claim: bool = False


@dataclass(frozen=True)
class CommitLog:
    segment_size: int = GIB


@dataclass(frozen=True)
class Retention:
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75  # percent, RocketMQ's unit
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    policy: str = "fixed"  # fixed | adaptive
    #: adaptive: fileReservedTime is never lowered below this (hours)
    min_file_reserved_time: int = 6
    #: adaptive: start lowering this far below diskSpaceCleanForciblyRatio; raise again when usage
    #: is twice this far below it (hysteresis)
    adaptive_margin: float = 0.05

    def broker_properties(self, file_reserved_time: int | None = None) -> dict[str, str]:
        """The live-updatable broker.conf keys, as UPDATE_BROKER_CONFIG sends them."""
        hours = self.file_reserved_time if file_reserved_time is None else file_reserved_time
        return {
            "fileReservedTime": str(hours),
            "deleteWhen": self.delete_when,
            "diskMaxUsedSpaceRatio": str(self.disk_max_used_space_ratio),
            "diskSpaceCleanForciblyRatio": _ratio(self.disk_space_clean_forcibly_ratio),
            "diskSpaceWarningLevelRatio": _ratio(self.disk_space_warning_level_ratio),
        }


@dataclass(frozen=True)
class Maintenance:
    delete_expired_request: str | None = None


@dataclass(frozen=True)
class Scheduling:
    affinity: Mapping[str, Any] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    priority_class_name: str | None = None
    #: a constraint without labelSelector gets the brokers' own selector (see desired.statefulset)
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class PodTemplate:
    """Additions to the broker pods: merged under what the operator sets, never over it."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: container env entries (Kubernetes EnvVar objects), after the operator's own
    env: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Metrics:
    enabled: bool = True
    port: int = 10925
    #: the brokers' per-queue series (metricsPerQueueEnable): queues x groups of them per broker,
    #: which a large store turns off, keeping the per-topic and per-group sums
    per_queue: bool = True

    def broker_properties(self) -> dict[str, str]:
        """The broker.conf keys of this section that brokers take live (UPDATE_BROKER_CONFIG)."""
        return {"metricsPerQueueEnable": "true" if self.per_queue else "false"}


#: broker.conf keys that brokers take live (UPDATE_BROKER_CONFIG): changing them never restarts a pod
LIVE_KEYS: Final = frozenset(Retention().broker_properties()) | frozenset(Metrics().broker_properties())


@dataclass(frozen=True)
class OperatorCredentials:
    """The plain ACL account the operator signs its own admin requests with (retention push,
    manual delete, observation): a Secret of the RocketStore's namespace holding the access key and
    the secret key. The account needs ``admin: true`` (UPDATE_BROKER_CONFIG and
    DELETE_EXPIRED_COMMITLOG are admin-only codes in RocketMQ 4.9.8)."""

    secret_name: str
    access_key_key: str = "accessKey"
    secret_key_key: str = "secretKey"


@dataclass(frozen=True)
class Acl:
    """RocketMQ plain ACL from a Secret: ``key`` holds the plain_acl.yml the brokers enforce."""

    secret_name: str
    key: str = "plain_acl.yml"
    operator_credentials: OperatorCredentials | None = None


@dataclass(frozen=True)
class SecretKeyRef:
    """One key of a Secret in the RocketStore's namespace (a password is never written in the spec)."""

    secret_name: str
    key: str


@dataclass(frozen=True)
class AuthUser:
    """A RocketMQ 5.3 user the operator keeps on every broker (its password from a Secret)."""

    name: str
    password: SecretKeyRef
    user_type: str = "Normal"  # Super | Normal (UserInfo.userType)
    state: str = "enable"  # enable | disable (UserInfo.userStatus)


@dataclass(frozen=True)
class AuthPolicy:
    """One entry of an ACL: resource keys in the broker's form (``Topic:orders``, ``Topic:ord*``,
    ``Topic:*``, ``*``), actions, decision and source IPs (none: any address)."""

    resources: tuple[str, ...]
    actions: tuple[str, ...]
    decision: str = "Allow"
    source_ips: tuple[str, ...] = ()
    policy_type: str = "Custom"  # Custom | Default


@dataclass(frozen=True)
class AuthAcl:
    subject: str  # User:name
    policies: tuple[AuthPolicy, ...]


@dataclass(frozen=True)
class Auth:
    """RocketMQ 5.3 authentication and authorization (``spec.auth``): the broker switches, the
    inner client the brokers create as a Super user and the operator signs its admin requests
    with, an initial user, and the users and ACLs the operator converges every broker to."""

    inner_client: OperatorCredentials
    authentication: bool = True
    authorization: bool = True
    #: a Secret with ``username`` / ``password`` keys (initAuthenticationUser, a Super user)
    initial_user: OperatorCredentials | None = None
    users: tuple[AuthUser, ...] = ()
    acls: tuple[AuthAcl, ...] = ()
    #: delete users and ACLs the spec does not declare (never the inner client or the initial user)
    prune: bool = False


@dataclass(frozen=True)
class Tls:
    """TLS material of the remoting port from a Secret (keys default to a kubernetes.io/tls Secret's)."""

    secret_name: str
    cert_key: str = "tls.crt"
    key_key: str = "tls.key"
    #: CA certificates client certificates are verified against (needed unless client_auth is none)
    trust_cert_key: str | None = None
    mode: str = "permissive"  # disabled | permissive | enforcing (tls.server.mode)
    client_auth: str = "none"  # none | optional | require (tls.server.need.client.auth)
    #: the CA the operator verifies brokers' certificates against; absent from the Secret: the
    #: operator encrypts without verifying, as RocketMQ's clients do by default
    ca_key: str = "ca.crt"


@dataclass(frozen=True)
class ExternalAccess:
    """Clients outside the cluster network: each broker published by a Service of its own.

    RocketMQ clients connect to the address a broker advertises in its routes, ``brokerIP1`` and
    ``listenPort``, with no separate advertised port. So broker ``i`` listens on ``basePort + i``
    (slave ``k`` of group ``i``: ``basePort + 64 k + i``, above every master's port whatever the
    number of groups) inside its pod and its Service publishes that same port: on every node (``NodePort``, the
    broker advertises the address of its pod's node) or on a load balancer of its own
    (``LoadBalancer``, the broker advertises the balancer's address once the cloud has assigned
    one). ``host`` replaces the advertised address. The brokers' name servers (any of them answers
    for all) are published on node port ``namesrvNodePort``, or on port 9876 of a load balancer.

    A broker's gRPC port (RocketMQ 5.x clients) is published by the same Service on
    ``grpcBasePort`` plus the same offset as its remoting port (:meth:`grpc_port`), while the pod
    keeps listening on 8081: the broker advertises it from ``grpcAdvertisedPortOffset``
    (``grpcBasePort - basePort``), which gives every broker's gRPC port from its remoting port.
    ``grpcBasePort`` defaults to :data:`GRPC_BASE_PORT_OFFSET` above ``basePort``, above every port
    any ``replicasPerGroup`` gives the remoting ports, so stores on distinct ``basePort`` ranges
    need no second choice.
    """

    base_port: int
    namesrv_node_port: int
    grpc_base_port: int
    host: str | None = None
    type: str = "NodePort"  # NodePort | LoadBalancer

    def listen_port(self, ordinal: int, slave: int = 0) -> int:
        return self.base_port + slave * MAX_BROKERS + ordinal

    def grpc_port(self, ordinal: int, slave: int = 0) -> int:
        """The port broker ``ordinal`` (its slave ``slave``) is reached on over gRPC from outside."""
        return self.listen_port(ordinal, slave) + self.grpc_offset

    @property
    def grpc_offset(self) -> int:
        """broker.conf's ``grpcAdvertisedPortOffset``: one distance for every broker."""
        return self.grpc_base_port - self.base_port

    @property
    def load_balancer(self) -> bool:
        return self.type == "LoadBalancer"

    @property
    def waits_for_address(self) -> bool:
        """Brokers learn their address from the operator (a load balancer's, once assigned)."""
        return self.load_balancer and self.host is None


@dataclass(frozen=True)
class NetworkPolicy:
    """Who may connect to the store's pods (a Kubernetes NetworkPolicy, enforced by the cluster's
    network plugin): ``from_peers`` reach the client ports (remoting, name server, gRPC),
    ``metrics_from`` the HTTP port (/metrics). Peers are Kubernetes NetworkPolicyPeer objects,
    passed on as written. The store's own pods and the operator are always allowed
    (:func:`rocketstore.operator.desired.network_policy`)."""

    from_peers: tuple[Mapping[str, Any], ...] = ()
    metrics_from: tuple[Mapping[str, Any], ...] = ()


#: brokerRole of a group's master (RocketMQ's BrokerRole); a slave's is SLAVE
REPLICATION_MODES: Final = ("ASYNC_MASTER", "SYNC_MASTER")
#: who elects a group's master: nobody (``NAME-<i>`` is master for good) or each group's Lease
FAILOVER_MODES: Final = ("None", "Lease")


@dataclass(frozen=True)
class Failover:
    """Automatic failover (docs/failover.md): with ``Lease`` every member of a group is a candidate
    and the brokers elect their master on a Lease per group (rocketstore.broker.lease_elector).

    The timings are the elector's D, R and m in milliseconds (broker.conf's
    ``controllerLeaseDurationMills``, ``...RenewIntervalMills``, ``...MarginMills``, with the
    broker's defaults), under the elector's rules R < D and m < D - R: a master must renew before
    its Lease expires, and stop acknowledging before a candidate may take over.
    """

    mode: str = "None"
    lease_duration_ms: int = 3000
    renew_interval_ms: int = 1000
    margin_ms: int = 150

    @property
    def lease(self) -> bool:
        return self.mode == "Lease"


@dataclass(frozen=True)
class Replication:
    """Broker groups: ``replicas_per_group`` brokers share each brokerName, the master (brokerId 0)
    and ``replicas_per_group - 1`` slaves (brokerId 1..) replicating its CommitLog through
    RocketMQ's HA protocol.

    The count includes the master, as Kafka's and Strimzi's replication factor does, so 1 is
    today's single broker per group. rocketmq-operator's ``replicaPerGroup`` counts the slaves
    only: the spelling differs on purpose, so a value copied from there is not silently off by one.
    """

    replicas_per_group: int = 1
    mode: str = "ASYNC_MASTER"
    #: a slave at most this many bytes behind its master counts as in sync for the operator:
    #: a rolling restart restarts a group's master only once its slaves are
    max_in_sync_lag: int = 1024**2
    failover: Failover = field(default_factory=Failover)

    @property
    def slaves(self) -> int:
        return self.replicas_per_group - 1


@dataclass(frozen=True)
class Spec:
    brokers: int = 1
    #: None: the operator's default broker image (its own version), so upgrading the operator
    #: moves the brokers that do not pin an image
    image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    #: Secrets in the store's namespace the kubelet pulls the broker image with
    image_pull_secrets: tuple[str, ...] = ()
    resources: Mapping[str, Any] = field(default_factory=dict)
    storage: Storage = field(default_factory=Storage)
    commit_log: CommitLog = field(default_factory=CommitLog)
    retention: Retention = field(default_factory=Retention)
    flush_disk_type: str = "ASYNC_FLUSH"
    broker_config: Mapping[str, str] = field(default_factory=dict)
    maintenance: Maintenance = field(default_factory=Maintenance)
    scheduling: Scheduling = field(default_factory=Scheduling)
    metrics: Metrics = field(default_factory=Metrics)
    allow_scale_down: bool = False
    #: scaling.drainTimeoutSeconds: how long a scale-down waits for its leaving brokers to drain
    #: (rocketstore.operator.scaling); 0 scales down at once
    drain_timeout_s: int = DEFAULT_DRAIN_TIMEOUT_S
    acl: Acl | None = None
    auth: Auth | None = None
    tls: Tls | None = None
    pod_template: PodTemplate = field(default_factory=PodTemplate)
    external_access: ExternalAccess | None = None
    replication: Replication = field(default_factory=Replication)
    #: None: no NetworkPolicy (every pod of the cluster may connect, as without the field)
    network_policy: NetworkPolicy | None = None


# pod template keys the operator sets itself; podTemplate may not override them (the selector
# labels decide which pods the StatefulSet and Services own; the env feeds the start command)
RESERVED_LABEL_PREFIX: Final = "app.kubernetes.io/"
RESERVED_ANNOTATION_PREFIX: Final = "rocketstore.io/"
RESERVED_ENV: Final = frozenset({"POD_NAME", "POD_NAMESPACE", "CONF_DIR", "RUN_DIR", "HOST_IP",
                                  "EXTERNAL_BASE_PORT", "EXTERNAL_HOST", "ADDRESS_DIR"})


# broker.conf keys the operator owns; brokerConfig may not override them (they would break the
# volume layout, addressing or the retention the operator pushes)
RESERVED_BROKER_KEYS: Final = frozenset({
    "brokerClusterName", "brokerName", "brokerId", "listenPort", "storePathRootDir",
    "storePathCommitLog", "mappedFileSizeCommitLog", "flushDiskType", "namesrvListenPort",
    "httpListenPort", "clusterPeers", "namesrvPeers", "listenHost", "grpcAdvertisedPortOffset", *LIVE_KEYS,
})


# broker.conf keys the operator sets when spec.acl / spec.tls is given (brokerConfig may set them
# otherwise, e.g. aclEnable with a file the broker keeps on its own volume)
ACL_BROKER_KEYS: Final = frozenset({"aclEnable", "rocketmq.acl.plain.file"})
# broker.conf keys the operator sets when spec.auth is given
AUTH_BROKER_KEYS: Final = frozenset({
    "authenticationEnabled", "authorizationEnabled", "innerClientAuthenticationCredentials",
    "initAuthenticationUser", "aclEnable",
})
# broker.conf keys the operator sets when spec.replication is given: a group's roles and how a
# slave finds its master (the registration answer of its master's name server)
REPLICATION_BROKER_KEYS: Final = frozenset({"brokerRole", "namesrvAddr", "haMasterAddress"})
# ... and with replication.failover Lease: the elector's switch and timings, and the SyncStateSet
# acknowledgement that makes an acknowledged message survive an election
FAILOVER_BROKER_KEYS: Final = frozenset({
    "enableControllerMode", "controllerAddr", "controllerLeaseEnable", "controllerLeaseNamespace",
    "controllerLeaseKubeconfig", "controllerLeaseDurationMills", "controllerLeaseRenewIntervalMills",
    "controllerLeaseMarginMills", "allAckInSyncStateSet",
})
#: the longest graceful stop (brokerConfig shutdownWaitTimeSeconds) a pod is given room for
MAX_SHUTDOWN_WAIT_S: Final = 600
TLS_BROKER_KEYS: Final = frozenset({
    "tls.server.mode", "tls.server.certPath", "tls.server.keyPath", "tls.server.trustCertPath",
    "tls.server.need.client.auth", "tls.config.file",
})


def _get(d: Mapping[str, Any], key: str, default: Any) -> Any:
    value = d.get(key)
    return default if value is None else value


def _int(d: Mapping[str, Any], key: str, default: int, path: str, lo: int, hi: int) -> int:
    value = _get(d, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise SpecError(path, f"{value} is outside {lo}..{hi}")
    return value


def _float(d: Mapping[str, Any], key: str, default: float, path: str, lo: float, hi: float) -> float:
    value = _get(d, key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(path, f"expected a number, got {value!r}")
    if not lo <= value <= hi:
        raise SpecError(path, f"{value} is outside {lo}..{hi}")
    return float(value)


def _choice(d: Mapping[str, Any], key: str, default: str, path: str, choices: tuple[str, ...]) -> str:
    value = _get(d, key, default)
    if value not in choices:
        raise SpecError(path, f"{value!r} is not one of {', '.join(choices)}")
    return str(value)


def _secret_key(d: Mapping[str, Any], key: str, default: str, path: str) -> str:
    value = _get(d, key, default)
    if not isinstance(value, str) or len(value) > 253 or not _SECRET_KEY.match(value):
        raise SpecError(path, f"{value!r} is not a Secret key (letters, digits, '-', '_', '.'; not '.' or '..*')")
    return value


def _image_pull_secrets(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """spec.imagePullSecrets, as a pod spec takes them: ``[{name: SECRET}, ...]``."""
    refs = _get(spec, "imagePullSecrets", [])
    if not isinstance(refs, list):
        raise SpecError("imagePullSecrets", "must be a list of {name: SECRET}")
    names = []
    for i, ref in enumerate(refs):
        if not isinstance(ref, Mapping):
            raise SpecError(f"imagePullSecrets[{i}]", "must be {name: SECRET}")
        names.append(_secret_name({"secretName": ref.get("name")}, f"imagePullSecrets[{i}].name"))
    return tuple(names)


def _secret_name(d: Mapping[str, Any], path: str) -> str:
    value = d.get("secretName")
    if not isinstance(value, str) or len(value) > 253 or not _SECRET_NAME.match(value):
        raise SpecError(path, f"{value!r} is not a Secret name (a lowercase DNS subdomain)")
    return value


def _parse_acl(spec: Mapping[str, Any]) -> Acl | None:
    d = spec.get("acl")
    if d is None:
        return None
    creds = d.get("operatorCredentials")
    operator_credentials = None if creds is None else OperatorCredentials(
        secret_name=_secret_name(creds, "acl.operatorCredentials.secretName"),
        access_key_key=_secret_key(creds, "accessKeyKey", "accessKey", "acl.operatorCredentials.accessKeyKey"),
        secret_key_key=_secret_key(creds, "secretKeyKey", "secretKey", "acl.operatorCredentials.secretKeyKey"),
    )
    if operator_credentials is not None and operator_credentials.access_key_key == operator_credentials.secret_key_key:
        raise SpecError("acl.operatorCredentials.secretKeyKey", "accessKeyKey and secretKeyKey must differ")
    return Acl(secret_name=_secret_name(d, "acl.secretName"), key=_secret_key(d, "key", "plain_acl.yml", "acl.key"),
               operator_credentials=operator_credentials)


_USER_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")
_RESOURCE_TYPES: Final = ("Cluster", "Namespace", "Topic", "Group")
AUTH_ACTIONS: Final = ("All", "Pub", "Sub", "Create", "Update", "Delete", "Get", "List")


def _credentials(d: Any, path: str, access: str, secret: str) -> OperatorCredentials:
    if not isinstance(d, Mapping):
        raise SpecError(path, "must name a Secret (secretName)")
    creds = OperatorCredentials(
        secret_name=_secret_name(d, f"{path}.secretName"),
        access_key_key=_secret_key(d, f"{access}Key", access, f"{path}.{access}Key"),
        secret_key_key=_secret_key(d, f"{secret}Key", secret, f"{path}.{secret}Key"),
    )
    if creds.access_key_key == creds.secret_key_key:
        raise SpecError(f"{path}.{secret}Key", f"{access}Key and {secret}Key must differ")
    return creds


def _resource_key(d: Any, path: str) -> str:
    """``{type, name, patternType}`` -> the broker's resource key (Apache's Resource.of forms)."""
    if not isinstance(d, Mapping):
        raise SpecError(path, "must be {type, name, patternType}")
    kind = _choice(d, "type", "Topic", f"{path}.type", ("Any", *_RESOURCE_TYPES))
    pattern = _choice(d, "patternType", "LITERAL", f"{path}.patternType", ("LITERAL", "PREFIXED", "ANY"))
    if kind == "Any":
        return "*"
    if pattern == "ANY":
        return f"{kind}:*"
    name = d.get("name")
    if not isinstance(name, str) or not name or "*" in name or ":" in name:
        raise SpecError(f"{path}.name", f"{name!r}: a {pattern} resource needs a name without '*' or ':'")
    return f"{kind}:{name}*" if pattern == "PREFIXED" else f"{kind}:{name}"


def _parse_auth_policy(d: Any, path: str) -> AuthPolicy:
    if not isinstance(d, Mapping):
        raise SpecError(path, "must be a mapping")
    resources = tuple(_resource_key(r, f"{path}.resources[{i}]") for i, r in enumerate(d.get("resources") or ()))
    actions = tuple(str(a) for a in d.get("actions") or ())
    if not resources:
        raise SpecError(f"{path}.resources", "needs at least one resource")
    bad = [a for a in actions if a not in AUTH_ACTIONS]
    if not actions or bad:
        raise SpecError(f"{path}.actions", f"needs actions among {', '.join(AUTH_ACTIONS)}")
    ips = tuple(str(ip) for ip in d.get("sourceIps") or ())
    for ip in ips:
        try:
            ipaddress.ip_network(ip, strict=False)
        except ValueError as exc:
            raise SpecError(f"{path}.sourceIps", f"{ip!r} is not an address or CIDR block") from exc
    return AuthPolicy(resources=resources, actions=actions,
                      decision=_choice(d, "decision", "Allow", f"{path}.decision", ("Allow", "Deny")),
                      source_ips=ips,
                      policy_type=_choice(d, "policyType", "Custom", f"{path}.policyType", ("Custom", "Default")))


def _parse_auth(spec: Mapping[str, Any]) -> Auth | None:
    d = spec.get("auth")
    if d is None:
        return None
    users: list[AuthUser] = []
    for i, u in enumerate(_get(d, "users", ())):
        path = f"auth.users[{i}]"
        name = u.get("name") if isinstance(u, Mapping) else None
        if not isinstance(name, str) or not _USER_NAME.match(name):
            raise SpecError(f"{path}.name", f"{name!r} is not a user name (letters, digits, '_', '.', '@', '-')")
        ref = u.get("passwordSecretKeyRef")
        if not isinstance(ref, Mapping):
            raise SpecError(f"{path}.passwordSecretKeyRef", "the password comes from a Secret: {name, key}")
        users.append(AuthUser(
            name=name,
            password=SecretKeyRef(_secret_name({"secretName": ref.get("name")}, f"{path}.passwordSecretKeyRef.name"),
                                  _secret_key(ref, "key", "", f"{path}.passwordSecretKeyRef.key")),
            user_type=_choice(u, "type", "Normal", f"{path}.type", ("Super", "Normal")),
            state=_choice(u, "state", "enable", f"{path}.state", ("enable", "disable")),
        ))
    names = [u.name for u in users]
    if len(set(names)) != len(names):
        raise SpecError("auth.users", "user names must be unique")
    acls: list[AuthAcl] = []
    for i, a in enumerate(_get(d, "acls", ())):
        path = f"auth.acls[{i}]"
        subject = a.get("subject") if isinstance(a, Mapping) else None
        if not isinstance(subject, str) or not subject.startswith("User:") or not _USER_NAME.match(subject[5:]):
            raise SpecError(f"{path}.subject", f"{subject!r} is not a subject (User:NAME)")
        policies = tuple(_parse_auth_policy(p, f"{path}.policies[{j}]") for j, p in enumerate(a.get("policies") or ()))
        if not policies:
            raise SpecError(f"{path}.policies", "needs at least one policy")
        acls.append(AuthAcl(subject, policies))
    subjects = [a.subject for a in acls]
    if len(set(subjects)) != len(subjects):
        raise SpecError("auth.acls", "one ACL per subject")
    init = d.get("initialUser")
    return Auth(
        inner_client=_credentials(d.get("innerClient"), "auth.innerClient", "accessKey", "secretKey"),
        authentication=bool(_get(d, "authenticationEnabled", True)),
        authorization=bool(_get(d, "authorizationEnabled", True)),
        initial_user=None if init is None else _credentials(init, "auth.initialUser", "username", "password"),
        users=tuple(users),
        acls=tuple(acls),
        prune=bool(_get(d, "prune", False)),
    )


def _parse_tls(spec: Mapping[str, Any]) -> Tls | None:
    d = spec.get("tls")
    if d is None:
        return None
    cert = _secret_key(d, "certKey", "tls.crt", "tls.certKey")
    key = _secret_key(d, "keyKey", "tls.key", "tls.keyKey")
    trust = None if d.get("trustCertKey") is None else _secret_key(d, "trustCertKey", "", "tls.trustCertKey")
    tls = Tls(
        secret_name=_secret_name(d, "tls.secretName"),
        cert_key=cert,
        key_key=key,
        trust_cert_key=trust,
        mode=_choice(d, "mode", "permissive", "tls.mode", ("disabled", "permissive", "enforcing")),
        client_auth=_choice(d, "clientAuth", "none", "tls.clientAuth", ("none", "optional", "require")),
        ca_key=_secret_key(d, "caKey", "ca.crt", "tls.caKey"),
    )
    if cert == key or trust in (cert, key):
        raise SpecError("tls.trustCertKey" if trust in (cert, key) else "tls.keyKey",
                        "certKey, keyKey and trustCertKey must name different Secret keys")
    if tls.client_auth != "none" and tls.trust_cert_key is None:
        # the broker verifies client certificates against tls.server.trustCertPath only
        raise SpecError("tls.trustCertKey", f"clientAuth {tls.client_auth} needs the CA to verify clients against")
    return tls


def _parse_external_access(spec: Mapping[str, Any], brokers: int, replication: Replication) -> ExternalAccess | None:
    d = spec.get("externalAccess")
    if d is None:
        return None
    base_port = _int(d, "basePort", 30911, "externalAccess.basePort", 1, 65535)
    access = ExternalAccess(
        base_port=base_port,
        namesrv_node_port=_int(d, "namesrvNodePort", 30876, "externalAccess.namesrvNodePort", 1, 65535),
        host=None if d.get("host") is None else str(d["host"]),
        type=_choice(d, "type", "NodePort", "externalAccess.type", ("NodePort", "LoadBalancer")),
        grpc_base_port=(base_port + GRPC_BASE_PORT_OFFSET if d.get("grpcBasePort") is None
                        else _int(d, "grpcBasePort", 0, "externalAccess.grpcBasePort", 1, 65535)),
    )
    if replication.slaves and access.load_balancer:
        raise SpecError("replication.replicasPerGroup", "slaves are published on node ports only: replicasPerGroup "
                        "above 1 needs externalAccess.type NodePort")
    last = access.listen_port(brokers - 1, replication.slaves)
    if last > 65535:
        raise SpecError("externalAccess.basePort", f"the last broker's port, {last}, is not a port")
    last_grpc = access.grpc_port(brokers - 1, replication.slaves)
    if last_grpc > 65535:
        raise SpecError("externalAccess.grpcBasePort", f"the last broker's gRPC port, {last_grpc}, is not a port "
                        f"(grpcBasePort defaults to basePort + {GRPC_BASE_PORT_OFFSET})")
    # every ordinal counts (at most 64 groups), so scaling up never collides
    span = MAX_BROKERS * replication.replicas_per_group
    if abs(access.grpc_offset) < span:
        raise SpecError("externalAccess.grpcBasePort",
                        f"the ranges basePort..basePort+{span - 1} and grpcBasePort..grpcBasePort+{span - 1} "
                        "(the brokers' remoting and gRPC ports) must not overlap")
    # a load balancer's node ports are Kubernetes' choice: namesrvNodePort applies to NodePort only
    if not access.load_balancer:
        for start, what in ((access.base_port, "basePort"), (access.grpc_base_port, "grpcBasePort")):
            if start <= access.namesrv_node_port < start + span:
                raise SpecError("externalAccess.namesrvNodePort",
                                f"must lie outside {what}..{what}+{span - 1} (the brokers' ports)")
    return access


def parse_spec(spec: Mapping[str, Any]) -> Spec:
    """Convert a ``RocketStore.spec`` mapping into a :class:`Spec`; raises :class:`SpecError`."""
    st = _get(spec, "storage", {})
    size_text = st.get("size")
    storage = Storage(
        segments=_int(st, "segments", 10, "storage.segments", 1, 100_000),
        size=None if size_text is None else parse_quantity(size_text, "storage.size"),
        average_message_size=_int(st, "averageMessageSize", 1024, "storage.averageMessageSize", 64, 4 * 1024**2),
        storage_class_name=st.get("storageClassName"),
        delete_claim=bool(_get(st, "deleteClaim", False)),
    )
    cl = _get(spec, "commitLog", {})
    segment_size = parse_quantity(_get(cl, "segmentSize", "1Gi"), "commitLog.segmentSize")
    if not 1024**2 <= segment_size <= 2 * GIB - 1:
        # a CommitLog segment is one Java MappedByteBuffer: at most Integer.MAX_VALUE bytes
        raise SpecError("commitLog.segmentSize", f"{segment_size} bytes is outside 1Mi..2Gi-1")
    rt = _get(spec, "retention", {})
    retention = Retention(
        file_reserved_time=_int(rt, "fileReservedTime", 72, "retention.fileReservedTime", 1, 87_600),
        delete_when=str(_get(rt, "deleteWhen", "04")),
        disk_max_used_space_ratio=_int(rt, "diskMaxUsedSpaceRatio", 75, "retention.diskMaxUsedSpaceRatio", 10, 95),
        disk_space_clean_forcibly_ratio=_float(
            rt, "diskSpaceCleanForciblyRatio", 0.85, "retention.diskSpaceCleanForciblyRatio", 0.1, 0.99),
        disk_space_warning_level_ratio=_float(
            rt, "diskSpaceWarningLevelRatio", 0.90, "retention.diskSpaceWarningLevelRatio", 0.1, 0.99),
        policy=_choice(rt, "policy", "fixed", "retention.policy", ("fixed", "adaptive")),
        min_file_reserved_time=_int(rt, "minFileReservedTime", 6, "retention.minFileReservedTime", 1, 87_600),
        adaptive_margin=_float(rt, "adaptiveMargin", 0.05, "retention.adaptiveMargin", 0.01, 0.5),
    )
    if not _DELETE_WHEN.match(retention.delete_when):
        raise SpecError("retention.deleteWhen", f"{retention.delete_when!r} is not hours like 04 or 04;16")
    if retention.disk_space_clean_forcibly_ratio >= retention.disk_space_warning_level_ratio:
        raise SpecError("retention.diskSpaceCleanForciblyRatio", "must be below diskSpaceWarningLevelRatio")
    if retention.disk_max_used_space_ratio / 100 > retention.disk_space_clean_forcibly_ratio:
        raise SpecError("retention.diskMaxUsedSpaceRatio", "must not exceed diskSpaceCleanForciblyRatio")
    # an explicit fileReservedTime below the adaptive floor is honoured: the floor follows it
    retention = _replace_floor(retention)
    broker_config = {str(k): str(v) for k, v in _get(spec, "brokerConfig", {}).items()}
    reserved = sorted(RESERVED_BROKER_KEYS & broker_config.keys())
    if reserved:
        raise SpecError(f"brokerConfig.{reserved[0]}", "is set by the operator; use the dedicated spec field")
    wait = broker_config.get("shutdownWaitTimeSeconds")
    if wait is not None and not (wait.isdigit() and int(wait) <= MAX_SHUTDOWN_WAIT_S):
        # it sets the pods' terminationGracePeriodSeconds too, so it is checked here, not at the broker
        raise SpecError("brokerConfig.shutdownWaitTimeSeconds",
                        f"expected whole seconds in 0..{MAX_SHUTDOWN_WAIT_S}, got {wait!r}")
    acl, tls, auth = _parse_acl(spec), _parse_tls(spec), _parse_auth(spec)
    if acl is not None and auth is not None:
        raise SpecError("auth", "spec.acl (plain ACL, RocketMQ 4.x) and spec.auth (RocketMQ 5.3) are exclusive: "
                        "a 5.3 broker refuses to start with both")
    replicated = spec.get("replication") is not None
    replication = _parse_replication(spec)
    owned = ((ACL_BROKER_KEYS if acl else frozenset()) | (AUTH_BROKER_KEYS if auth else frozenset())
             | (TLS_BROKER_KEYS if tls else frozenset())
             | (REPLICATION_BROKER_KEYS if replicated else frozenset())
             | (FAILOVER_BROKER_KEYS if replication.failover.lease else frozenset()))
    taken = sorted(owned & broker_config.keys())
    if taken:
        section = ("acl" if taken[0] in ACL_BROKER_KEYS else "auth" if taken[0] in AUTH_BROKER_KEYS
                   else "tls" if taken[0] in TLS_BROKER_KEYS
                   else "replication")
        raise SpecError(f"brokerConfig.{taken[0]}", f"conflicts with spec.{section}, from which the operator "
                        f"sets the broker's {section} keys")
    sc = _get(spec, "scheduling", {})
    mt = _get(spec, "metrics", {})
    token = _get(spec, "maintenance", {}).get("deleteExpiredRequest")
    brokers = _int(spec, "brokers", 1, "brokers", 1, MAX_BROKERS)
    external_access = _parse_external_access(spec, brokers, replication)
    return Spec(
        brokers=brokers,
        image=None if spec.get("image") is None else str(spec["image"]),
        image_pull_policy=_choice(spec, "imagePullPolicy", "IfNotPresent", "imagePullPolicy",
                                  ("Always", "IfNotPresent", "Never")),
        image_pull_secrets=_image_pull_secrets(spec),
        resources=dict(_get(spec, "resources", {})),
        storage=storage,
        commit_log=CommitLog(segment_size=segment_size),
        retention=retention,
        flush_disk_type=_choice(spec, "flushDiskType", "ASYNC_FLUSH", "flushDiskType", ("ASYNC_FLUSH", "SYNC_FLUSH")),
        broker_config=broker_config,
        maintenance=Maintenance(delete_expired_request=str(token) if token else None),
        scheduling=Scheduling(
            affinity=sc.get("affinity"),
            tolerations=tuple(sc.get("tolerations") or ()),
            node_selector={str(k): str(v) for k, v in (sc.get("nodeSelector") or {}).items()},
            priority_class_name=sc.get("priorityClassName"),
            topology_spread_constraints=tuple(sc.get("topologySpreadConstraints") or ()),
        ),
        metrics=Metrics(
            enabled=bool(_get(mt, "enabled", True)),
            port=_int(mt, "port", 10925, "metrics.port", 1024, 65535),
            per_queue=bool(_get(mt, "perQueue", True)),
        ),
        allow_scale_down=bool(_get(_get(spec, "scaling", {}), "allowScaleDown", False)),
        drain_timeout_s=_int(_get(spec, "scaling", {}), "drainTimeoutSeconds", DEFAULT_DRAIN_TIMEOUT_S,
                             "scaling.drainTimeoutSeconds", 0, MAX_DRAIN_TIMEOUT_S),
        acl=acl,
        auth=auth,
        tls=tls,
        pod_template=_parse_pod_template(_get(spec, "podTemplate", {})),
        external_access=external_access,
        replication=replication,
        network_policy=_parse_network_policy(spec),
    )


def _parse_replication(spec: Mapping[str, Any]) -> Replication:
    d = _get(spec, "replication", {})
    replication = Replication(
        replicas_per_group=_int(d, "replicasPerGroup", 1, "replication.replicasPerGroup", 1, MAX_REPLICAS_PER_GROUP),
        mode=_choice(d, "mode", "ASYNC_MASTER", "replication.mode", REPLICATION_MODES),
        max_in_sync_lag=parse_quantity(_get(d, "maxInSyncLag", "1Mi"), "replication.maxInSyncLag"),
        failover=_parse_failover(_get(d, "failover", {})),
    )
    if replication.failover.lease and not replication.slaves:
        raise SpecError("replication.failover.mode", "Lease needs a group to fail over to: replicasPerGroup >= 2")
    if replication.mode == "SYNC_MASTER" and not replication.slaves:
        # RocketMQ's SYNC_MASTER answers SLAVE_NOT_AVAILABLE to every send without a slave in sync
        raise SpecError("replication.mode", "SYNC_MASTER needs a slave to acknowledge sends: replicasPerGroup >= 2")
    return replication


def _parse_failover(d: Mapping[str, Any]) -> Failover:
    path = "replication.failover"
    failover = Failover(
        mode=_choice(d, "mode", "None", f"{path}.mode", FAILOVER_MODES),
        lease_duration_ms=_int(d, "leaseDurationMillis", 3000, f"{path}.leaseDurationMillis", 1000, 60_000),
        renew_interval_ms=_int(d, "renewIntervalMillis", 1000, f"{path}.renewIntervalMillis", 100, 30_000),
        margin_ms=_int(d, "marginMillis", 150, f"{path}.marginMillis", 0, 10_000),
    )
    # the elector's rules (rocketstore.broker.lease_elector): a master renews before its Lease
    # expires, and stops acknowledging before a candidate may take the Lease over
    if failover.renew_interval_ms >= failover.lease_duration_ms:
        raise SpecError(f"{path}.renewIntervalMillis", "must be below leaseDurationMillis")
    if failover.margin_ms >= failover.lease_duration_ms - failover.renew_interval_ms:
        raise SpecError(f"{path}.marginMillis", "must be below leaseDurationMillis - renewIntervalMillis")
    return failover


def _parse_pod_template(d: Mapping[str, Any]) -> PodTemplate:
    meta = _get(d, "metadata", {})
    labels = {str(k): str(v) for k, v in _get(meta, "labels", {}).items()}
    annotations = {str(k): str(v) for k, v in _get(meta, "annotations", {}).items()}
    env = tuple(_get(d, "env", ()))
    for key in sorted(labels):
        if key.startswith(RESERVED_LABEL_PREFIX):
            raise SpecError(f"podTemplate.metadata.labels.{key}", f"{RESERVED_LABEL_PREFIX}* labels are the operator's")
    for key in sorted(annotations):
        if key.startswith(RESERVED_ANNOTATION_PREFIX):
            raise SpecError(f"podTemplate.metadata.annotations.{key}",
                            f"{RESERVED_ANNOTATION_PREFIX}* annotations are the operator's")
    for i, var in enumerate(env):
        name = var.get("name") if isinstance(var, Mapping) else None
        if not isinstance(name, str) or not name:
            raise SpecError(f"podTemplate.env[{i}].name", "every env entry needs a name")
        if name in RESERVED_ENV:
            raise SpecError(f"podTemplate.env[{i}].name", f"{name} is set by the operator")
    return PodTemplate(labels=labels, annotations=annotations, env=env)


# Kubernetes' label syntax (a qualified name as key, an optional DNS subdomain prefix; a value of
# at most 63 characters): a NetworkPolicy the API server would reject is a SpecError naming the
# field, not a failed apply
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
_PEER_KEYS: Final = frozenset({"podSelector", "namespaceSelector", "ipBlock"})


def _parse_network_policy(spec: Mapping[str, Any]) -> NetworkPolicy | None:
    d = spec.get("networkPolicy")
    if d is None:
        return None
    return NetworkPolicy(from_peers=_peers(d, "from", "networkPolicy.from"),
                         metrics_from=_peers(d, "metricsFrom", "networkPolicy.metricsFrom"))


def _peers(d: Mapping[str, Any], key: str, path: str) -> tuple[Mapping[str, Any], ...]:
    """A list of NetworkPolicyPeer, checked as the API server checks a NetworkPolicy's."""
    peers = _get(d, key, [])
    if not isinstance(peers, list):
        raise SpecError(path, "expected a list of peers (podSelector, namespaceSelector or ipBlock)")
    for i, peer in enumerate(peers):
        at = f"{path}[{i}]"
        if not isinstance(peer, Mapping) or not peer.keys() & _PEER_KEYS:
            raise SpecError(at, "a peer needs a podSelector, a namespaceSelector or an ipBlock")
        unknown = sorted(peer.keys() - _PEER_KEYS)
        if unknown:
            raise SpecError(f"{at}.{unknown[0]}", "is not a NetworkPolicyPeer field")
        if "ipBlock" in peer:
            if peer.keys() != {"ipBlock"}:
                raise SpecError(f"{at}.ipBlock", "may not be combined with podSelector or namespaceSelector")
            _ip_block(peer["ipBlock"], f"{at}.ipBlock")
        for selector in ("podSelector", "namespaceSelector"):
            if selector in peer:
                _label_selector(peer[selector], f"{at}.{selector}")
    return tuple(peers)


def _ip_block(block: Any, path: str) -> None:
    cidr = _cidr(block.get("cidr") if isinstance(block, Mapping) else None, f"{path}.cidr")
    excepts = _get(block, "except", [])
    if not isinstance(excepts, list):
        raise SpecError(f"{path}.except", "expected a list of CIDRs")
    for j, text in enumerate(excepts):
        inner = _cidr(text, f"{path}.except[{j}]")
        # a longer prefix whose network address lies in cidr: the API server's "strict subset"
        if inner.prefixlen <= cidr.prefixlen or inner.network_address not in cidr:
            raise SpecError(f"{path}.except[{j}]", f"{text} is not a strict subset of cidr {block['cidr']}")


def _cidr(text: Any, path: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        if not isinstance(text, str) or "/" not in text:
            raise ValueError(text)
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise SpecError(path, f"{text!r} is not a CIDR such as 10.0.0.0/8 or fd00::/8") from None


def _label_key(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    return bool(_LABEL_NAME.match(name)) and (not slash or (len(prefix) <= 253 and bool(_SECRET_NAME.match(prefix))))


def valid_label(key: str, value: str) -> bool:
    """Whether ``key=value`` is a Kubernetes label."""
    return _label_key(key) and bool(_LABEL_VALUE.match(value))


def _label_selector(sel: Any, path: str) -> None:
    if not isinstance(sel, Mapping):
        raise SpecError(path, "expected a label selector (matchLabels, matchExpressions)")
    for key, value in _get(sel, "matchLabels", {}).items():
        if not _label_key(key):
            raise SpecError(f"{path}.matchLabels", f"{key!r} is not a label key")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise SpecError(f"{path}.matchLabels.{key}", f"{value!r} is not a label value")
    for i, expr in enumerate(_get(sel, "matchExpressions", [])):
        at = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not _label_key(expr.get("key")):
            raise SpecError(f"{at}.key", f"{expr!r} names no label key")
        op = _choice(expr, "operator", "", f"{at}.operator", _SELECTOR_OPERATORS)
        values = _get(expr, "values", [])
        if (op in ("In", "NotIn")) != bool(values):
            raise SpecError(f"{at}.values", "In and NotIn need values; Exists and DoesNotExist take none")
        for value in values:
            if not isinstance(value, str) or not _LABEL_VALUE.match(value):
                raise SpecError(f"{at}.values", f"{value!r} is not a label value")


def _replace_floor(r: Retention) -> Retention:
    if r.min_file_reserved_time <= r.file_reserved_time:
        return r
    return Retention(**{**r.__dict__, "min_file_reserved_time": r.file_reserved_time})
