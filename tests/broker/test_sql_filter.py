"""SQL92 property filters (``enablePropertyFilter``) through a raw remoting client.

A real ``rocketstore broker`` process serves most tests (module scope, filter enabled, and one
with the default, disabled); the long-polling test uses the in-thread broker because it needs the
hold service's 5 s safety re-check out of the way (that check wakes every held pull regardless
of filters, as RocketMQ's does, and would race the assertion that a non-matching message leaves
the pull held).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from inprocess_broker import BrokerHandle, RawClient, decode_records
from polling import wait_until

from rocketstore.remoting.body import ConsumerData, HeartbeatData, SubscriptionData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import PullSysFlag

pytestmark = pytest.mark.integration

SUB = int(PullSysFlag.SUBSCRIPTION)
COLORS = ("red", "green", "blue")
COUNT = 12


def sql_pull(client: RawClient, topic: str, expression: str, *, group: str = "CGSql", offset: int = 0,
             sys_flag: int = SUB, suspend_ms: int = 0, expression_type: str = "SQL92", sub_version: int = 0) -> int:
    """Send a PULL_MESSAGE with a SQL92 subscription; returns the opaque to receive."""
    return client.send(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(sys_flag), "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
        "subscription": expression, "subVersion": str(sub_version), "expressionType": expression_type}))


def fill(client: RawClient, topic: str) -> list[dict[str, str]]:
    """COUNT messages with properties i, color and TAGS (Tag0/Tag1); returns their property maps."""
    sent = []
    for i in range(COUNT):
        props = {"i": str(i), "color": COLORS[i % 3], "TAGS": f"Tag{i % 2}"}
        assert client.send_message(topic, f"m{i}".encode(), properties=props).code == ResponseCode.SUCCESS
        sent.append(props)
    client.wait_dispatched(topic, 0, COUNT)
    return sent


def check_config(client: RawClient, expression: str, expression_type: str = "SQL92") -> tuple[int, str]:
    body = json.dumps({"clientId": "cid", "group": "CGSql",
                        "subscriptionData": {"topic": "T", "subString": expression, "expressionType": expression_type,
                                             "classFilterMode": False, "subVersion": 1, "tagsSet": [],
                                             "codeSet": []}})
    resp = client.call(RequestCode.CHECK_CLIENT_CONFIG, body=body.encode())
    return resp.code, resp.remark or ""


def heartbeat(client: RawClient, group: str, topic: str, expression: str, sub_version: int = 0) -> None:
    data = HeartbeatData(client_id=f"cid-{group}", consumer_data_set=[ConsumerData(
        group_name=group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        subscription_data_set=[SubscriptionData(topic=topic, sub_string=expression, expression_type="SQL92",
                                                sub_version=sub_version)])])
    assert client.call(RequestCode.HEART_BEAT, body=data.encode()).code == ResponseCode.SUCCESS


def counter(metrics: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE)
    assert found is not None, f"{name} missing from /metrics"
    return float(found.group(1))


@pytest.fixture(scope="module")
def sql_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = Broker(tmp_path_factory.mktemp("sql-broker"), "enablePropertyFilter=true\n")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def sql_client(sql_broker: Broker) -> Iterator[RawClient]:
    client = RawClient("127.0.0.1", sql_broker.listen_port)
    try:
        yield client
    finally:
        client.close()


def test_pull_selects_by_properties_and_tags(sql_broker: Broker, sql_client: RawClient) -> None:
    sent = fill(sql_client, "SqlPull")
    expression = "i >= 3 AND color IN ('red', 'blue') AND TAGS = 'Tag1' AND missing IS NULL"
    expected = [f"m{i}" for i, p in enumerate(sent)
                if int(p["i"]) >= 3 and p["color"] in ("red", "blue") and p["TAGS"] == "Tag1"]
    assert expected == ["m3", "m5", "m9", "m11"]
    before = sql_broker.metrics()
    resp = sql_client.receive(sql_pull(sql_client, "SqlPull", expression))
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert [m.body.decode() for m in decode_records(resp.body)] == expected
    assert resp.ext_fields["nextBeginOffset"] == str(COUNT)
    after = sql_broker.metrics()
    assert counter(after, "rocketstore_filter_evaluations_total") - counter(
        before, "rocketstore_filter_evaluations_total") == COUNT
    assert counter(after, "rocketstore_filter_matches_total") - counter(
        before, "rocketstore_filter_matches_total") == len(expected)
    # a selector nothing matches: the entries are skipped and the client told to pull on from there
    none = sql_client.receive(sql_pull(sql_client, "SqlPull", "i > 100"))
    assert (none.code, none.remark, none.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", str(COUNT))
    # a property that is not a number, compared with one: an evaluation error, counted, never delivered
    errors = counter(sql_broker.metrics(), "rocketstore_filter_errors_total")
    bad = sql_client.receive(sql_pull(sql_client, "SqlPull", "color > 1"))
    assert bad.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert counter(sql_broker.metrics(), "rocketstore_filter_errors_total") - errors == COUNT


def test_syntax_error_on_pull_is_subscription_parse_failed(sql_client: RawClient) -> None:
    fill(sql_client, "SqlParse")
    resp = sql_client.receive(sql_pull(sql_client, "SqlParse", "i >"))
    assert (resp.code, resp.remark) == (ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                        "parse the consumer's subscription failed")
    unknown = sql_client.receive(sql_pull(sql_client, "SqlParse", "i > 1", expression_type="CLASS"))
    assert unknown.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_check_client_config_compiles_the_expression(sql_client: RawClient) -> None:
    assert check_config(sql_client, "a > 1 AND b IN ('x')") == (ResponseCode.SUCCESS, "")
    assert check_config(sql_client, "*", "TAG") == (ResponseCode.SUCCESS, "")
    code, remark = check_config(sql_client, "a > 1 AND")
    assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "Invalid MessageSelector 'a > 1 AND': encountered end of input" in remark


def test_push_consumer_subscription_comes_from_the_heartbeat(sql_client: RawClient) -> None:
    fill(sql_client, "SqlHb")
    heartbeat(sql_client, "CGSqlHb", "SqlHb", "i BETWEEN 4 AND 6", sub_version=100)
    # no SUBSCRIPTION flag, as a push consumer pulls: the registered selector applies
    resp = sql_client.receive(sql_pull(sql_client, "SqlHb", "", group="CGSqlHb", sys_flag=0, sub_version=100))
    assert [m.body.decode() for m in decode_records(resp.body)] == ["m4", "m5", "m6"]
    # the consumer changed its selector (a newer subVersion) before its heartbeat told the broker
    stale = sql_client.receive(sql_pull(sql_client, "SqlHb", "", group="CGSqlHb", sys_flag=0, sub_version=101))
    assert stale.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    heartbeat(sql_client, "CGSqlHb", "SqlHb", "i = 7", sub_version=101)
    resp = sql_client.receive(sql_pull(sql_client, "SqlHb", "", group="CGSqlHb", sys_flag=0, sub_version=101))
    assert [m.body.decode() for m in decode_records(resp.body)] == ["m7"]
    # a registered selector that does not compile leaves no filter data
    heartbeat(sql_client, "CGSqlBad", "SqlHb", "i BETWEEN 6 AND 4")
    bad = sql_client.receive(sql_pull(sql_client, "SqlHb", "", group="CGSqlBad", sys_flag=0))
    assert bad.code == ResponseCode.FILTER_DATA_NOT_EXIST
    # a SQL92 pull of a group nobody registered is refused rather than served unfiltered
    unknown = sql_client.receive(sql_pull(sql_client, "SqlHb", "", group="CGSqlNobody", sys_flag=0))
    assert unknown.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


def test_disabled_filter_refuses_sql_as_rocketmq_does(tmp_path: Path) -> None:
    broker = Broker(tmp_path)  # enablePropertyFilter defaults to false
    broker.start()
    client = RawClient("127.0.0.1", broker.listen_port)
    try:
        refusal = (ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92")
        assert check_config(client, "a > 1") == refusal
        assert check_config(client, "a >") == refusal  # checkClientConfig refuses before compiling
        fill(client, "SqlOff")
        resp = client.receive(sql_pull(client, "SqlOff", "i > 1"))
        assert (resp.code, resp.remark) == refusal
        # the pull path parses first, then refuses: a syntax error still says so
        assert client.receive(sql_pull(client, "SqlOff", "i >")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        heartbeat(client, "CGOffHb", "SqlOff", "i > 1")
        assert client.receive(sql_pull(client, "SqlOff", "", group="CGOffHb", sys_flag=0)).code == refusal[0]
    finally:
        client.close()
        broker.stop()


def test_long_polling_wakes_only_for_a_matching_message(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(enable_property_filter=True)
    hold = next(listener.__self__ for listener in broker.controller.message_arriving_listeners
                if getattr(listener, "__name__", "") == "notify_message_arriving")
    hold.safety_interval_s = 3600.0  # only message arrival may wake the pull in this test
    client, producer = broker.client(), broker.client()
    assert producer.send_message("SqlHold", b"first", properties={"i": "0"}).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    opaque = sql_pull(client, "SqlHold", "i > 10", offset=1, sys_flag=int(SUB | PullSysFlag.SUSPEND),
                      suspend_ms=15_000)
    broker.wait_held_pulls(1)
    evaluated = counter(broker.metrics(), "rocketstore_filter_evaluations_total")
    assert producer.send_message("SqlHold", b"no", properties={"i": "5"}).code == ResponseCode.SUCCESS
    # the arrival notification evaluates the held pull's selector on the loop, and wakes it in the same
    # callback if it matches: once the evaluation is counted, the decision is made
    wait_until("the arrival of the rejected message evaluated",
               lambda: counter(broker.metrics(), "rocketstore_filter_evaluations_total") > evaluated,
               timeout=10, interval=0.02)
    assert broker.held_pulls() == 1, "a message the selector rejects woke the held pull"
    assert producer.send_message("SqlHold", b"yes", properties={"i": "11"}).code == ResponseCode.SUCCESS
    began = time.monotonic()
    resp = client.receive(opaque, timeout=10)
    assert time.monotonic() - began < 5  # woken by the arrival, not by the 15 s timeout
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(resp.body)] == [b"yes"]
    assert resp.ext_fields["nextBeginOffset"] == "3"


def test_filter_support_retry_applies_the_original_topics_selector(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(enable_property_filter=True, filter_support_retry=True)
    client = broker.client()
    data = HeartbeatData(client_id="cid-retry", consumer_data_set=[ConsumerData(
        group_name="CGRetry", consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", subscription_data_set=[
            SubscriptionData(topic="SqlOrig", sub_string="i > 5", expression_type="SQL92"),
            SubscriptionData(topic="%RETRY%CGRetry", sub_string="*")])])
    assert client.call(RequestCode.HEART_BEAT, body=data.encode()).code == ResponseCode.SUCCESS
    for body, props in ((b"low", {"i": "1", "RETRY_TOPIC": "SqlOrig"}), (b"high", {"i": "7", "RETRY_TOPIC": "SqlOrig"}),
                        (b"other", {"i": "1", "RETRY_TOPIC": "NoSqlTopic"})):
        assert client.send_message("%RETRY%CGRetry", body, properties=props).code == ResponseCode.SUCCESS
    broker.wait_dispatched()

    def retry_pull() -> list[bytes]:
        resp = client.receive(sql_pull(client, "%RETRY%CGRetry", "", group="CGRetry", sys_flag=0,
                                       expression_type="TAG"))
        return [m.body for m in decode_records(resp.body)]

    assert retry_pull() == [b"high", b"other"]
    broker.call_soon(lambda: setattr(broker.controller.broker_config, "filter_support_retry", False))
    assert retry_pull() == [b"low", b"high", b"other"]  # RocketMQ's default: retries are not re-filtered
