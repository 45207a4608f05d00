"""RocketMQ 5.3's authentication and authorization against our broker, driven by Apache's own tools
(tests/support/auth5_scenario.py): rocketmq-tools 5.3.3's mqadmin manages users and ACLs
(createUser, listUser, createAcl, listAcl, deleteUser), and the RocketMQ 4.9.8 Java client signing
with ``AclClientRPCHook`` is allowed on a topic its ACL grants Pub on and refused (NO_PERMISSION,
Apache 5.3.3's remarks) otherwise. tests/compat/apache_broker/test_auth_against_rocketmq.py runs
the same scenario against Apache RocketMQ 5.3.3's broker and compares.

The broker is ``rocketstore broker -c broker.conf`` with Apache's keys. The gRPC port's half (the
5.x Java client) is compared with Apache in tests/compat/apache_broker/test_grpc_auth_against_rocketmq.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from auth5_scenario import ALICE_SECRET, AUTH_KEYS, run_scenario
from broker_process import Broker
from java_driver_support import require_maven_build
from mqadmin5 import build_mqadmin5

pytestmark = pytest.mark.integration


def require_mqadmin5() -> None:
    require_maven_build(build_mqadmin5,
                        "the auth tests run Apache's rocketmq-tools 5.3.3 on Java 17, fetched with Maven")


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory, java_client_built: None) -> Iterator[Broker]:
    require_mqadmin5()
    conf = "".join(f"{key}={value}\n" for key, value in AUTH_KEYS.items())
    broker = Broker(tmp_path_factory.mktemp("auth-broker"), conf)
    with broker.running():
        yield broker
    log = broker.log_text()
    assert "Traceback" not in log, log[-6000:]


def test_mqadmin_manages_users_and_acls_and_the_java_client_obeys(auth_broker: Broker, tmp_path: Path) -> None:
    outcomes = run_scenario(auth_broker.addr, auth_broker.namesrv, tmp_path)
    denied = "User:alice has no permission to access Topic:{} from 127.0.0.1, {}"
    assert outcomes == {
        "createUser": [["create", "user", "to", "ADDR", "success."]],
        "listUser": [["#UserName", "#Password", "#UserType", "#UserStatus"],
                     ["alice", ALICE_SECRET, "Normal", "enable"]],
        "createAcl": [["create", "acl", "to", "ADDR", "success."]],
        # no -i: no source IPs, printed "null" as the answer of Apache's broker prints
        "listAcl": [["#Subject", "#PolicyType", "#Resource", "#Actions", "#SourceIp", "#Decision"],
                    ["User:alice", "Custom", "Topic:AuthOrders", "[Pub]", "null", "Allow"]],
        "send with Pub": ("sent", 1),
        "send without Pub": ("refused", 16, denied.format("AuthPayments", "no matched policies.")),
        "wrong secret": ("refused", 16, "check signature failed."),
        "createAcl deny": [["create", "acl", "to", "ADDR", "success."]],
        "send after Deny": ("refused", 16, denied.format("AuthOrders", "the decision is deny.")),
        "listUser as a Normal user": outcomes["listUser as a Normal user"],
        "deleteUser": [["delete", "user", "to", "ADDR", "success."]],
        "send after deleteUser": ("refused", 16, "User:alice is not found."),
    }, outcomes
    refused_admin = str(outcomes["listUser as a Normal user"])
    assert refused_admin.startswith("Caused by: org.apache.rocketmq.client.exception.MQBrokerException: CODE: 16  "
                                    "DESC: User:alice "
                                    "has no permission to access Cluster:AuthCluster from 127.0.0.1, no matched "
                                    "policies."), refused_admin
