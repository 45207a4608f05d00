"""No silent no-ops: a broker.conf key the broker accepts but does not implement is named in a warning
at start saying what the broker does instead, and refused by a live update (UPDATE_BROKER_CONFIG).
The replication keys (brokerRole, ha*, slaveTimeout, brokerIP2) are implemented and warn of
nothing; a SLAVE without a brokerId does not start, as BrokerStartup refuses it; SYNC_MASTER
without a slave answers what RocketMQ answers then (SLAVE_NOT_AVAILABLE), not a plain success.

No silent insecurity: a security key set to what the broker does not implement (a RocketMQ 5.3
auth provider other than Apache's, an auth switch neither true nor false, TLS on its own
connections) stops the start with one line naming it, and is refused by a live update; so is a
live change of an auth, TLS or ACL key read at start only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_process import Broker, BrokerProcess
from inprocess_broker import BrokerHandle

from rocketstore.broker.broker_config import BROKER_FIELD_BY_KEY
from rocketstore.broker.unimplemented_config import (
    UNIMPLEMENTED,
    Response,
    refused_settings,
    unimplemented_settings,
)
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.store.config import FIELD_BY_KEY as STORE_FIELD_BY_KEY
from rocketstore.store.config import BrokerRole

#: Unimplemented keys an operator copying a RocketMQ broker.conf may well have, with such values.
SET: dict[str, str] = {
    "enableDetailStat": "false",
    "enableDLegerCommitLog": "true",
    "transientStorePoolEnable": "true",
    "sendMessageThreadPoolNums": "64",
    "pullThreadPoolQueueCapacity": "5000",
    "enableLmq": "true",
    "commercialEnable": "false",
}

_WARNING = re.compile(r"broker\.conf (\w+)=(\S*) is not implemented: (.+)$", re.MULTILINE)


def test_every_warned_key_is_a_key_the_broker_accepts_and_no_refused_one_is() -> None:
    accepted = set(BROKER_FIELD_BY_KEY) | set(STORE_FIELD_BY_KEY)
    warned = {key for key, entry in UNIMPLEMENTED.items() if entry.response is Response.WARN}
    refused = set(UNIMPLEMENTED) - warned
    assert warned <= accepted, warned - accepted
    # refused keys are checked on broker.conf's text: a config field would let one in unchecked
    assert refused and not refused & accepted, refused & accepted


def test_a_security_key_counts_as_set_unless_blank_false_or_implemented() -> None:
    unset = {"authenticationEnabled": "false", "authorizationEnabled": "FALSE", "authenticationProvider": "",
             "useTLS": " false "}
    assert refused_settings(unset) == []
    implemented = {"authenticationEnabled": "true", "authorizationEnabled": "True",
                   "authenticationProvider":
                       "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
                   "initAuthenticationUser": '{"username":"rocketmq","password":"12345678"}'}
    assert refused_settings(implemented) == []
    asked = {"authorizationEnabled": "yes", "useTLS": "True", "tls.enable": "1",
             "authenticationProvider": "com.example.CustomAuthenticationProvider",
             "migrateAuthFromV1Enabled": "on", "sendMessageThreadPoolNums": "64"}
    found = refused_settings(asked)
    assert {s.key for s in found} == set(asked) - {"sendMessageThreadPoolNums"}  # a WARN key is not refused
    assert all(s.response is Response.REFUSE for s in found)
    assert "true or false" in next(s for s in found if s.key == "authorizationEnabled").instead


#: RocketMQ's replication keys, as a slave's broker.conf sets them: all implemented now.
REPLICATION: dict[str, str] = {
    "brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": "10.0.0.1:10912", "haListenPort": "10999",
    "brokerIP2": "10.0.0.2", "haSendHeartbeatInterval": "3000", "haHousekeepingInterval": "10000",
    "haTransferBatchSize": "65536", "haSlaveFallbehindMax": "1024", "slaveTimeout": "1000",
    "slaveReadEnable": "true",
}


def test_defaults_and_implemented_values_warn_of_nothing() -> None:
    defaults = {"enableDetailStat": "true", "brokerRole": "ASYNC_MASTER", "haListenPort": "10912"}
    assert unimplemented_settings(defaults, defaults) == []
    assert unimplemented_settings(REPLICATION, defaults) == []
    assert unimplemented_settings({"brokerRole": "SYNC_MASTER"}, defaults) == []
    # a key whose default is None is set whenever it has a value
    assert [s.key for s in unimplemented_settings({"dLegerPeers": "n0-h:40911"}, {})] == ["dLegerPeers"]


@pytest.mark.integration
def test_broker_started_with_unimplemented_keys_names_each_in_a_warning(tmp_path: Path) -> None:
    conf = "".join(f"{key}={value}\n" for key, value in SET.items())
    broker = Broker(tmp_path, conf)
    broker.start()
    try:
        log = broker.log_text()
    finally:
        assert broker.stop() == 0
    warned = {m.group(1): (m.group(2), m.group(3)) for m in _WARNING.finditer(log)}
    missing = set(SET) - set(warned)
    assert not missing, f"no warning for {sorted(missing)}:\n{log[-4000:]}"
    for key, value in SET.items():
        assert warned[key][0] == value
    assert "WARNING" in next(line for line in log.splitlines() if "enableDetailStat=false" in line)
    assert "statistics" in warned["enableDetailStat"][1]
    # keys left at their defaults (and implemented ones: flushDiskType, listenPort...) are not named
    assert set(warned) == set(SET), set(warned) - set(SET)


@pytest.mark.integration
def test_live_update_to_an_unimplemented_value_is_refused(broker: BrokerHandle) -> None:
    client = broker.client()
    reply = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"enableDetailStat=false\n")
    assert reply.code == ResponseCode.SYSTEM_ERROR
    assert "enableDetailStat" in (reply.remark or "") and "not implemented" in (reply.remark or "")
    assert broker.controller.broker_config.enable_detail_stat is True  # nothing applied
    # the default value is what the broker does: accepted
    assert client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"enableDetailStat=true\n").code == ResponseCode.SUCCESS
    # all or nothing: an implemented key next to a refused one is not applied either
    reply = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=7\nbrokerRole=SLAVE\n")
    assert reply.code == ResponseCode.SYSTEM_ERROR and "brokerRole" in (reply.remark or "")
    assert "restart" in (reply.remark or "")  # a role change without a restart is failover's
    assert broker.controller.store_config.file_reserved_time == 72


@pytest.mark.integration
def test_sync_master_without_a_slave_answers_slave_not_available(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(broker_role=BrokerRole.SYNC_MASTER)
    client = broker.client()
    reply = client.send_message("SyncMasterTopic", b"stored, not replicated")
    assert reply.code == ResponseCode.SLAVE_NOT_AVAILABLE, reply.remark
    assert reply.ext_fields["queueOffset"] == "0"  # stored here all the same, as in RocketMQ
    client.wait_dispatched("SyncMasterTopic", 0, 1)
    # a send that does not wait for the store (WAIT=false) is answered at once, as RocketMQ does
    reply = client.send_message("SyncMasterTopic", b"no wait", properties={"WAIT": "false"})
    assert reply.code == ResponseCode.SUCCESS, reply.remark


#: A RocketMQ 5.3 broker.conf locking its broker down with a provider and a strategy of its own.
_AUTH_CONF = ("authenticationEnabled=true\nauthorizationEnabled=true\n"
              "authenticationProvider=com.example.CustomAuthenticationProvider\n"
              'initAuthenticationUser={"username":"rocketmq","password":"12345678"}\n'
              "authorizationStrategy=com.example.CustomStrategy\n")


@pytest.mark.integration
def test_broker_conf_with_an_unimplemented_auth_provider_does_not_start(tmp_path: Path) -> None:
    conf = Broker(tmp_path, _AUTH_CONF).conf
    process = BrokerProcess(["-c", str(conf)], tmp_path / "broker.log", {"HOME": str(tmp_path / "home")})
    deadline = time.monotonic() + 60
    while process.proc.poll() is None and "ready" not in process.lines and time.monotonic() < deadline:
        time.sleep(0.05)
    code = process.stop()  # returns the exit code of one that exited; stops one that started (the bug)
    log = process.log_text()
    assert code == 2, f"exit {code}; stdout={process.lines}\n{log[-4000:]}"
    assert "ready" not in process.lines
    error = [line for line in log.splitlines() if "authenticationProvider" in line]
    assert len(error) == 1 and "error" in error[0] and "refused" in error[0] and "provider" in error[0], log
    assert "authorizationStrategy" in error[0]  # the other refused keys are named in the same line


@pytest.mark.integration
def test_slave_without_a_broker_id_does_not_start(tmp_path: Path) -> None:
    conf = Broker(tmp_path, "brokerRole=SLAVE\nbrokerId=0\n").conf
    process = BrokerProcess(["-c", str(conf)], tmp_path / "broker.log", {"HOME": str(tmp_path / "home")})
    process.proc.wait(60)
    log = process.log_text()
    assert process.stop() == 2 and "ready" not in process.lines
    error = [line for line in log.splitlines() if "brokerId" in line]
    assert len(error) == 1 and "error" in error[0] and "Slave's brokerId must be > 0" in error[0], log


@pytest.mark.integration
def test_security_keys_at_their_defaults_start(tmp_path: Path) -> None:
    conf = "authenticationEnabled=false\nauthorizationEnabled=false\nauthenticationProvider=\nuseTLS=false\n"
    broker = Broker(tmp_path, conf)
    with broker.running():
        assert broker.proc.poll() is None
    assert broker.proc.returncode == 0


@pytest.mark.integration
def test_live_update_of_a_security_key_is_refused(broker: BrokerHandle) -> None:
    client = broker.client()
    for body, key in ((b"authenticationEnabled=true\n", "authenticationEnabled"),
                      (b"fileReservedTime=7\nauthorizationEnabled=true\n", "authorizationEnabled"),
                      (b"useTLS=true\n", "useTLS")):
        reply = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
        assert reply.code == ResponseCode.SYSTEM_ERROR, (body, reply.remark)
        assert key in (reply.remark or "") and "refused" in (reply.remark or ""), reply.remark
    assert broker.controller.store_config.file_reserved_time == 72  # all or nothing


@pytest.mark.integration
def test_live_change_of_a_start_only_tls_or_acl_key_is_refused(broker: BrokerHandle) -> None:
    client = broker.client()
    for body, key in ((b"aclEnable=true\n", "aclEnable"), (b"tls.server.mode=enforcing\n", "tls.server.mode"),
                      (b"rocketmq.acl.plain.file=/etc/acl.yml\n", "rocketmq.acl.plain.file")):
        reply = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
        assert reply.code == ResponseCode.SYSTEM_ERROR, (body, reply.remark)
        assert key in (reply.remark or "") and "start" in (reply.remark or ""), reply.remark
    config = broker.controller.broker_config
    assert (config.acl_enable, config.tls_server_mode, config.acl_plain_file) == (False, "disabled", None)
    # a start-only key set to the value it has changes nothing: accepted
    assert client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"aclEnable=false\n").code == ResponseCode.SUCCESS
