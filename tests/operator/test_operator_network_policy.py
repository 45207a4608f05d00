"""spec.networkPolicy, no cluster: parsing (errors name the field), the NetworkPolicy the operator
builds (who reaches which port), and the operator's own peer from its options."""

from __future__ import annotations

from typing import Any

import pytest

from rocketstore.operator.desired import GRPC_PORT, LISTEN_PORT, NAMESRV_PORT, Owner, Plan, all_objects, network_policy
from rocketstore.operator.main import NAMESPACE_ENV, OperatorOptions, operator_peer
from rocketstore.operator.model import SpecError, parse_spec
from rocketstore.operator.sizing import volume_size

OWNER = Owner(name="rs", namespace="ns", uid="1234")
OPERATOR = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "rocketstore-operator"}}}
CLIENTS = {"namespaceSelector": {"matchLabels": {"team": "payments"}}}
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
STORE = {"app.kubernetes.io/name": "rocketstore", "app.kubernetes.io/instance": "rs"}


def plan(spec: dict[str, Any], operator: dict[str, Any] | None = OPERATOR) -> Plan:
    s = parse_spec(spec)
    return Plan(OWNER, s, s.brokers, volume_size(s), operator_peer=operator)


def ports(rule: dict[str, Any]) -> list[tuple[int, int | None]]:
    return [(p["port"], p.get("endPort")) for p in rule["ports"]]


def rule_from(policy: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    (rule,) = [r for r in policy["spec"]["ingress"] if peer in r["from"]]
    return rule


def test_no_network_policy_without_the_field() -> None:
    p = plan({"brokers": 2})
    assert network_policy(p) is None
    assert not any(o["kind"] == "NetworkPolicy" for o in all_objects(p))


def test_peers_reach_the_client_ports_prometheus_the_metrics_port_the_store_everything() -> None:
    p = plan({"brokers": 2, "metrics": {"port": 10930},
              "networkPolicy": {"from": [CLIENTS], "metricsFrom": [PROMETHEUS]}})
    policy = network_policy(p)
    assert policy is not None
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["metadata"]["name"] == "rs"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "1234"
    assert policy["metadata"]["labels"]["app.kubernetes.io/instance"] == "rs"
    # masters and slaves alike: the store's selector, which every broker pod carries
    assert policy["spec"]["podSelector"] == {"matchLabels": STORE}
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # the brokers' own connections out stay open
    # the store's own pods: every port (HA on listenPort + 1, registration with peers' name servers)
    own = rule_from(policy, {"podSelector": {"matchLabels": STORE}})
    assert "ports" not in own and own["from"] == [{"podSelector": {"matchLabels": STORE}}]
    assert ports(rule_from(policy, CLIENTS)) == [(LISTEN_PORT, None), (NAMESRV_PORT, None), (GRPC_PORT, None)]
    assert ports(rule_from(policy, PROMETHEUS)) == [(10930, None)]
    # the operator: remoting (admin pushes) and HTTP (/metrics of masters), nothing else
    assert ports(rule_from(policy, OPERATOR)) == [(LISTEN_PORT, None), (10930, None)]
    assert len(policy["spec"]["ingress"]) == 4
    # applied before the pods exist
    kinds = [o["kind"] for o in all_objects(p)]
    assert kinds.index("NetworkPolicy") < kinds.index("StatefulSet")


def test_empty_lists_let_in_only_the_store_and_the_operator() -> None:
    """An ingress rule with an empty ``from`` would admit everyone: no peers, no rule."""
    policy = network_policy(plan({"networkPolicy": {}}))
    assert policy is not None
    assert [r["from"] for r in policy["spec"]["ingress"]] == [[{"podSelector": {"matchLabels": STORE}}], [OPERATOR]]
    assert all(r["from"] for r in policy["spec"]["ingress"])


def test_without_an_operator_peer_the_policy_names_no_operator() -> None:
    policy = network_policy(plan({"networkPolicy": {"from": [CLIENTS]}}, operator=None))
    assert policy is not None
    assert [r["from"] for r in policy["spec"]["ingress"]] == [[{"podSelector": {"matchLabels": STORE}}], [CLIENTS]]


def test_external_access_ports_cover_every_broker_and_slave() -> None:
    """Each broker listens on its own port: masters basePort + i, slave k basePort + 64 k + i; the
    name servers stay on 9876 in the pod (the node port maps onto it)."""
    p = plan({"brokers": 3, "externalAccess": {"basePort": 31000, "namesrvNodePort": 30876},
              "replication": {"replicasPerGroup": 2},
              "networkPolicy": {"from": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}})
    policy = network_policy(p)
    assert policy is not None
    remoting = [(31000, 31002), (31064, 31066)]
    assert ports(rule_from(policy, {"ipBlock": {"cidr": "203.0.113.0/24"}})) == [
        *remoting, (NAMESRV_PORT, None), (GRPC_PORT, None)]
    assert ports(rule_from(policy, OPERATOR)) == [*remoting, (10925, None)]
    # one broker: a single port, no range
    single = network_policy(plan({"externalAccess": {"basePort": 31000},
                                  "networkPolicy": {"from": [CLIENTS]}}))
    assert single is not None and ports(rule_from(single, CLIENTS))[0] == (31000, None)


@pytest.mark.parametrize(("policy", "field"), [
    ({"from": [{}]}, "networkPolicy.from[0]"),
    ({"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}, "networkPolicy.from[0].ipBlock"),
    ({"from": [{"ipBlock": {"cidr": "10.0.0.0"}}]}, "networkPolicy.from[0].ipBlock.cidr"),
    ({"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]},
     "networkPolicy.from[0].ipBlock.except[0]"),
    ({"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}}]},
     "networkPolicy.from[0].ipBlock.except[0]"),
    ({"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "fd00::/16"]}}]},
     "networkPolicy.from[0].ipBlock.except[1]"),
    ({"metricsFrom": [CLIENTS, {"podSelector": {"matchLabels": {"app": "bad value!"}}}]},
     "networkPolicy.metricsFrom[1].podSelector.matchLabels.app"),
    ({"from": [{"namespaceSelector": {"matchLabels": {"-bad": "x"}}}]},
     "networkPolicy.from[0].namespaceSelector.matchLabels"),
    ({"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}]},
     "networkPolicy.from[0].podSelector.matchExpressions[0].values"),
    ({"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]}}]},
     "networkPolicy.from[0].podSelector.matchExpressions[0].values"),
    ({"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}}]},
     "networkPolicy.from[0].podSelector.matchExpressions[0].operator"),
    ({"from": [{"podSelector": {}, "ports": [80]}]}, "networkPolicy.from[0].ports"),
])
def test_invalid_peers_name_the_field(policy: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"networkPolicy": policy})
    assert e.value.field == field


def test_valid_peers_pass_as_written() -> None:
    peers = [{"podSelector": {}},
             {"namespaceSelector": {"matchExpressions": [{"key": "example.com/team", "operator": "In",
                                                          "values": ["a", "b"]}]},
              "podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
             {"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:1::/32"]}}]
    parsed = parse_spec({"networkPolicy": {"from": peers}}).network_policy
    assert parsed is not None and list(parsed.from_peers) == peers and parsed.metrics_from == ()


def test_operator_peer_from_options() -> None:
    opts = OperatorOptions(operator_pod_selector="app.kubernetes.io/name=rocketstore-operator,"
                                                 "app.kubernetes.io/instance=rso")
    assert operator_peer(opts, {NAMESPACE_ENV: "ops"}) == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "rocketstore-operator",
                                        "app.kubernetes.io/instance": "rso"}}}
    # --operator-namespace wins over the environment
    flagged = OperatorOptions(operator_pod_selector="app=op", operator_namespace="other")
    assert operator_peer(flagged, {NAMESPACE_ENV: "ops"})["namespaceSelector"] == {  # type: ignore[index]
        "matchLabels": {"kubernetes.io/metadata.name": "other"}}
    # outside a pod: no selector, no peer
    assert operator_peer(OperatorOptions(), {NAMESPACE_ENV: "ops"}) is None
    with pytest.raises(ValueError, match="namespace"):
        operator_peer(OperatorOptions(operator_pod_selector="app=op"), {})
    with pytest.raises(ValueError, match="'app' is not a label"):
        operator_peer(OperatorOptions(operator_pod_selector="app"), {NAMESPACE_ENV: "ops"})
