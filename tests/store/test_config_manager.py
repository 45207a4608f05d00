"""ConfigManager files: fastjson parsing, durable write with backup, and each manager's round trip."""

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.perm_name import PERM_INHERIT, PERM_READ, PERM_WRITE
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.store.config_manager import (
    ConfigFileError,
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
    read_config_file,
    write_config_file,
)

# consumerOffset.json as RocketMQ 4.9.8 writes it: fastjson pretty format, tabs, bare int keys.
ROCKETMQ_CONSUMER_OFFSET = (
    '{\n\t"offsetTable":{\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n\t\t},\n'
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:249,3:251\n\t\t}\n'
    "\t}\n}"
)


# -- fastjson parsing ----------------------------------------------------------------------------


def test_bare_integer_keys_are_accepted() -> None:
    assert parse_fastjson('{"offsetTable":{"topic@group":{0:12,1:5,-1:7}}}') == {
        "offsetTable": {"topic@group": {"0": 12, "1": 5, "-1": 7}}
    }


def test_rocketmq_pretty_consumer_offset_file() -> None:
    doc = parse_fastjson(ROCKETMQ_CONSUMER_OFFSET)
    assert doc["offsetTable"]["TopicTest@please_rename_unique_group_name_4"] == {
        "0": 250,
        "1": 250,
        "2": 249,
        "3": 251,
    }


def test_string_contents_that_look_like_bare_keys_are_untouched() -> None:
    offsets = '{"we{1:ird,2:@g\\"{3:":{0:1}, "a\\\\":{ 4 : 2 },"[5,{6:":{7:3}}'
    text = '{"offsetTable":' + offsets + ',"list":[1,-2,3.5e3,{8:9}]}'
    assert parse_fastjson(text) == {
        "offsetTable": {'we{1:ird,2:@g"{3:': {"0": 1}, "a\\": {"4": 2}, "[5,{6:": {"7": 3}},
        "list": [1, -2, 3500.0, {"8": 9}],
    }


def _fastjson_dumps(value: Any) -> str:
    """Serialise like fastjson: integer map keys bare, everything else standard JSON."""
    if isinstance(value, dict):
        items = [f"{_fastjson_key(k)}:{_fastjson_dumps(v)}" for k, v in value.items()]
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_fastjson_dumps(v) for v in value) + "]"
    return json.dumps(value)


def _fastjson_key(key: int | str) -> str:
    return str(key) if isinstance(key, int) else json.dumps(key)


def _quoted(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _quoted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_quoted(v) for v in value]
    return value


_TRICKY_TEXT = st.text(alphabet=st.sampled_from('{}[],:"\\ 0123456789-@a\n\té'), max_size=12)
_FASTJSON_VALUES = st.recursive(
    st.integers(-(2**63), 2**63 - 1) | _TRICKY_TEXT | st.booleans() | st.none(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.integers(-5, 2**31 - 1), inner, max_size=4)
        | st.dictionaries(_TRICKY_TEXT, inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_FASTJSON_VALUES)
def test_any_fastjson_document_parses_like_its_quoted_form(value: Any) -> None:
    assert parse_fastjson(_fastjson_dumps(value)) == _quoted(value)


def test_standard_json_and_garbage() -> None:
    assert parse_fastjson('{"a": [1, 2.5, true, null, "x"]}') == {"a": [1, 2.5, True, None, "x"]}
    with pytest.raises(ValueError):
        parse_fastjson('{"a":{0:1')
    with pytest.raises(ValueError):
        parse_fastjson("{1.5:2}")  # only integer keys are RocketMQ's; anything else stays invalid


# -- durable file ----------------------------------------------------------------------------------


def _load_text(path: Path) -> tuple[bool, list[str]]:
    seen: list[str] = []

    def decode(text: str) -> None:
        json.loads(text)
        seen.append(text)

    return read_config_file(path, decode), seen


def test_write_keeps_previous_version_as_backup(tmp_path: Path) -> None:
    path = tmp_path / "config" / "x.json"
    write_config_file(path, '{"v":1}')
    assert path.read_text() == '{"v":1}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]

    write_config_file(path, '{"v":2}')
    assert path.read_text() == '{"v":2}'
    assert (tmp_path / "config" / "x.json.bak").read_text() == '{"v":1}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json", "x.json.bak"]


def test_stale_tmp_from_a_crash_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    (tmp_path / "x.json.tmp").write_text('{"half')
    write_config_file(path, '{"v":1}')
    assert path.read_text() == '{"v":1}'
    assert not (tmp_path / "x.json.tmp").exists()


def test_corrupt_main_file_does_not_overwrite_good_backup(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{garbage")
    (tmp_path / "x.json.bak").write_text('{"v":1}')
    write_config_file(path, '{"v":2}')
    assert path.read_text() == '{"v":2}'
    assert (tmp_path / "x.json.bak").read_text() == '{"v":1}'


def test_neither_file_means_new_store(tmp_path: Path) -> None:
    assert _load_text(tmp_path / "x.json") == (False, [])


@pytest.mark.parametrize("main", [None, "", "  \n", "{garbage", '{"v":1'])
def test_falls_back_to_backup_when_main_is_missing_or_unusable(tmp_path: Path, main: str | None) -> None:
    # Missing main = RocketMQ crashed between deleting X and renaming X.tmp; empty main = a
    # rename that reached the disk before the data did.
    path = tmp_path / "x.json"
    if main is not None:
        path.write_text(main)
    (tmp_path / "x.json.bak").write_text('{"v":"backup"}')
    assert _load_text(path) == (True, ['{"v":"backup"}'])


def test_crash_state_after_backup_before_rename_loads_main(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"v":"old"}')
    (tmp_path / "x.json.bak").write_text('{"v":"old"}')
    (tmp_path / "x.json.tmp").write_text('{"v":"new"}')
    assert _load_text(path) == (True, ['{"v":"old"}'])


@pytest.mark.parametrize("backup", [None, "{also garbage", ""])
def test_corrupt_main_without_good_backup_is_a_clear_error(tmp_path: Path, backup: str | None) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text("{garbage")
    if backup is not None:
        (tmp_path / "consumerOffset.json.bak").write_text(backup)
    with pytest.raises(ConfigFileError) as caught:
        _load_text(path)
    assert caught.value.path == path
    assert str(path) in str(caught.value)
    assert "backup" in str(caught.value)


def test_wrong_shape_counts_as_corrupt_and_leaves_manager_untouched(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("g", "t", 0, 99)
    manager.path.write_text('{"offsetTable":{"t@g":{0:1,1:"two"}}}')
    with pytest.raises(ConfigFileError):
        manager.load()
    assert manager.offset_table() == {"t@g": {0: 99}}

    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable":{"t@g":{0:5}}}')
    assert manager.load() is True
    assert manager.offset_table() == {"t@g": {0: 5}}


# -- consumer offsets ------------------------------------------------------------------------------


def test_consumer_offsets_query_and_remove(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.query_offset("g1", "t1", 0) == -1
    manager.commit_offset("g1", "t1", 0, 10)
    manager.commit_offset("g1", "t1", 1, 11)
    manager.commit_offset("g1", "t1", 0, 12)
    manager.commit_offset("g1", "t2", 0, 20)
    manager.commit_offset("g2", "t1", 3, 30)
    assert manager.query_offset("g1", "t1", 0) == 12
    assert manager.query_offset("g1", "t1", 7) == -1
    assert manager.query_offsets("g1", "t1") == {0: 12, 1: 11}
    assert manager.query_offsets("g9", "t1") == {}
    assert manager.topics_of_group("g1") == {"t1", "t2"}
    assert manager.groups_of_topic("t1") == {"g1", "g2"}

    manager.remove_group("g1")
    assert manager.offset_table() == {"t1@g2": {3: 30}}


def test_topic_or_group_with_separator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="@"):
        ConsumerOffsetManager(tmp_path).commit_offset("g@x", "t", 0, 1)


def test_consumer_offsets_round_trip_in_rocketmq_layout(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path / "config")
    manager.commit_offset("g", "%RETRY%g", 0, 3)
    manager.commit_offset("g", "TopicTest", 2, 2**40)
    manager.persist()

    on_disk = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert on_disk == {"offsetTable": {"%RETRY%g@g": {"0": 3}, "TopicTest@g": {"2": 2**40}}}

    reloaded = ConsumerOffsetManager(tmp_path / "config")
    assert reloaded.load() is True
    assert reloaded.offset_table() == manager.offset_table()


def test_reads_consumer_offsets_written_by_rocketmq(tmp_path: Path) -> None:
    (tmp_path / "consumerOffset.json").write_text(ROCKETMQ_CONSUMER_OFFSET)
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.query_offsets("please_rename_unique_group_name_4", "TopicTest") == {
        0: 250,
        1: 250,
        2: 249,
        3: 251,
    }


def test_load_replaces_offsets(tmp_path: Path) -> None:
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable":{"t@g":{0:1}}}')
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("other", "t", 0, 5)
    manager.load()
    assert manager.offset_table() == {"t@g": {0: 1}}


# -- delay offsets ---------------------------------------------------------------------------------


def test_delay_offsets_round_trip_and_rocketmq_form(tmp_path: Path) -> None:
    manager = DelayOffsetManager(tmp_path)
    assert manager.get_offset(1) is None
    manager.set_offset(1, 5)
    manager.set_offset(18, 0)
    manager.persist()
    assert json.loads((tmp_path / "delayOffset.json").read_text()) == {"offsetTable": {"1": 5, "18": 0}}

    reloaded = DelayOffsetManager(tmp_path)
    reloaded.load()
    assert reloaded.offsets() == {1: 5, 18: 0}

    (tmp_path / "delayOffset.json").write_text('{\n\t"offsetTable":{1:7,3:2\n\t}\n}')
    reloaded.load()
    assert reloaded.offsets() == {1: 7, 3: 2, 18: 0}  # merged, as RocketMQ's putAll does


# -- topics and subscription groups ----------------------------------------------------------------


def test_topic_config_defaults_match_rocketmq() -> None:
    topic = TopicConfig("T")
    assert (topic.read_queue_nums, topic.write_queue_nums) == (16, 16)
    assert topic.perm == PERM_READ | PERM_WRITE == 6
    assert topic.topic_filter_type is TopicFilterType.SINGLE_TAG
    assert (topic.topic_sys_flag, topic.order) == (0, False)
    assert topic.to_dict() == {
        "order": False,
        "perm": 6,
        "readQueueNums": 16,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "T",
        "topicSysFlag": 0,
        "writeQueueNums": 16,
    }
    assert TopicConfig.from_dict({"topicName": "T", "attributes": {}}) == topic


def test_subscription_group_defaults_match_rocketmq() -> None:
    group = SubscriptionGroupConfig("G")
    assert group.to_dict() == {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": "G",
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    assert SubscriptionGroupConfig.from_dict({"groupName": "G"}) == group


def test_a_fifo_group_carries_rocketmq_5s_consume_message_orderly() -> None:
    """Written only when set (a 4.9.8 table stays as 4.9.8 writes it), read as 5.x writes it."""
    fifo = SubscriptionGroupConfig.from_dict({"groupName": "G", "consumeMessageOrderly": True})
    assert fifo.consume_message_orderly
    assert fifo.to_dict()["consumeMessageOrderly"] is True
    assert SubscriptionGroupConfig.from_dict(fifo.to_dict()) == fifo
    assert "consumeMessageOrderly" not in SubscriptionGroupConfig("G").to_dict()


def test_topics_round_trip_with_data_version(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path)
    start = manager.data_version.counter
    manager.put(TopicConfig("TBW102", 8, 8, PERM_READ | PERM_WRITE | PERM_INHERIT))
    manager.put(TopicConfig("Orders", 4, 4, topic_filter_type=TopicFilterType.MULTI_TAG, order=True))
    manager.put(TopicConfig("Gone"))
    assert manager.remove("Gone") == TopicConfig("Gone")
    assert manager.remove("Gone") is None
    assert manager.data_version.counter == start + 4
    manager.persist()

    on_disk = json.loads((tmp_path / "topics.json").read_text())
    assert set(on_disk) == {"dataVersion", "topicConfigTable"}
    assert set(on_disk["dataVersion"]) == {"counter", "timestamp"}
    assert on_disk["topicConfigTable"]["Orders"]["topicFilterType"] == "MULTI_TAG"

    reloaded = TopicConfigManager(tmp_path)
    reloaded.load()
    assert reloaded.table() == manager.table()
    assert reloaded.data_version == manager.data_version
    assert reloaded.get("TBW102") == TopicConfig("TBW102", 8, 8, 7)


def test_reads_topics_written_by_rocketmq_and_keeps_preloaded_entries(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1700000000000\n\t},\n'
        '\t"topicConfigTable":{\n\t\t"TopicTest":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TopicTest",\n'
        '\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":4\n\t\t}\n\t}\n}'
    )
    manager = TopicConfigManager(tmp_path)
    manager.put(TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18))  # created by the broker before load
    manager.load()
    assert manager.get("TopicTest") == TopicConfig("TopicTest", 4, 4)
    assert manager.get("SCHEDULE_TOPIC_XXXX") is not None
    assert manager.data_version == DataVersion(3, 1700000000000)


def test_subscription_groups_round_trip(tmp_path: Path) -> None:
    manager = SubscriptionGroupManager(tmp_path)
    manager.put(SubscriptionGroupConfig("G1"))
    manager.put(SubscriptionGroupConfig("G2", consume_enable=False, retry_max_times=3, broker_id=1))
    manager.persist()
    on_disk = json.loads((tmp_path / "subscriptionGroup.json").read_text())
    assert set(on_disk) == {"dataVersion", "subscriptionGroupTable"}
    assert on_disk["subscriptionGroupTable"]["G2"]["retryMaxTimes"] == 3

    reloaded = SubscriptionGroupManager(tmp_path)
    reloaded.load()
    assert reloaded.table() == manager.table()
    assert reloaded.data_version == manager.data_version


def test_bad_enum_in_topics_falls_back_to_backup(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path)
    manager.put(TopicConfig("T"))
    manager.persist()
    manager.persist()  # second write leaves a good backup
    bad_filter = '{"topicConfigTable":{"T":{"topicName":"T","topicFilterType":"WHATEVER"}}}'
    (tmp_path / "topics.json").write_text(bad_filter)
    reloaded = TopicConfigManager(tmp_path)
    assert reloaded.load() is True
    assert reloaded.get("T") == TopicConfig("T")
