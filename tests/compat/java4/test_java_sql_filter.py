"""``MessageSelector.bySql`` with the real RocketMQ 4.9.8 Java push consumer against our broker.

The driver's sql-produce / sql-push-consume modes (tests/support/drivers/java4/.../SqlFilterModes.java):
message i carries the tag Tag(i % 2) and the properties i and color (red, green, blue by i % 3).
A broker with ``enablePropertyFilter=true`` delivers exactly the messages the selector picks
(the consumer lingers after the expected count to catch any extra); a selector that does not
compile makes the consumer's start() fail with SUBSCRIPTION_PARSE_FAILED, and the default broker
(filter disabled) makes it fail with SYSTEM_ERROR, as RocketMQ's checkClientConfig answers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from java_rocketmq import ClientDriver
from recording_broker import RocketStoreBroker, java_driver

from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

COUNT = 30
COLORS = ("red", "green", "blue")


@pytest.fixture(scope="module")
def sql_broker(tmp_path_factory: pytest.TempPathFactory, java_client_built: None) -> Iterator[RocketStoreBroker]:
    broker = RocketStoreBroker(tmp_path_factory.mktemp("sql-broker"), name="sql-broker")
    broker.conf.write_text(broker.conf.read_text() + "enablePropertyFilter=true\n")
    broker.start()
    yield broker
    code = broker.stop()
    log = broker.log_path.read_text(errors="replace")
    assert code == 0, f"broker exited {code}:\n{log[-6000:]}"
    assert "Traceback" not in log, log[-6000:]


def driver_for(broker: RocketStoreBroker, tmp_path: Path) -> ClientDriver:
    return java_driver(broker, tmp_path)


def start_failure(result_lines: list[dict[str, object]]) -> dict[str, object]:
    errors = [line for line in result_lines if line.get("kind") == "error"]
    assert errors, f"the consumer started: {result_lines}"
    return errors[0]


def test_by_sql_delivers_exactly_the_selected_messages(sql_broker: RocketStoreBroker, tmp_path: Path,
                                                       unique_name: Callable[[str], str]) -> None:
    driver = driver_for(sql_broker, tmp_path)
    topic, group = unique_name("SqlTopic"), unique_name("SqlGroup")
    driver.run("sql-produce", "-t", topic, "-c", COUNT)
    selector = "i >= 10 AND color IN ('red', 'blue') AND TAGS = 'Tag0' AND nothing IS NULL"
    expected = {f"body-{i}" for i in range(COUNT) if i >= 10 and COLORS[i % 3] in ("red", "blue") and i % 2 == 0}
    assert len(expected) == 6
    result = driver.run("sql-push-consume", "-t", topic, "-g", group, "--sql", selector, "-c", len(expected),
                        "--linger", 3000)
    received = result.of("received")
    assert {line["body"] for line in received} == expected, "the broker delivered what the selector excludes"
    for line in received:
        props = line["properties"]
        assert isinstance(props, dict) and props["TAGS"] == "Tag0" and props["color"] in ("red", "blue")
    assert result.summary["consumed"] == len(expected)


def test_by_sql_syntax_error_fails_consumer_start(sql_broker: RocketStoreBroker, tmp_path: Path,
                                                  unique_name: Callable[[str], str]) -> None:
    driver = driver_for(sql_broker, tmp_path)
    topic = unique_name("SqlBadTopic")
    driver.run("sql-produce", "-t", topic, "-c", 1)  # the client checks only brokers its routes know
    result = driver.run("sql-push-consume", "-t", topic, "-g", unique_name("SqlBad"), "--sql", "i > AND",
                        "-c", 1, check=False)
    assert result.returncode == 1
    error = start_failure(result.lines)
    assert error["responseCode"] == ResponseCode.SUBSCRIPTION_PARSE_FAILED, error
    assert "Invalid MessageSelector 'i > AND'" in str(error["errorMessage"]), error


def test_by_sql_refused_when_property_filter_disabled(rocketstore_broker: RocketStoreBroker, tmp_path: Path,
                                                      java_client_built: None,
                                                      unique_name: Callable[[str], str]) -> None:
    driver = driver_for(rocketstore_broker, tmp_path)  # the module's default broker: enablePropertyFilter=false
    topic = unique_name("SqlOffTopic")
    driver.run("sql-produce", "-t", topic, "-c", 1)
    result = driver.run("sql-push-consume", "-t", topic, "-g", unique_name("SqlOff"), "--sql", "i > 1",
                        "-c", 1, check=False)
    assert result.returncode == 1
    error = start_failure(result.lines)
    assert error["responseCode"] == ResponseCode.SYSTEM_ERROR, error
    assert error["errorMessage"] == "The broker does not support consumer to filter message by SQL92", error
    print(f"refusal as the client reports it: {error['exception']}", file=sys.stderr)
