"""Administration requests (what ``mqadmin`` and dashboards send), after RocketMQ's AdminBrokerProcessor.

    GET_BROKER_CONFIG (26)            body: every broker and store key as ``key=value\\n`` lines;
                                      ext field ``version``: the config DataVersion JSON
    UPDATE_BROKER_CONFIG (25)         body: properties text; applied live, all or nothing
                                      (retention keys such as fileReservedTime take effect at the
                                      cleanup service's next pass); keys of configBlackList are
                                      refused with NO_PERMISSION; nothing is written to broker.conf
    GET_BROKER_RUNTIME_INFO (28)      body: KVTable ``{"table": {...}}``
    DELETE_EXPIRED_COMMITLOG (329)    arms the store's manual deletion (20 passes, any hour)
    UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21)
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
    DELETE_SUBSCRIPTIONGROUP (207)
    GET_TOPIC_STATS_INFO (202)        TopicStatsTable: per write queue min/max offset and the
                                      store time of the last message
    GET_CONSUME_STATS (208)           ConsumeStats: per read queue brokerOffset, consumerOffset,
                                      lastTimestamp; consumeTps (always 0: no per-group TPS kept)
    GET_CONSUMER_CONNECTION_LIST (203), QUERY_TOPIC_CONSUME_BY_WHO (300)

Headers and bodies are the protocol package's (:mod:`rocketstore.remoting.headers`,
:mod:`rocketstore.remoting.body`), which the admin client decodes with.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.mq_version import BROKER_VERSION, BROKER_VERSION_DESC
from rocketstore.broker.server import Connection, Handler
from rocketstore.common.clock import now_ms
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.java_properties import parse_properties
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.common.topic_validator import validate_topic
from rocketstore.remoting.body import (
    ConnectionData,
    ConsumerConnectionBody,
    ConsumeStatsBody,
    GroupList,
    KVTable,
    OffsetWrapperData,
    TopicOffsetData,
    TopicStatsTable,
)
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    MessageQueueData,
    QueryTopicConsumeByWhoRequestHeader,
)
from rocketstore.store.config import ConfigError

log = logging.getLogger(__name__)


def _human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(bytes, si=false)."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def format_runtime(elapsed_ms: int) -> str:
    """StoreStatsService.getFormatRuntime: ``[ D days, H hours, M minutes, S seconds ]``."""
    seconds = max(elapsed_ms, 0) // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


class AdminBrokerProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> Mapping[int, Handler]:
        return {
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_runtime_info,
            RequestCode.DELETE_EXPIRED_COMMITLOG: self.delete_expired_commit_log,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_groups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
        }

    # -- configuration -------------------------------------------------------------------------
    def get_broker_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        props = self.broker.all_config_properties()
        body = "".join(f"{key}={value}\n" for key, value in props.items()).encode("utf-8")
        # DataVersion as fastjson writes it: compact, fields in its order
        version_json = json.dumps(self.broker.config_version.to_dict(), separators=(",", ":"))
        version = GetBrokerConfigResponseHeader(version=version_json)
        return request.response(ResponseCode.SUCCESS, ext_fields=version.to_ext_fields(), body=body)

    def update_broker_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            return request.response(ResponseCode.SUCCESS)
        try:
            props = parse_properties(request.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
        if set(props) & self.broker.broker_config.config_black_list_keys():
            return request.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        log.info("UPDATE_BROKER_CONFIG from %s: %s", conn.peer, props)
        try:
            self.broker.update_config(props)
        except ConfigError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return request.response(ResponseCode.SUCCESS)

    def get_runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=KVTable(table=self.runtime_info()).encode())

    def runtime_info(self) -> dict[str, str]:
        broker = self.broker
        store = broker.store
        info = store.runtime_info()
        stats = store.stats
        cfg = broker.broker_config
        info.update(broker.broker_stats.runtime_info(stats.put_message_times_total,
                                                     stats.get_message_transferred_msg_count))
        info.update({
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(BROKER_VERSION),
            "startAcceptSendRequestTimeStamp": str(cfg.start_accept_send_request_time_stamp),
            "bootTimestamp": str(broker.start_time_ms),
            "runtime": format_runtime(now_ms() - broker.start_time_ms),
            "remainTransientStoreBufferNumbs": str(2**31 - 1),  # no transient store pool: Integer.MAX_VALUE
        })
        # RocketMQ hands sends, pulls, queries and transaction ends to thread pools whose queues
        # it reports; here they run on the event loop as they arrive, so nothing waits in a queue.
        for name, capacity_key, capacity in (
            ("sendThreadPoolQueue", "sendThreadPoolQueueCapacity", cfg.send_thread_pool_queue_capacity),
            ("pullThreadPoolQueue", "pullThreadPoolQueueCapacity", cfg.pull_thread_pool_queue_capacity),
            ("queryThreadPoolQueue", "queryThreadPoolQueueCapacity", cfg.query_thread_pool_queue_capacity),
            ("EndTransactionQueue", "EndTransactionThreadPoolQueueCapacity", cfg.end_transaction_pool_queue_capacity),
        ):
            info[f"{name}Size"] = "0"
            info[capacity_key] = str(capacity)
        for name in ("sendThreadPoolQueue", "pullThreadPoolQueue", "queryThreadPoolQueue"):
            info[f"{name}HeadWaitTimeMills"] = "0"
        info["remainHowManyDataToFlush"] = _human_bytes(int(info["remainHowManyDataToFlush"]))
        root = broker.store_config.root_dir()
        if root.exists():
            usage = shutil.disk_usage(root)
            info["commitLogDirCapacity"] = f"Total : {_human_bytes(usage.total)}, Free : {_human_bytes(usage.free)}."
        return info

    def delete_expired_commit_log(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        log.warning("DELETE_EXPIRED_COMMITLOG from %s", conn.peer)
        self.broker.store.execute_delete_files_manually()
        return request.response(ResponseCode.SUCCESS)

    # -- topics --------------------------------------------------------------------------------
    def update_and_create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        topic = header.topic
        problem = validate_topic(topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if self.broker.is_system_topic(topic):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        if header.topic_filter_type not in TopicFilterType.__members__:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"unknown topicFilterType {header.topic_filter_type!r}")
        config = TopicConfig(topic, read_queue_nums=header.read_queue_nums, write_queue_nums=header.write_queue_nums,
                             perm=header.perm, topic_filter_type=TopicFilterType[header.topic_filter_type],
                             topic_sys_flag=header.topic_sys_flag or 0)
        log.info("UPDATE_AND_CREATE_TOPIC from %s: %s", conn.peer, config)
        self.broker.topic_config_manager.put(config)
        self.broker.tables_changed(self.broker.topic_config_manager)
        return request.response(ResponseCode.SUCCESS)

    def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Forgets the topic's config; its consume queue files stay until their CommitLog expires."""
        header = DeleteTopicRequestHeader.from_ext_fields(request.ext_fields)
        problem = validate_topic(header.topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if self.broker.is_system_topic(header.topic):
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The topic[{header.topic}] is conflict with system topic.")
        log.info("DELETE_TOPIC_IN_BROKER from %s: %s", conn.peer, header.topic)
        if self.broker.topic_config_manager.remove(header.topic) is not None:
            self.broker.tables_changed(self.broker.topic_config_manager)
        return request.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.broker.topic_config_manager.encode().encode())

    def get_topic_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = GetTopicStatsInfoRequestHeader.from_ext_fields(request.ext_fields).topic
        config = self.broker.topic_config_manager.get(topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.broker.store
        name = self.broker.broker_config.broker_name
        stats = TopicStatsTable()
        for queue_id in range(config.write_queue_nums):
            low = max(store.get_min_offset_in_queue(topic, queue_id), 0)
            high = max(store.get_max_offset_in_queue(topic, queue_id), 0)
            last = store.get_message_store_timestamp(topic, queue_id, high - 1) if high > 0 else 0
            mq = MessageQueueData(topic=topic, broker_name=name, queue_id=queue_id)
            stats.offset_table[mq] = TopicOffsetData(min_offset=low, max_offset=high, last_update_timestamp=last)
        return request.response(ResponseCode.SUCCESS, body=stats.encode())

    # -- consumer groups -----------------------------------------------------------------------
    def update_and_create_subscription_group(self, conn: Connection,
                                                   request: RemotingCommand) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.from_dict(parse_fastjson(request.body.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {exc}")
        log.info("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP from %s: %s", conn.peer, config)
        self.broker.subscription_group_manager.put(config)
        self.broker.tables_changed(self.broker.subscription_group_manager)
        return request.response(ResponseCode.SUCCESS)

    def get_all_subscription_groups(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.broker.subscription_group_manager.encode().encode())

    def delete_subscription_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        group = header.group_name
        log.info("DELETE_SUBSCRIPTIONGROUP from %s: %s", conn.peer, group)
        broker = self.broker
        if broker.subscription_group_manager.remove(group) is not None:
            broker.tables_changed(broker.subscription_group_manager)
        if header.remove_offset:
            broker.consumer_offset_manager.remove_group(group)
            broker.tables_changed(broker.consumer_offset_manager)
        return request.response(ResponseCode.SUCCESS)

    def get_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        group = header.consumer_group
        topic = header.topic or ""
        broker = self.broker
        topics = sorted(broker.consumer_offset_manager.topics_of_group(group)) if not topic.strip() else [topic]
        store = broker.store
        name = broker.broker_config.broker_name
        stats = ConsumeStatsBody()
        for t in topics:
            config = broker.topic_config_manager.get(t)
            if config is None:
                continue
            online = broker.consumer_manager.find_subscription_data(group, t)
            if online is None and broker.consumer_manager.subscription_count(group) > 0:
                continue  # the online group does not subscribe to this topic
            for queue_id in range(config.read_queue_nums):
                broker_offset = max(store.get_max_offset_in_queue(t, queue_id), 0)
                consumer_offset = max(broker.consumer_offset_manager.query_offset(group, t, queue_id), 0)
                last = 0
                if consumer_offset - 1 >= 0:
                    stamp = store.get_message_store_timestamp(t, queue_id, consumer_offset - 1)
                    last = stamp if stamp > 0 else 0
                mq = MessageQueueData(topic=t, broker_name=name, queue_id=queue_id)
                stats.offset_table[mq] = OffsetWrapperData(broker_offset=broker_offset,
                                                           consumer_offset=consumer_offset, last_timestamp=last)
        return request.response(ResponseCode.SUCCESS, body=stats.encode())

    def get_consumer_connection_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group = GetConsumerConnectionListRequestHeader.from_ext_fields(request.ext_fields).consumer_group
        info = self.broker.consumer_manager.get(group)
        if info is None:
            return request.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        connections = []
        for channel in info.channels.values():
            try:
                language = LanguageCode(channel.language).name
            except ValueError:
                language = LanguageCode.OTHER.name
            connections.append(ConnectionData(client_id=channel.client_id, client_addr=channel.connection.peer,
                                              language=language, version=channel.version))
        body = ConsumerConnectionBody(
            connection_set=connections, subscription_table=dict(info.subscriptions), consume_type=info.consume_type,
            message_model=info.message_model, consume_from_where=info.consume_from_where)
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    def query_topic_consume_by_who(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = QueryTopicConsumeByWhoRequestHeader.from_ext_fields(request.ext_fields).topic
        broker = self.broker
        groups = broker.consumer_manager.groups_of_topic(topic) | broker.consumer_offset_manager.groups_of_topic(topic)
        return request.response(ResponseCode.SUCCESS, body=GroupList(group_list=sorted(groups)).encode())

