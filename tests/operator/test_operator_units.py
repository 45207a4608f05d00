"""Pure parts of the operator, no cluster: spec parsing, sizing, desired objects, retention policy,
conditions, broker addressing."""

from __future__ import annotations

from typing import Any

import pytest

from rocketstore.broker.broker_config import load_config
from rocketstore.operator.brokers import BrokerAddressing
from rocketstore.operator.catch_up import CatchUp
from rocketstore.operator.conditions import Condition, merge_conditions
from rocketstore.operator.desired import (
    ADDRESS_DIR,
    Owner,
    Plan,
    all_objects,
    broker_conf,
    broker_service_account_name,
    cluster_peers,
    config_hash,
    ingress_address,
    lease_role,
    lease_role_binding,
    load_balancer_addresses,
    service_account,
    stale_names,
    statefulset,
)
from rocketstore.operator.image_policy import ALLOWED_IMAGES_ENV, ImagePolicy
from rocketstore.operator.model import GIB, Retention, SpecError, format_quantity, parse_quantity, parse_spec
from rocketstore.operator.reconcile import broker_access
from rocketstore.operator.retention import decide
from rocketstore.operator.sizing import (
    CONFIG_ALLOWANCE,
    CQ_FILE_SIZE,
    INDEX_FILE_SIZE,
    segments_that_fit,
    size_for_segments,
    volume_size,
)

OWNER = Owner(name="rs", namespace="ns", uid="1234")


def plan(spec: dict[str, Any] | None = None, replicas: int | None = None) -> Plan:
    s = parse_spec(spec or {})
    return Plan(OWNER, s, s.brokers if replicas is None else replicas, volume_size(s))


# -- quantities and spec -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "n"), [("1Gi", GIB), ("512Mi", 512 * 1024**2), ("1G", 10**9), ("1000", 1000),
                                         (5, 5), ("1.5Gi", 3 * GIB // 2)])
def test_parse_quantity(text: str | int, n: int) -> None:
    assert parse_quantity(text) == n


def test_format_quantity_round_trips() -> None:
    assert format_quantity(17 * GIB) == "17Gi"
    assert format_quantity(1536 * 1024**2) == "1536Mi"
    assert format_quantity(1000) == "1000"
    assert parse_quantity(format_quantity(123 * 1024**2)) == 123 * 1024**2


def test_defaults_match_rocketmq() -> None:
    s = parse_spec({})
    assert s.brokers == 1 and s.commit_log.segment_size == GIB and s.flush_disk_type == "ASYNC_FLUSH"
    r = s.retention
    assert (r.file_reserved_time, r.delete_when, r.disk_max_used_space_ratio) == (72, "04", 75)
    assert (r.disk_space_clean_forcibly_ratio, r.disk_space_warning_level_ratio, r.policy) == (0.85, 0.90, "fixed")


@pytest.mark.parametrize(("spec", "field"), [
    ({"brokers": 0}, "brokers"),
    ({"commitLog": {"segmentSize": "4Gi"}}, "commitLog.segmentSize"),
    ({"retention": {"deleteWhen": "25"}}, "retention.deleteWhen"),
    ({"retention": {"diskSpaceCleanForciblyRatio": 0.95}}, "retention.diskSpaceCleanForciblyRatio"),
    ({"retention": {"diskMaxUsedSpaceRatio": 90}}, "retention.diskMaxUsedSpaceRatio"),
    ({"retention": {"policy": "magic"}}, "retention.policy"),
    ({"brokerConfig": {"listenPort": "1"}}, "brokerConfig.listenPort"),
    ({"brokerConfig": {"fileReservedTime": "1"}}, "brokerConfig.fileReservedTime"),
    ({"storage": {"size": "lots"}}, "storage.size"),
])
def test_invalid_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert e.value.field == field
    assert str(e.value).startswith(f"spec.{field}:")


def test_adaptive_floor_follows_a_low_spec_value() -> None:
    assert parse_spec({"retention": {"fileReservedTime": 2}}).retention.min_file_reserved_time == 2


# -- sizing --------------------------------------------------------------------------------------

def test_index_file_size_is_rocketmqs() -> None:
    assert INDEX_FILE_SIZE == 420_000_040


def test_volume_for_ten_one_gib_segments() -> None:
    s = size_for_segments(10, GIB, 1024, 75)
    assert s.commit_log == 11 * GIB  # ten plus the pre-allocated next one
    messages = 11 * GIB // 1024
    assert s.consume_queue == -(-messages * 20 // CQ_FILE_SIZE) * CQ_FILE_SIZE == 234_000_000
    assert s.index == 2 * INDEX_FILE_SIZE
    assert s.config == CONFIG_ALLOWANCE
    assert s.data == 12_952_269_008
    assert s.volume == 17 * GIB  # 12,952,269,008 / 0.75 rounded up to whole GiB
    assert s.data <= s.volume * 0.75


@pytest.mark.parametrize("segments", [1, 2, 10, 100, 1000])
@pytest.mark.parametrize("ratio", [40, 75, 95])
@pytest.mark.parametrize("avg", [128, 1024, 65536])
def test_requested_segments_fit_under_max_used_ratio(segments: int, ratio: int, avg: int) -> None:
    s = size_for_segments(segments, GIB, avg, ratio)
    assert s.data * 100 <= s.volume * ratio
    assert s.volume - GIB < s.data * 100 / ratio  # never more than one GiB of rounding
    assert s.volume % GIB == 0
    assert segments_that_fit(s.volume, GIB, avg, ratio) >= segments


def test_small_messages_need_more_overhead() -> None:
    assert size_for_segments(100, GIB, 128, 75).volume > size_for_segments(100, GIB, 4096, 75).volume


def test_explicit_size_wins_and_fit_is_reported() -> None:
    s = parse_spec({"storage": {"size": "20Gi"}})
    assert volume_size(s) == 20 * GIB
    assert segments_that_fit(20 * GIB, GIB, 1024, 75) == 12
    assert segments_that_fit(1 * GIB, GIB, 1024, 75) == 0


def test_segment_size_scales_the_volume() -> None:
    assert volume_size(parse_spec({"commitLog": {"segmentSize": "64Mi"}, "storage": {"segments": 4}})) == 2 * GIB


# -- desired objects -------------------------------------------------------------------------------

def test_every_object_is_owned_and_labelled() -> None:
    objs = all_objects(plan({"brokers": 3}))
    assert [o["kind"] for o in objs] == [
        "ServiceAccount", "ConfigMap", "Service", "Service", "PodDisruptionBudget", "StatefulSet"]
    for o in objs:
        ref = o["metadata"]["ownerReferences"][0]
        assert ref == {"apiVersion": "rocketstore.io/v1alpha1", "kind": "RocketStore", "name": "rs",
                       "uid": "1234", "controller": True, "blockOwnerDeletion": True}
        assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "rs"
        assert o["metadata"]["namespace"] == "ns"


def test_broker_conf_has_rocketmq_keys_and_peers() -> None:
    conf = broker_conf(plan({"brokers": 2, "flushDiskType": "SYNC_FLUSH", "brokerConfig": {"maxMessageSize": "1024"},
                             "retention": {"fileReservedTime": 48, "deleteWhen": "03;15"}}))
    assert conf["brokerClusterName"] == "rs"
    assert "brokerName" not in conf  # appended per pod from the pod name
    assert conf["listenPort"] == "10911"
    assert conf["storePathRootDir"] == "/home/rocketmq/store"
    assert conf["mappedFileSizeCommitLog"] == str(GIB)
    assert conf["flushDiskType"] == "SYNC_FLUSH"
    assert conf["fileReservedTime"] == "48" and conf["deleteWhen"] == "03;15"
    assert conf["diskMaxUsedSpaceRatio"] == "75"
    assert conf["diskSpaceCleanForciblyRatio"] == "0.85"
    assert conf["clusterPeers"] == ("rs-0@rs-0.rs-headless.ns.svc:10911,rs-1@rs-1.rs-headless.ns.svc:10911")
    assert conf["namesrvListenPort"] == "9876" and conf["httpListenPort"] == "10925"
    assert conf["grpcListenPort"] == "8081"
    assert conf["maxMessageSize"] == "1024"


def test_5x_clients_reach_every_broker_on_the_grpc_port() -> None:
    """Each pod serves gRPC on 8081, and both Services carry it (5.x clients start at the client
    Service; routes then name each broker at its pod's address)."""
    objs = {(o["kind"], o["metadata"]["name"]): o for o in all_objects(plan({"brokers": 2}))}
    container = objs[("StatefulSet", "rs")]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "grpc", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    for name in ("rs", "rs-headless"):
        assert {"name": "grpc", "port": 8081, "targetPort": "grpc", "protocol": "TCP"} \
            in objs[("Service", name)]["spec"]["ports"]


def test_broker_conf_parses_with_the_brokers_own_loader() -> None:
    props = {**broker_conf(plan({"brokers": 2})), "brokerName": "rs-1"}
    bcfg, scfg = load_config(props)
    assert bcfg.broker_name == "rs-1" and bcfg.broker_cluster_name == "rs"
    assert scfg.file_reserved_time == 72 and scfg.mapped_file_size_commit_log == GIB
    assert [p.broker_name for p in bcfg.cluster_peer_list()] == ["rs-0", "rs-1"]


def test_retention_change_does_not_roll_pods_but_image_change_does() -> None:
    base = statefulset(plan())
    tuned = statefulset(plan({"retention": {"fileReservedTime": 12, "deleteWhen": "01"}}))
    other = statefulset(plan({"flushDiskType": "SYNC_FLUSH"}))
    assert base["spec"]["template"] == tuned["spec"]["template"]
    assert base["spec"]["template"] != other["spec"]["template"]
    assert config_hash(broker_conf(plan())) == config_hash(broker_conf(plan({"retention": {"fileReservedTime": 1}})))


def test_metrics_per_queue_renders_the_brokers_key_live() -> None:
    """spec.metrics.perQueue becomes metricsPerQueueEnable (true unless set false), which the
    broker's own loader reads; flipping it rolls no pod (the operator pushes it live), and
    brokerConfig may not set it around the field."""
    assert broker_conf(plan())["metricsPerQueueEnable"] == "true"
    off = broker_conf(plan({"metrics": {"perQueue": False}}))
    assert off["metricsPerQueueEnable"] == "false"
    assert broker_conf(plan({"replication": {"replicasPerGroup": 2}, "metrics": {"perQueue": False}}),
                       1)["metricsPerQueueEnable"] == "false"  # the slaves' broker.conf too
    bcfg, _ = load_config({**off, "brokerName": "rs-0"})
    assert bcfg.metrics_per_queue_enable is False
    off_template = statefulset(plan({"metrics": {"perQueue": False}}))["spec"]["template"]
    assert statefulset(plan())["spec"]["template"] == off_template
    with pytest.raises(SpecError, match=r"brokerConfig\.metricsPerQueueEnable"):
        parse_spec({"brokerConfig": {"metricsPerQueueEnable": "false"}})


def test_statefulset_shape() -> None:
    sts = statefulset(plan({"brokers": 3, "storage": {"storageClassName": "fast", "segments": 10},
                            "scheduling": {"nodeSelector": {"type": "kwok"},
                                           "tolerations": [{"key": "k", "operator": "Exists"}]},
                            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}))
    spec = sts["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "rs-headless"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    claim = spec["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "store"
    assert claim["spec"]["resources"]["requests"]["storage"] == "17Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "brokerName=" in c["command"][2] and "rocketstore broker -c" in c["command"][2]
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}}
    assert pod["nodeSelector"] == {"type": "kwok"} and pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/home/rocketmq/store", "/etc/rocketstore"}


def test_delete_claim_sets_pvc_retention_delete() -> None:
    sts = statefulset(plan({"storage": {"deleteClaim": True}}))
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


def test_plan_replicas_override_spec() -> None:
    assert statefulset(plan({"brokers": 1}, replicas=3))["spec"]["replicas"] == 3


# -- adaptive retention ----------------------------------------------------------------------------

ADAPTIVE = Retention(file_reserved_time=48, policy="adaptive", min_file_reserved_time=6,
                     disk_space_clean_forcibly_ratio=0.85, adaptive_margin=0.05)


def test_fixed_policy_always_answers_the_spec() -> None:
    r = Retention(file_reserved_time=48)
    assert decide(r, 12, 0.99).file_reserved_time == 48
    assert not decide(r, 12, 0.99).pressure


def test_adaptive_lowers_near_forced_cleanup_down_to_the_floor() -> None:
    hours, seen = 48, []
    for _ in range(5):
        d = decide(ADAPTIVE, hours, 0.82)  # >= 0.85 - 0.05
        assert d.pressure
        hours = d.file_reserved_time
        seen.append(hours)
    assert seen == [24, 12, 6, 6, 6]


def test_adaptive_holds_in_the_band_and_raises_below_it() -> None:
    assert decide(ADAPTIVE, 12, 0.78).file_reserved_time == 12  # between 0.75 and 0.80: hold
    assert decide(ADAPTIVE, 12, 0.78).pressure
    seen, hours = [], 6
    for _ in range(4):
        hours = decide(ADAPTIVE, hours, 0.50).file_reserved_time
        seen.append(hours)
    assert seen == [12, 24, 48, 48]
    assert not decide(ADAPTIVE, 48, 0.50).pressure


def test_adaptive_without_usage_keeps_the_current_value() -> None:
    assert decide(ADAPTIVE, 12, None).file_reserved_time == 12
    assert decide(ADAPTIVE, None, None).file_reserved_time == 48
    assert decide(ADAPTIVE, 500, 0.1).file_reserved_time == 48  # spec lowered under us: clamp


# -- conditions, addressing --------------------------------------------------------------------------

def test_last_transition_time_moves_only_on_flips() -> None:
    first = merge_conditions(None, [Condition("Ready", False, "BrokersNotReady")], 1, at="t1")
    same = merge_conditions(first, [Condition("Ready", False, "StillNot", "m")], 2, at="t2")
    flipped = merge_conditions(same, [Condition("Ready", True, "AllBrokersReady")], 2, at="t3")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["reason"] == "StillNot"
    assert same[0]["observedGeneration"] == 2
    assert flipped[0]["lastTransitionTime"] == "t3" and flipped[0]["status"] == "True"


def test_broker_addressing() -> None:
    assert BrokerAddressing().address("rs", "ns", 2) == "rs-2.rs-headless.ns.svc:10911"
    assert BrokerAddressing.from_text("127.0.0.1:{ordinal}0").address("rs", "ns", 2) == "127.0.0.1:20"
    pinned = BrokerAddressing.from_text("ns/rs-0=127.0.0.1:1234")
    assert pinned.address("rs", "ns", 0) == "127.0.0.1:1234"
    assert pinned.address("rs", "ns", 1) == "rs-1.rs-headless.ns.svc:10911"


# -- ACL and TLS Secrets ---------------------------------------------------------------------------

SECURED = {"acl": {"secretName": "rs-acl"},
           "tls": {"secretName": "rs-tls", "trustCertKey": "ca.crt", "clientAuth": "require", "mode": "enforcing"}}


def _secret_mounts(sts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = sts["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"] if "secret" in v}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"] if m["name"] in volumes}
    return volumes, mounts


def test_acl_and_tls_secrets_are_mounted_whole_and_named_in_broker_conf() -> None:
    p = plan(SECURED)
    volumes, mounts = _secret_mounts(statefulset(p))
    assert volumes == {
        "acl": {"name": "acl", "secret": {"secretName": "rs-acl", "defaultMode": 0o440}},
        "tls": {"name": "tls", "secret": {"secretName": "rs-tls", "defaultMode": 0o440}},
    }
    # whole-Secret mounts: kubelet swaps ..data when the Secret changes (subPath files never change)
    assert all("subPath" not in m and "subPathExpr" not in m and m["readOnly"] for m in mounts.values())
    assert "items" not in volumes["acl"]["secret"]
    conf = broker_conf(p)
    assert conf["aclEnable"] == "true"
    assert conf["rocketmq.acl.plain.file"] == mounts["acl"]["mountPath"] + "/plain_acl.yml"
    tls_dir = mounts["tls"]["mountPath"]
    assert (conf["tls.server.certPath"], conf["tls.server.keyPath"], conf["tls.server.trustCertPath"]) == (
        f"{tls_dir}/tls.crt", f"{tls_dir}/tls.key", f"{tls_dir}/ca.crt")
    assert conf["tls.server.mode"] == "enforcing" and conf["tls.server.need.client.auth"] == "require"
    # neither mount sits inside another volume's mount (the ConfigMap's is read-only)
    paths = [m["mountPath"] for m in statefulset(p)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]]
    assert not any(a != b and a.startswith(b + "/") for a in paths for b in paths)


def test_secured_broker_conf_parses_with_the_brokers_own_loader() -> None:
    bcfg, _ = load_config({**broker_conf(plan(SECURED)), "brokerName": "rs-0"})
    assert bcfg.acl_enable is True and bcfg.acl_plain_file == "/etc/rocketstore-acl/plain_acl.yml"
    assert (bcfg.tls_server_mode, bcfg.tls_server_need_client_auth) == ("enforcing", "require")
    assert bcfg.tls_server_key_path == "/etc/rocketstore-tls/tls.key"


def test_no_secrets_means_no_acl_or_tls_keys() -> None:
    conf = broker_conf(plan())
    assert not {k for k in conf if k.startswith("tls.") or k.startswith("rocketmq.acl") or k == "aclEnable"}
    assert _secret_mounts(statefulset(plan())) == ({}, {})
    tls = broker_conf(plan({"tls": {"secretName": "t"}}))
    assert tls["tls.server.mode"] == "permissive" and "tls.server.trustCertPath" not in tls
    assert tls["tls.server.need.client.auth"] == "none"


def test_secret_contents_never_roll_pods_but_another_secret_or_key_does() -> None:
    """The template names Secrets, never their data: kubelet refreshes the files in place.
    Only the reference (Secret name, key, mode) is in the template or broker.conf's hash."""
    base = statefulset(plan(SECURED))["spec"]["template"]
    assert base == statefulset(plan(SECURED))["spec"]["template"]
    other_secret = statefulset(plan({**SECURED, "acl": {"secretName": "rs-acl-2"}}))["spec"]["template"]
    other_key = statefulset(plan({**SECURED, "acl": {"secretName": "rs-acl", "key": "acl.yml"}}))["spec"]["template"]
    other_mode = statefulset(plan({**SECURED, "tls": {**SECURED["tls"], "mode": "permissive"}}))["spec"]["template"]
    assert base["spec"] != other_secret["spec"]  # volume source changes: pods roll
    assert base["metadata"]["annotations"] != other_key["metadata"]["annotations"]  # broker.conf path: roll
    assert base["metadata"]["annotations"] != other_mode["metadata"]["annotations"]
    assert statefulset(plan())["spec"]["template"] != base  # turning ACL/TLS on rolls too


@pytest.mark.parametrize(("spec", "field"), [
    ({"acl": {}}, "acl.secretName"),
    ({"acl": {"secretName": "Bad_Name"}}, "acl.secretName"),
    ({"acl": {"secretName": "a", "key": ".."}}, "acl.key"),
    ({"acl": {"secretName": "a", "key": "..data"}}, "acl.key"),
    ({"acl": {"secretName": "a", "key": "conf/plain_acl.yml"}}, "acl.key"),
    ({"tls": {"secretName": "t", "mode": "strict"}}, "tls.mode"),
    ({"tls": {"secretName": "t", "clientAuth": "always"}}, "tls.clientAuth"),
    ({"tls": {"secretName": "t", "clientAuth": "require"}}, "tls.trustCertKey"),
    ({"tls": {"secretName": "t", "certKey": "pem", "keyKey": "pem"}}, "tls.keyKey"),
    ({"tls": {"secretName": "t", "trustCertKey": "tls.crt"}}, "tls.trustCertKey"),
    ({"acl": {"secretName": "a", "operatorCredentials": {}}}, "acl.operatorCredentials.secretName"),
    ({"acl": {"secretName": "a", "operatorCredentials": {"secretName": "c", "accessKeyKey": "k",
                                                         "secretKeyKey": "k"}}},
     "acl.operatorCredentials.secretKeyKey"),
    ({"acl": {"secretName": "a", "operatorCredentials": {"secretName": "c", "accessKeyKey": "a/b"}}},
     "acl.operatorCredentials.accessKeyKey"),
    ({"tls": {"secretName": "t", "caKey": "../ca"}}, "tls.caKey"),
    ({"acl": {"secretName": "a"}, "brokerConfig": {"aclEnable": "false"}}, "brokerConfig.aclEnable"),
    ({"tls": {"secretName": "t"}, "brokerConfig": {"tls.server.mode": "disabled"}}, "brokerConfig.tls.server.mode"),
])
def test_invalid_secret_references_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert e.value.field == field


def test_operator_credentials_and_ca_key_parse_with_defaults() -> None:
    s = parse_spec({"acl": {"secretName": "a", "operatorCredentials": {"secretName": "op"}},
                    "tls": {"secretName": "t"}})
    assert s.acl is not None and s.acl.operator_credentials is not None and s.tls is not None
    creds = s.acl.operator_credentials
    assert (creds.secret_name, creds.access_key_key, creds.secret_key_key) == ("op", "accessKey", "secretKey")
    assert s.tls.ca_key == "ca.crt"
    assert parse_spec({"acl": {"secretName": "a"}}).acl.operator_credentials is None  # type: ignore[union-attr]
    # the operator's credentials are not mounted: naming them does not roll the pods
    with_creds = statefulset(plan({"acl": {"secretName": "a", "operatorCredentials": {"secretName": "op"}}}))
    assert with_creds["spec"]["template"] == statefulset(plan({"acl": {"secretName": "a"}}))["spec"]["template"]


def test_acl_keys_stay_free_in_broker_config_without_spec_acl() -> None:
    conf = broker_conf(plan({"brokerConfig": {"aclEnable": "true"}}))
    assert conf["aclEnable"] == "true" and "rocketmq.acl.plain.file" not in conf


SECURE_SPEC = {"acl": {"secretName": "acl", "operatorCredentials": {"secretName": "op"}},
               "tls": {"secretName": "tls", "mode": "enforcing"}}


def test_broker_access_from_the_spec_and_its_secrets() -> None:
    spec = parse_spec(SECURE_SPEC)
    secrets = {"op": {"accessKey": b"operatorAK\n", "secretKey": b" operator-secret\n"},
               "tls": {"tls.crt": b"CERT", "tls.key": b"KEY", "ca.crt": b"-----CA-----"}}
    access = broker_access(spec, secrets)
    assert access.credentials is not None
    assert (access.credentials.access_key, access.credentials.secret_key) == ("operatorAK", "operator-secret")
    assert access.tls and access.trust_pem == "-----CA-----"
    assert access.client_cert_pem is None  # clientAuth none: no certificate presented
    # without ca.crt: TLS all the same, unverified; a half-filled credentials Secret: unsigned
    unverified = broker_access(spec, {"op": {"accessKey": b"operatorAK"}, "tls": {"tls.crt": b"C", "tls.key": b"K"}})
    assert unverified.tls and unverified.trust_pem is None and unverified.credentials is None
    # Secrets the operator could not read at all: TLS unverified, nothing to sign with
    empty = broker_access(spec, {})
    assert empty.tls and empty.trust_pem is None and empty.credentials is None
    # clientAuth require: the Secret's certificate and key are presented
    required = parse_spec({**SECURE_SPEC, "tls": {"secretName": "tls", "clientAuth": "require",
                                                  "trustCertKey": "ca.crt"}})
    presented = broker_access(required, secrets)
    assert (presented.client_cert_pem, presented.client_key_pem) == (b"CERT", b"KEY")
    # mode disabled, or no spec.tls: plain TCP
    assert not broker_access(parse_spec({**SECURE_SPEC, "tls": {"secretName": "tls", "mode": "disabled"}}),
                             secrets).tls
    assert not broker_access(parse_spec({}), secrets).tls


# -- external access -------------------------------------------------------------------------------

EXTERNAL: dict[str, Any] = {"brokers": 3, "externalAccess": {"type": "NodePort", "basePort": 31000,
                                                             "namesrvNodePort": 30876}}


def test_external_access_publishes_each_broker_on_its_own_node_port() -> None:
    objs = {(o["kind"], o["metadata"]["name"]): o for o in all_objects(plan(EXTERNAL))}
    for i in range(3):
        svc = objs[("Service", f"rs-{i}-external")]["spec"]
        assert svc["type"] == "NodePort"
        assert svc["selector"]["statefulset.kubernetes.io/pod-name"] == f"rs-{i}"
        # the gRPC port too (5.x clients), by default 256 above (every remoting port), to the pod's 8081
        assert svc["ports"] == [{"name": "remoting", "port": 31000 + i, "targetPort": 31000 + i,
                                 "nodePort": 31000 + i, "protocol": "TCP"},
                                {"name": "grpc", "port": 31256 + i, "targetPort": "grpc",
                                 "nodePort": 31256 + i, "protocol": "TCP"}]
    namesrv = objs[("Service", "rs-namesrv-external")]["spec"]
    assert namesrv["ports"][0]["nodePort"] == 30876 and "statefulset.kubernetes.io/pod-name" not in namesrv["selector"]
    # no Service or container port claims 10911: no broker listens there
    for key in (("Service", "rs"), ("Service", "rs-headless")):
        assert all(p["name"] != "remoting" for p in objs[key]["spec"]["ports"])
    container = objs[("StatefulSet", "rs")]["spec"]["template"]["spec"]["containers"][0]
    assert all(p["name"] != "remoting" for p in container["ports"])
    env = {e["name"]: e for e in container["env"]}
    assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert env["EXTERNAL_BASE_PORT"]["value"] == "31000" and "EXTERNAL_HOST" not in env
    # the pods keep listening on 8081; each broker advertises its published gRPC port, found from
    # its remoting port (the start command's listenPort) by one offset in the shared broker.conf
    assert {"name": "grpc", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    conf = broker_conf(plan(EXTERNAL))
    assert (conf["grpcListenPort"], conf["grpcAdvertisedPortOffset"]) == ("8081", "256")
    bcfg, _ = load_config({**conf, "brokerName": "rs-2", "listenPort": "31002"})
    assert bcfg.listen_port + bcfg.grpc_advertised_port_offset == 31258
    written = broker_conf(plan({**EXTERNAL, "externalAccess": {**EXTERNAL["externalAccess"], "grpcBasePort": 32081}}))
    assert written["grpcAdvertisedPortOffset"] == "1081"
    assert not [o for o in all_objects(plan()) if o["metadata"]["name"].endswith("-external")]
    assert "grpcAdvertisedPortOffset" not in broker_conf(plan())


def test_external_start_command_writes_the_pods_port_and_address(tmp_path: Any) -> None:
    """Runs the container's start command with sh; ``rocketstore`` is replaced by a script that
    prints the broker.conf it was given (the real broker runs it in tests/kubernetes)."""
    import os
    import subprocess

    container = statefulset(plan({**EXTERNAL, "externalAccess": {**EXTERNAL["externalAccess"], "host": "ext.example"}})
                            )["spec"]["template"]["spec"]["containers"][0]
    (tmp_path / "conf").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "conf" / "broker.conf").write_text("listenPort=10911\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "rocketstore").write_text('#!/bin/sh\ncat "$3"\n')
    (tmp_path / "bin" / "rocketstore").chmod(0o755)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(POD_NAME="rs-2", HOST_IP="10.1.2.3", CONF_DIR=str(tmp_path / "conf"), RUN_DIR=str(tmp_path / "run"),
               PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    out = subprocess.run(container["command"], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[1:] == ["brokerName=rs-2", "listenPort=31002", "brokerIP1=ext.example"]
    del env["EXTERNAL_HOST"]
    out = subprocess.run(container["command"], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "brokerIP1=10.1.2.3"


def test_external_peers_are_the_addresses_clients_reach() -> None:
    from rocketstore.operator.desired import cluster_peers, listen_port

    spec = parse_spec(EXTERNAL)
    assert [listen_port(spec, i) for i in range(3)] == [31000, 31001, 31002]
    # pods placed: their nodes' addresses; a pod not placed yet: its DNS name, on its own port
    assert cluster_peers(OWNER, 3, spec, {0: "10.0.0.1", 1: "10.0.0.2"}).split(",") == [
        "rs-0@10.0.0.1:31000", "rs-1@10.0.0.2:31001", "rs-2@rs-2.rs-headless.ns.svc:31002"]
    pinned = parse_spec({**EXTERNAL, "externalAccess": {"host": "brokers.example"}})
    assert cluster_peers(OWNER, 2, pinned, {0: "10.0.0.1"}) == "rs-0@brokers.example:30911,rs-1@brokers.example:30912"
    assert cluster_peers(OWNER, 2, parse_spec({})) == ("rs-0@rs-0.rs-headless.ns.svc:10911,"
                                                       "rs-1@rs-1.rs-headless.ns.svc:10911")
    assert BrokerAddressing().address("rs", "ns", 1, listen_port(spec, 1)) == "rs-1.rs-headless.ns.svc:31001"


LOAD_BALANCER: dict[str, Any] = {"brokers": 3, "externalAccess": {"type": "LoadBalancer", "basePort": 31000}}


def test_load_balancer_publishes_each_broker_on_a_balancer_of_its_own() -> None:
    """One LoadBalancer per broker on its listen port (node ports left to Kubernetes), one for the
    name servers on 9876; the pods wait in an init container for their address from the
    addresses ConfigMap, which holds what the operator has observed, for current brokers only."""
    p = Plan(OWNER, parse_spec(LOAD_BALANCER), 2, volume_size(parse_spec(LOAD_BALANCER)),
             external_addresses={1: "203.0.113.7", 2: "203.0.113.8"})
    objs = {(o["kind"], o["metadata"]["name"]): o for o in all_objects(p)}
    for i in range(2):
        svc = objs[("Service", f"rs-{i}-external")]["spec"]
        assert svc["type"] == "LoadBalancer"
        assert svc["selector"]["statefulset.kubernetes.io/pod-name"] == f"rs-{i}"
        assert svc["ports"] == [{"name": "remoting", "port": 31000 + i, "targetPort": 31000 + i, "protocol": "TCP"},
                                {"name": "grpc", "port": 31256 + i, "targetPort": "grpc", "protocol": "TCP"}]
    assert ("Service", "rs-2-external") not in objs  # replicas 2: a third broker is not there
    namesrv = objs[("Service", "rs-namesrv-external")]["spec"]
    assert namesrv["type"] == "LoadBalancer"
    assert namesrv["ports"] == [{"name": "namesrv", "port": 9876, "targetPort": "namesrv", "protocol": "TCP"}]
    addresses = objs[("ConfigMap", "rs-addresses")]
    assert addresses["data"] == {"rs-1": "203.0.113.7"}
    assert addresses["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid

    pod = objs[("StatefulSet", "rs")]["spec"]["template"]["spec"]
    container, init = pod["containers"][0], pod["initContainers"][0]
    assert {"name": "addresses", "configMap": {"name": "rs-addresses"}} in pod["volumes"]
    mount = {"name": "addresses", "mountPath": ADDRESS_DIR, "readOnly": True}
    assert mount in container["volumeMounts"] and init["volumeMounts"] == [mount]
    assert "subPath" not in mount  # kubelet updates whole-volume mounts only
    assert init["image"] == container["image"] and init["securityContext"] == container["securityContext"]
    assert init["resources"] == container["resources"] and "livenessProbe" not in init
    env = {e["name"]: e for e in container["env"]}
    assert env["ADDRESS_DIR"]["value"] == ADDRESS_DIR and "HOST_IP" not in env
    # an address appearing changes the ConfigMap only, never the pod template (no rollout)
    assert statefulset(p) == statefulset(plan(LOAD_BALANCER, replicas=2))

    # a fixed host: advertised at once, nothing to wait for
    fixed = all_objects(plan({**LOAD_BALANCER, "externalAccess": {**LOAD_BALANCER["externalAccess"],
                                                                  "host": "mq.example"}}))
    assert not [o for o in fixed if o["metadata"]["name"] == "rs-addresses"]
    sts = next(o for o in fixed if o["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    assert "initContainers" not in sts and all(v["name"] != "addresses" for v in sts["volumes"])


def test_load_balancer_broker_waits_for_its_address_then_advertises_it(tmp_path: Any) -> None:
    """Runs the init container's and the broker container's commands with sh, as kubelet runs
    them: the init container blocks until the pod's key appears in the mounted ConfigMap; the
    broker then advertises it; without it the broker does not start (rather than advertise a pod
    address no client outside can reach). ``rocketstore`` is replaced by a script that prints the
    broker.conf it was given."""
    import os
    import subprocess
    import time

    pod = statefulset(plan(LOAD_BALANCER))["spec"]["template"]["spec"]
    container, init = pod["containers"][0], pod["initContainers"][0]
    for d in ("conf", "run", "bin", "addresses"):
        (tmp_path / d).mkdir()
    (tmp_path / "conf" / "broker.conf").write_text("listenPort=10911\n")
    (tmp_path / "bin" / "rocketstore").write_text('#!/bin/sh\ncat "$3"\n')
    (tmp_path / "bin" / "rocketstore").chmod(0o755)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(POD_NAME="rs-1", CONF_DIR=str(tmp_path / "conf"), RUN_DIR=str(tmp_path / "run"),
               ADDRESS_DIR=str(tmp_path / "addresses"), PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")

    refused = subprocess.run(container["command"], env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and not (tmp_path / "run" / "broker.conf").exists()

    waiting = subprocess.Popen(init["command"], env={**env, "ADDRESS_DIR": str(tmp_path / "addresses")},
                               stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        assert waiting.poll() is None  # still waiting: no address yet
        (tmp_path / "addresses" / "rs-0").write_text("198.51.100.1")  # another broker's: not enough
        time.sleep(2.5)
        assert waiting.poll() is None
        (tmp_path / "addresses" / "rs-1").write_text("lb-1.example.net")
        assert waiting.wait(timeout=10) == 0
        assert "advertising lb-1.example.net" in (waiting.stdout.read() if waiting.stdout else "")
    finally:
        waiting.kill()
        waiting.wait()
    out = subprocess.run(container["command"], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[1:] == ["brokerName=rs-1", "listenPort=31001", "brokerIP1=lb-1.example.net"]


def test_ingress_address_and_the_brokers_it_belongs_to() -> None:
    def svc(name: str, *ingress: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"loadBalancer": {"ingress": list(ingress)} if ingress else {}}}

    assert ingress_address(svc("x", {"ip": "203.0.113.1", "hostname": "a.example"})) == "203.0.113.1"
    assert ingress_address(svc("x", {"hostname": "a.elb.example"})) == "a.elb.example"  # AWS: a name only
    assert ingress_address(svc("x")) is None and ingress_address({"metadata": {"name": "x"}}) is None
    services = [svc("rs-0-external", {"ip": "203.0.113.1"}), svc("rs-1-external"),
                svc("rs-2-external", {"hostname": "b.example"}), svc("rs-namesrv-external", {"ip": "203.0.113.9"}),
                svc("other-0-external", {"ip": "192.0.2.1"})]
    assert load_balancer_addresses(OWNER, 3, services) == {0: "203.0.113.1", 2: "b.example"}
    assert load_balancer_addresses(OWNER, 2, services) == {0: "203.0.113.1"}
    # the peers pushed to the brokers: balancers where assigned, DNS while pending
    assert cluster_peers(OWNER, 3, parse_spec(LOAD_BALANCER), {0: "203.0.113.1", 2: "b.example"}).split(",") == [
        "rs-0@203.0.113.1:31000", "rs-1@rs-1.rs-headless.ns.svc:31001", "rs-2@b.example:31002"]


def test_stale_names_are_the_objects_this_rocketstore_controls_and_no_longer_wants() -> None:
    def svc(name: str, uid: str | None, controller: bool = True) -> dict[str, Any]:
        refs = [] if uid is None else [{"uid": uid, "controller": controller}]
        return {"metadata": {"name": name, "ownerReferences": refs}}

    desired = all_objects(plan(EXTERNAL, replicas=1))
    existing = [svc("rs-0-external", OWNER.uid), svc("rs-1-external", OWNER.uid), svc("rs-2-external", OWNER.uid),
                svc("rs-namesrv-external", OWNER.uid), svc("rs", OWNER.uid), svc("rs-headless", OWNER.uid),
                svc("rs-3-external", None),  # made by someone else, our name pattern: not ours
                svc("rs-4-external", "another-uid"),  # another owner's (a recreated RocketStore, say)
                svc("rs-5-external", OWNER.uid, controller=False)]  # merely referencing us
    assert stale_names(OWNER, desired, "Service", existing) == ["rs-1-external", "rs-2-external"]
    # external access off: every external Service goes, the store's own Services stay
    assert stale_names(OWNER, all_objects(plan({"brokers": 3})), "Service", existing) == [
        "rs-0-external", "rs-1-external", "rs-2-external", "rs-namesrv-external"]
    # a load balancer no longer waiting for addresses: its ConfigMap goes
    configmaps = [svc("rs-config", OWNER.uid), svc("rs-addresses", OWNER.uid)]
    assert stale_names(OWNER, all_objects(plan(LOAD_BALANCER)), "ConfigMap", configmaps) == []
    assert stale_names(OWNER, desired, "ConfigMap", configmaps) == ["rs-addresses"]


def test_load_balancer_spec_and_merge_dropping_a_condition() -> None:
    ext = parse_spec({"brokers": 3, "externalAccess": {"type": "LoadBalancer", "basePort": 30000,
                                                       "namesrvNodePort": 30001}}).external_access
    # namesrvNodePort means nothing to a load balancer: no clash with the brokers' ports
    assert ext is not None and ext.load_balancer and ext.waits_for_address
    fixed = parse_spec({"externalAccess": {"type": "LoadBalancer", "host": "mq.example"}}).external_access
    assert fixed is not None and not fixed.waits_for_address
    with pytest.raises(SpecError) as e:  # the start command reads it
        parse_spec({"podTemplate": {"env": [{"name": "ADDRESS_DIR", "value": "/"}]}})
    assert e.value.field == "podTemplate.env[0].name"
    old = merge_conditions(None, [Condition("ExternalAccessReady", False, "LoadBalancerPending")], 1)
    merged = merge_conditions(old, [Condition("Ready", True, "AllBrokersReady")], 2, drop=["ExternalAccessReady"])
    assert [c["type"] for c in merged] == ["Ready"]
    assert [c["type"] for c in merge_conditions(old, [], 2)] == ["ExternalAccessReady"]


def test_grpc_ports_clear_every_slave_port_and_a_balancer_skips_the_node_port_check() -> None:
    ext = parse_spec({"brokers": 2, "replication": {"replicasPerGroup": 2},
                      "externalAccess": {"basePort": 30000, "grpcBasePort": 30128}}).external_access
    assert ext is not None and [ext.grpc_port(1), ext.grpc_port(1, 1)] == [30129, 30193]
    with pytest.raises(SpecError) as e:  # slave 1's remoting ports run up to 30127
        parse_spec({"replication": {"replicasPerGroup": 2},
                    "externalAccess": {"basePort": 30000, "grpcBasePort": 30100}})
    assert e.value.field == "externalAccess.grpcBasePort"
    assert parse_spec({"externalAccess": {"type": "LoadBalancer", "grpcBasePort": 30000,
                                          "namesrvNodePort": 30001}}).external_access


@pytest.mark.parametrize(("external", "field"), [
    ({"type": "ClusterIP"}, "externalAccess.type"),
    ({"basePort": 65534}, "externalAccess.basePort"),  # 3 brokers: 65536 is not a port
    ({"basePort": 30000, "namesrvNodePort": 30063}, "externalAccess.namesrvNodePort"),
    # the gRPC ports: every ordinal's (64) apart from the remoting ports, in range, and clear of
    # the name servers' node port
    ({"basePort": 30000, "grpcBasePort": 30063}, "externalAccess.grpcBasePort"),
    ({"basePort": 30064, "grpcBasePort": 30001}, "externalAccess.grpcBasePort"),
    ({"grpcBasePort": 65534}, "externalAccess.grpcBasePort"),
    ({"basePort": 65300}, "externalAccess.grpcBasePort"),  # unset: basePort + 256, past 65535
    ({"basePort": 30000, "namesrvNodePort": 30300}, "externalAccess.namesrvNodePort"),  # in 30256..30319
    ({"basePort": 30000, "grpcBasePort": 31000, "namesrvNodePort": 31063}, "externalAccess.namesrvNodePort"),
])
def test_invalid_external_access_names_the_field(external: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"brokers": 3, "externalAccess": external})
    assert e.value.field == field


def test_image_policy_allows_the_default_and_matching_patterns_only() -> None:
    policy = ImagePolicy.from_options("rocketstore/rocketstore:0.1.0", None,
                                      {ALLOWED_IMAGES_ENV: "reg.local/rs:*, reg.local/tools/*:7"})
    assert policy.patterns == ("reg.local/rs:*", "reg.local/tools/*:7")
    assert policy.refusal(None) is None  # no spec.image: the default
    assert policy.refusal("rocketstore/rocketstore:0.1.0") is None
    assert policy.refusal("reg.local/rs:2.0") is None
    assert policy.refusal("reg.local/tools/debug:7") is None
    refused = policy.refusal("reg.local/rs-evil:2.0")
    assert refused is not None and "'reg.local/rs-evil:2.0' is not an allowed broker image" in refused
    assert "reg.local/rs:*" in refused and "allowedBrokerImages" in refused
    assert policy.refusal("rocketstore/rocketstore:0.2.0") is not None  # another tag is another image
    # the flag wins over the environment; nothing given: the default image alone
    assert ImagePolicy.from_options("d:1", "x:*", {ALLOWED_IMAGES_ENV: "y:*"}).patterns == ("x:*",)
    assert ImagePolicy.from_options("d:1", None, {}).refusal("anything:1") is not None
    assert ImagePolicy.from_options("d:1", "*", {}).refusal("anything/at/all:1") is None


# -- automatic failover: what the broker pods may do with Leases --------------------------------------

def test_the_brokers_may_get_create_and_update_leases_of_their_namespace_and_nothing_else() -> None:
    role, binding = lease_role(OWNER), lease_role_binding(OWNER)
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "ns"
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    sa = service_account(plan())
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "ns"}]
    assert sa["metadata"]["name"] == broker_service_account_name("rs") == "rs-broker"
    for obj in (role, binding):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid


def test_the_uninstall_hook_removes_only_the_operators_finalizer() -> None:
    from rocketstore.operator.uninstall import release_patch

    def store(*finalizers: str) -> dict[str, Any]:
        return {"metadata": {"name": "rs", "resourceVersion": "42", "finalizers": list(finalizers) or None}}

    assert release_patch(store()) is None
    assert release_patch(store("example.com/backup")) is None
    # the last finalizer gone: null, so the merge patch removes the list
    assert release_patch(store("rocketstore.io/operator")) == {
        "metadata": {"finalizers": None, "resourceVersion": "42"}}
    # someone else's stays; the resourceVersion read makes a store changed since answer 409
    assert release_patch(store("example.com/backup", "rocketstore.io/operator")) == {
        "metadata": {"finalizers": ["example.com/backup"], "resourceVersion": "42"}}


def test_catch_up_waits_one_timer_run_and_for_running_handlers() -> None:
    gate = CatchUp()
    assert not gate.due("a", 1, None, handler_running=False)  # first look: a handler may be on its way
    assert gate.due("a", 1, None, handler_running=False)  # second look, still behind: the timer does it
    assert not gate.due("a", 1, None, handler_running=False)  # and starts counting again after it
    assert not gate.due("b", 2, 1, handler_running=False)
    assert not gate.due("b", 2, 1, handler_running=True)  # a handler holds the store: not now
    assert gate.due("b", 2, 1, handler_running=False)
    assert not gate.due("c", 3, 2, handler_running=False)
    assert not gate.due("c", 4, 2, handler_running=False)  # a newer generation: its own grace
    assert gate.due("c", 4, 2, handler_running=False)
    assert not gate.due("d", 5, 4, handler_running=False)
    assert not gate.due("d", 5, 5, handler_running=False)  # reconciled meanwhile: forgotten
    assert not gate.due("d", 6, 5, handler_running=False)
    gate.forget("d")  # the store was deleted
    assert not gate.due("d", 6, 5, handler_running=False)
    gate.failed("d", 6)  # refused for good: not this generation again, the next one as usual
    assert not gate.due("d", 6, 5, handler_running=False)
    assert not gate.due("d", 7, 5, handler_running=False)
    assert gate.due("d", 7, 5, handler_running=False)
