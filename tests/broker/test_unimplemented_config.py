"""No silent no-ops: a broker.conf key the broker accepts but does not implement is named in a warning
at start saying what the broker does instead, and refused by a live update (UPDATE_BROKER_CONFIG);
SYNC_MASTER without a slave answers what RocketMQ answers then (SLAVE_NOT_AVAILABLE), not a plain
success.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_process import Broker
from inprocess_broker import BrokerHandle

from rocketstore.broker.broker_config import BROKER_FIELD_BY_KEY
from rocketstore.broker.unimplemented_config import UNIMPLEMENTED, unimplemented_settings
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.store.config import FIELD_BY_KEY as STORE_FIELD_BY_KEY
from rocketstore.store.config import BrokerRole

#: Unimplemented keys an operator copying a RocketMQ broker.conf may well have, with such values.
SET: dict[str, str] = {
    "enableDetailStat": "false",
    "brokerRole": "SYNC_MASTER",
    "haMasterAddress": "10.0.0.1:10912",
    "haListenPort": "10999",
    "brokerIP2": "10.0.0.2",
    "enableDLegerCommitLog": "true",
    "transientStorePoolEnable": "true",
    "sendMessageThreadPoolNums": "64",
    "pullThreadPoolQueueCapacity": "5000",
    "enableLmq": "true",
    "commercialEnable": "false",
}

_WARNING = re.compile(r"broker\.conf (\w+)=(\S*) is not implemented: (.+)$", re.MULTILINE)


def test_every_listed_key_is_a_key_the_broker_accepts() -> None:
    accepted = set(BROKER_FIELD_BY_KEY) | set(STORE_FIELD_BY_KEY)
    assert set(UNIMPLEMENTED) <= accepted, set(UNIMPLEMENTED) - accepted


def test_defaults_and_implemented_values_warn_of_nothing() -> None:
    defaults = {"enableDetailStat": "true", "brokerRole": "ASYNC_MASTER", "haListenPort": "10912"}
    assert unimplemented_settings(defaults, defaults) == []
    assert unimplemented_settings({"brokerRole": "ASYNC_MASTER"}, {"brokerRole": "ASYNC_MASTER"}) == []
    # a key whose default is None is set whenever it has a value
    assert [s.key for s in unimplemented_settings({"haMasterAddress": "h:1"}, {})] == ["haMasterAddress"]


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
    assert "SLAVE_NOT_AVAILABLE" in warned["brokerRole"][1]
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
