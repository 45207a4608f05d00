"""One RocketMQ 5.3 authentication and authorization scenario, run against any broker: Apache 5.3.3's
mqadmin manages users and ACLs, the RocketMQ 4.9.8 Java client (``AclClientRPCHook``) sends.

:func:`run_scenario` returns each step's outcome with the broker's address taken out, so that the
outcomes of our broker and of Apache RocketMQ 5.3.3's broker can be compared as they are
(tests/compat/apache_broker/test_auth_against_rocketmq.py) and asserted one by one
(tests/compat/mqadmin/test_mqadmin_auth.py). Both brokers run with :data:`AUTH_KEYS` (and cluster :data:`CLUSTER`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from java_rocketmq import ClientDriver
from mqadmin5 import run_mqadmin5, tools_home

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
