"""SlaveSynchronize's table rules, on the managers themselves (no broker): the slave's topics and
groups become the master's, offsets are RocketMQ's putAll except those the slave hands back."""

from __future__ import annotations

from pathlib import Path

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.slave_synchronize import merge_offsets, replace_versioned_table, tables_differ
from rocketstore.broker.topic_config_manager import TopicConfigManager
from rocketstore.common.topic_config import TopicConfig
from rocketstore.store.config_manager import ConsumerOffsetManager


def topics(tmp: Path, name: str, *topic_names: str) -> TopicConfigManager:
    manager = TopicConfigManager(tmp / name, BrokerConfig(), lambda _: None)
    for topic in topic_names:
        manager.put(TopicConfig(topic, read_queue_nums=2, write_queue_nums=2))
    return manager


def test_the_slaves_topic_table_becomes_the_masters_with_its_version(tmp_path: Path) -> None:
    master = topics(tmp_path, "master", "Kept", "New")
    slave = topics(tmp_path, "slave", "Kept", "Gone", "Gone too")  # another DataVersion
    text = master.encode()
    assert tables_differ(slave.data_version, text)
    replace_versioned_table(slave, text)
    assert set(slave.table()) == set(master.table())  # the "Gone" ones dropped, "New" added
    assert slave.data_version == master.data_version
    assert not tables_differ(slave.data_version, text)


def test_offsets_are_the_masters_except_those_handed_back(tmp_path: Path) -> None:
    master = ConsumerOffsetManager(tmp_path)
    master.commit_offset("g", "T", 0, 5)
    master.commit_offset("g", "T", 1, 7)
    slave = ConsumerOffsetManager(tmp_path)
    slave.commit_offset("g", "T", 0, 9)  # committed to the slave, handed to the master
    slave.commit_offset("g", "T", 1, 3)
    slave.commit_offset("h", "T", 0, 4)  # a group only the slave has stays (putAll)
    merge_offsets(slave, master.encode(), keep={("g", "T", 0)})
    assert slave.query_offsets("g", "T") == {0: 9, 1: 7}
    assert slave.query_offset("h", "T", 0) == 4
