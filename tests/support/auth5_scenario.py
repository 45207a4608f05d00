"""RocketMQ 5.3 authentication and authorization scenarios, run against any broker: Apache 5.3.3's
mqadmin manages users and ACLs, the RocketMQ 4.9.8 Java client (``AclClientRPCHook``) sends on the
remoting port (:func:`run_scenario`), the RocketMQ 5.x Java client sends and receives on the gRPC
port (:func:`run_grpc_scenario`; Apache's gRPC port is its proxy's, with :data:`PROXY_AUTH_CONFIG`).

:func:`run_scenario` returns each step's outcome with the broker's address taken out, so that the
outcomes of our broker and of Apache RocketMQ 5.3.3's broker can be compared as they are
(tests/compat/apache_broker/test_auth_against_rocketmq.py) and asserted one by one
(tests/compat/mqadmin/test_mqadmin_auth.py). Both brokers run with :data:`AUTH_KEYS` (and cluster :data:`CLUSTER`).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from java5_driver import client_log, drive, of
from java_rocketmq import ClientDriver
from mqadmin5 import run_mqadmin5, tools_home

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb

ROOT, ROOT_SECRET = "rocketmq2", "root-secret-1"
#: both brokers' cluster: mqadmin's verbs touch the resource ``Cluster:CLUSTER``
CLUSTER = "AuthCluster"
ALICE, ALICE_SECRET = "alice", "alice-secret-1"

#: broker.conf keys of a RocketMQ 5.3 broker locked down with Apache's default providers
AUTH_KEYS: dict[str, str] = {
    "brokerClusterName": CLUSTER,
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
    "authenticationMetadataProvider":
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
    "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
    "authorizationMetadataProvider":
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
    "initAuthenticationUser": f'{{"username":"{ROOT}","password":"{ROOT_SECRET}"}}',
}


def run_scenario(broker_addr: str, namesrv: str, tmp: Path) -> dict[str, Any]:
    """Step name -> outcome: mqadmin's printed lines (address replaced by ``ADDR``, or the error
    line it printed), or the Java client's sent count or refusal (code, remark)."""
    root = tools_home(tmp / "root-home", ROOT, ROOT_SECRET)
    alice = tools_home(tmp / "alice-home", ALICE, ALICE_SECRET)
    outcomes: dict[str, Any] = {}

    def admin(step: str, home: Path, verb: str, *args: str) -> None:
        result = run_mqadmin5(home, verb, "-b", broker_addr, *args)
        text = (result.stdout + result.stderr).replace(broker_addr, "ADDR")
        errors = [line.strip() for line in text.splitlines() if "Exception" in line]
        answers = [line.strip() for line in text.splitlines() if "CODE:" in line]  # the broker's, if any
        printed = [line.split() for line in text.splitlines() if line.strip()]
        outcomes[step] = (answers or errors)[0] if errors else printed

    driver = ClientDriver(namesrv, tmp, poll_namesrv_ms=1000, heartbeat_ms=1000)

    def send(step: str, topic: str, access_key: str, secret_key: str) -> None:
        result = driver.run("acl-produce", "-t", topic, "-c", 1, "--ak", access_key, "--sk", secret_key, check=False)
        refused = result.of("refused")
        outcomes[step] = ("refused", refused[0]["code"], refused[0]["remark"]) if refused else \
            ("sent", result.summary.get("sent"))

    admin("createUser", root, "createUser", "-u", ALICE, "-p", ALICE_SECRET)
    admin("listUser", root, "listUser", "-f", ALICE)
    admin("createAcl", root, "createAcl", "-s", f"User:{ALICE}", "-r", "Topic:AuthOrders", "-a", "Pub",
          "-d", "Allow")
    admin("listAcl", root, "listAcl", "-s", f"User:{ALICE}")
    send("send with Pub", "AuthOrders", ALICE, ALICE_SECRET)
    send("send without Pub", "AuthPayments", ALICE, ALICE_SECRET)
    send("wrong secret", "AuthOrders", ALICE, "not-her-secret")
    admin("createAcl deny", root, "createAcl", "-s", f"User:{ALICE}", "-r", "Topic:AuthOrders", "-a", "Pub",
          "-d", "Deny")
    send("send after Deny", "AuthOrders", ALICE, ALICE_SECRET)
    admin("listUser as a Normal user", alice, "listUser")
    admin("deleteUser", root, "deleteUser", "-u", ALICE)
    send("send after deleteUser", "AuthOrders", ALICE, ALICE_SECRET)
    return outcomes


#: the proxy's AuthConfig (rmq-proxy.json, not broker.conf): Apache's proxy checks gRPC calls with its
#: own metadata providers, which in local mode read the users and ACLs of the broker in its JVM
PROXY_AUTH_CONFIG: dict[str, Any] = {
    "authenticationEnabled": True,
    "authorizationEnabled": True,
    "authenticationProvider": AUTH_KEYS["authenticationProvider"],
    "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
    "authorizationProvider": AUTH_KEYS["authorizationProvider"],
    "authorizationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
}
GRPC_TOPIC, GRPC_OTHER_TOPIC, GRPC_GROUP = "GrpcAuthOrders", "GrpcAuthPayments", "GrpcAuthGroup"
#: how the 5.x Java client reports a refused call: "[request-id=ID, response-code=CODE] MESSAGE" in
#: its exceptions; a refused Telemetry command only in its log, as the status it did not expect
_REFUSAL = re.compile(r"response-code=(\d+)\] (.+?)(?= <- |$)", re.MULTILINE)
_TELEMETRY_REFUSAL = re.compile(r'command=status \{\s+code: (\w+)\s+message: "(.*)"')


def run_grpc_scenario(broker_addr: str, grpc_endpoint: str, java: str, tmp: Path) -> dict[str, Any]:
    """The gRPC half: mqadmin (remoting) gives alice Pub and Sub on GRPC_TOPIC, Sub on GRPC_GROUP and
    on GRPC_OTHER_TOPIC; the RocketMQ 5.x Java client sends and receives on the gRPC endpoint. Step
    name -> outcome: mqadmin's printed lines (as :func:`run_scenario`), the messages sent or received,
    or ``("refused", [(status code name, message), ...])``: every refusal the client reported, in its
    error or its log."""
    root = tools_home(tmp / "root-home", ROOT, ROOT_SECRET)
    outcomes: dict[str, Any] = {}
    runs = itertools.count()

    def admin(step: str, *args: str) -> None:
        result = run_mqadmin5(root, args[0], "-b", broker_addr, *args[1:])
        outcomes[step] = [line.split() for line in (result.stdout + result.stderr).replace(broker_addr, "ADDR")
                          .splitlines() if line.strip()]

    def client(step: str, kind: str, *args: str | int, credentials: tuple[str, str] | None) -> None:
        workdir = tmp / f"client-{next(runs)}"
        workdir.mkdir()
        lines = drive(java, grpc_endpoint, workdir, *args, credentials=credentials, check=False)
        errors = " ".join(line["error"] for line in of(lines, "error"))
        if not errors:
            outcomes[step] = (kind, len(of(lines, kind)))
            return
        log = client_log(workdir)
        reported = errors + "\n" + (log.read_text(errors="replace") if log.is_file() else "")
        refusals = {(pb.Code.Name(int(code)), text.strip()) for code, text in _REFUSAL.findall(reported)}
        refusals |= {(code, text) for code, text in _TELEMETRY_REFUSAL.findall(reported)}
        outcomes[step] = ("refused", sorted(refusals))

    alice = (ALICE, ALICE_SECRET)
    admin("createUser", "createUser", "-u", ALICE, "-p", ALICE_SECRET)
    admin("createAcl", "createAcl", "-s", f"User:{ALICE}", "-r", f"Topic:{GRPC_TOPIC}", "-a", "Pub,Sub", "-d", "Allow")
    admin("createAcl Sub", "createAcl", "-s", f"User:{ALICE}", "-r", f"Group:{GRPC_GROUP},Topic:{GRPC_OTHER_TOPIC}",
          "-a", "Sub", "-d", "Allow")
    for topic in (GRPC_TOPIC, GRPC_OTHER_TOPIC):
        admin(f"updateTopic {topic}", "updateTopic", "-t", topic, "-r", "2", "-w", "2")
    client("send with Pub", "sent", "produce", GRPC_TOPIC, 2, "auth", credentials=alice)
    client("receive with Sub", "received", "consume", GRPC_TOPIC, GRPC_GROUP, 2, 30, credentials=alice)
    client("send without Pub", "sent", "produce", GRPC_OTHER_TOPIC, 1, "auth", credentials=alice)
    client("receive without the group's Sub", "received", "consume", GRPC_TOPIC, "NotAliceGroup", 1, 5,
           credentials=alice)
    client("wrong secret", "sent", "produce", GRPC_TOPIC, 1, "auth", credentials=(ALICE, "not-her-secret"))
    client("no credentials", "sent", "produce", GRPC_TOPIC, 1, "auth", credentials=None)
    client("unknown user", "sent", "produce", GRPC_TOPIC, 1, "auth", credentials=("mallory", "mallory-secret"))
    admin("createAcl deny", "createAcl", "-s", f"User:{ALICE}", "-r", f"Topic:{GRPC_TOPIC}", "-a", "Pub",
          "-d", "Deny")
    client("send after Deny", "sent", "produce", GRPC_TOPIC, 1, "auth", credentials=alice)
    return outcomes
