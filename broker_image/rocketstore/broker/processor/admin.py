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
    DELETE_SUBSCRIPTIONGROUP (207)   the four changes are refused on a SLAVE (SYSTEM_ERROR, RocketMQ's
                                      "Can't modify topic or subscription group from slave broker"):
                                      its tables are copies of its master's (slave_synchronize.py)
    GET_TOPIC_STATS_INFO (202)        TopicStatsTable: per write queue min/max offset and the
                                      store time of the last message
    GET_CONSUME_STATS (208)           ConsumeStats: per read queue brokerOffset, consumerOffset,
                                      lastTimestamp; consumeTps: the group's get rate over the
                                      last minute (broker_stats_manager's GROUP_GET_NUMS)
    GET_CONSUMER_CONNECTION_LIST (203), QUERY_TOPIC_CONSUME_BY_WHO (300)
    GET_PRODUCER_CONNECTION_LIST (204) ProducerConnection of a producer group
    GET_BROKER_CONSUME_STATS (317)    ConsumeStatsList: every subscription group's ConsumeStats
    CLONE_GROUP_OFFSET (314)          copies a group's committed offsets to another group
    GET_ALL_DELAY_OFFSET (45)         delayOffset.json's text
    GET_BROKER_HA_STATUS (907)        RocketMQ 5's HARuntimeInfo: a master's slaves with their acked
                                      offset, lag (diff) and in-sync flag; a slave's master address
                                      and max offset
    QUERY_CONSUME_TIME_SPAN (303)     per write queue: first, last and consumed store times
    QUERY_CORRECTION_OFFSET (305)     the lowest offset of the other groups per queue
    VIEW_BROKER_STATS_DATA (315)      BrokerStatsData of broker_stats_manager's windows
    INVOKE_BROKER_TO_RESET_OFFSET (222), INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223),
    GET_CONSUMER_RUNNING_INFO (307), CONSUME_MESSAGE_DIRECTLY (309)
                                      answered by asking consumers (see broker2client)
    CONTROLLER_ELECT_MASTER (1002)    sent to a master elected by the Kubernetes Lease (mqadmin's
                                      electMaster; ``rocketstore admin handOverMaster``): it hands
                                      its mastership to an in-sync slave holding its whole log
                                      (``designateElect``: the ``brokerId`` one) and stays up as a
                                      slave; refused with CONTROLLER_INVALID_REQUEST (not a Lease
                                      replica, another group), CONTROLLER_INVALID_MASTER (not the
                                      master) or CONTROLLER_ELECT_MASTER_FAILED (no slave in sync,
                                      or none caught up within controllerLeaseHandOverTimeoutMills)

Headers and bodies are the protocol package's (:mod:`rocketstore.remoting.headers`,
:mod:`rocketstore.remoting.body`), which the admin client decodes with.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Mapping

from rocketstore.broker import broker2client
from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.client_manager import ClientChannelInfo
from rocketstore.broker.lease_elector import HandOver
from rocketstore.broker.mq_version import BROKER_VERSION, BROKER_VERSION_DESC
from rocketstore.broker.replicas_manager import role_assignment
from rocketstore.broker.server import Connection, Handler
from rocketstore.common.clock import now_ms
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.java_properties import parse_properties
from rocketstore.common.message import decode_message_id
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.common.topic_validator import validate_topic
from rocketstore.remoting.body import (
    BrokerStatsData,
    BrokerStatsItem,
    ConnectionData,
    ConsumerConnectionBody,
    ConsumeStatsBody,
    ConsumeStatsList,
    GroupList,
    HAClientRuntimeInfo,
    HAConnectionRuntimeInfo,
    HARuntimeInfo,
    KVTable,
    MessageQueueData,
    OffsetWrapperData,
    ProducerConnection,
    QueryConsumeTimeSpanBody,
    QueryCorrectionOffsetBody,
    QueueTimeSpan,
    TopicOffsetData,
    TopicStatsTable,
)
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    ElectMasterRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryCorrectionOffsetHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from rocketstore.store.config import BrokerRole, ConfigError

log = logging.getLogger(__name__)

JAVA_LONG_MAX = 2**63 - 1


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


def _connection_data(channel: ClientChannelInfo) -> ConnectionData:
    """RocketMQ's Connection of one client channel (the language by name)."""
    try:
        language = LanguageCode(channel.language).name
    except ValueError:
        language = LanguageCode.OTHER.name
    return ConnectionData(client_id=channel.client_id, client_addr=channel.connection.peer, language=language,
                          version=channel.version)


class AdminBrokerProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        #: admin requests answered by calling consumers (reset pushes, status, running info, ...)
        self.offset_resets = 0
        self.client_calls = 0
        broker.add_counter("rocketstore_admin_offset_resets", "INVOKE_BROKER_TO_RESET_OFFSET requests that "
                           "pushed offsets to a group's consumers", lambda: self.offset_resets)
        broker.add_counter("rocketstore_admin_client_call_requests", "Admin requests to be answered by consumers "
                           "(consumer status, running info, consume message directly), whether or not one was "
                           "online", lambda: self.client_calls)

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
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.get_consumer_status,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
            RequestCode.GET_BROKER_CONSUME_STATS: self.get_broker_consume_stats,
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.QUERY_CONSUME_TIME_SPAN: self.query_consume_time_span,
            RequestCode.QUERY_CORRECTION_OFFSET: self.query_correction_offset,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_broker_stats_data,
            RequestCode.GET_BROKER_HA_STATUS: self.get_broker_ha_status,
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.notify_broker_role_changed,
            RequestCode.CONTROLLER_ELECT_MASTER: self.hand_over_master,
        }

    # -- configuration -------------------------------------------------------------------------
    def get_broker_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        props = self.broker.configuration.all_config_properties()
        body = "".join(f"{key}={value}\n" for key, value in props.items()).encode("utf-8")
        # DataVersion as fastjson writes it: compact, fields in its order
        version_json = json.dumps(self.broker.configuration.data_version.to_dict(), separators=(",", ":"))
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
            self.broker.configuration.update(props)
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

    def get_broker_ha_status(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ 5's HARuntimeInfo (mqadmin haStatus): a master lists its slaves, a slave its client.
        Rates and timestamps RocketStore does not keep (transferredByteInSecond, transferFromWhere,
        lastRead/WriteTimestamp, masterFlushOffset) are 0."""
        store = self.broker.store
        ha = store.ha_service
        max_offset = store.max_phy_offset
        if self.broker.store_config.broker_role is BrokerRole.SLAVE:
            state = ha.client_state()
            client = HAClientRuntimeInfo(master_addr=state.master_address, max_offset=state.max_offset,
                                         activated=state.connected)
            info = HARuntimeInfo(master=False, ha_client_runtime_info=client)
        else:
            slaves = ha.slaves()
            info = HARuntimeInfo(
                master=True, master_commit_log_max_offset=max_offset,
                in_sync_slave_nums=sum(1 for slave in slaves if slave.in_sync),
                ha_connection_info=[HAConnectionRuntimeInfo(addr=slave.address, slave_ack_offset=slave.acked_offset,
                                                            diff=slave.lag_bytes, in_sync=slave.in_sync)
                                    for slave in slaves])
        return request.response(ResponseCode.SUCCESS, body=info.encode())

    async def notify_broker_role_changed(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ 5's controller names the group's master (NOTIFY_BROKER_ROLE_CHANGED): applied as
        a role assignment by the replicas manager, without a restart. Outside controller mode it
        is answered SUCCESS and ignored, as Apache's broker without a ReplicasManager does."""
        manager = self.broker.replicas_manager
        if manager is None:
            return request.response(ResponseCode.SUCCESS)
        header = NotifyBrokerRoleChangedRequestHeader.from_ext_fields(request.ext_fields)
        body = parse_fastjson(request.body.decode("utf-8")) if request.body else {}
        if not isinstance(body, dict):
            return request.response(ResponseCode.SYSTEM_ERROR, "the body is not a SyncStateSet")
        try:
            assignment = role_assignment(header, body)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        await manager.apply_role(assignment)
        return request.response(ResponseCode.SUCCESS)

    async def hand_over_master(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """A person's or an operator's request that this Lease-mode master hand its mastership over
        (before a node drain) and stay up as a slave: the planned hand-over of SIGTERM without the
        exit (ReplicasManager.hand_over). The answer comes once the Lease is released (or not);
        the successor takes it at its next read, woken by the closed HA connection."""
        header = ElectMasterRequestHeader.from_ext_fields(request.ext_fields)
        config = self.broker.broker_config
        if header.broker_name and header.broker_name != config.broker_name:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                    f"this broker is of group {config.broker_name}, not {header.broker_name}")
        manager = self.broker.replicas_manager
        to = header.broker_id if header.designate_elect and header.broker_id > 0 else None
        log.warning("master hand-over requested by %s%s", conn.peer, "" if to is None else f" (to replica {to})")
        outcome = None if manager is None else await manager.hand_over(to)
        if manager is None or outcome is None:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                    "not a Lease replica: a hand-over needs enableControllerMode=true and "
                                    "controllerLeaseEnable=true (with controllerAddr, ask Apache's controller)")
        current = manager.assignment
        if outcome is HandOver.RELEASED:
            return request.response(ResponseCode.SUCCESS, "released the master Lease to the in-sync slaves")
        if outcome is HandOver.NOT_MASTER:
            follows = current is not None and not manager.is_master
            master = f"; the master is {current.master_address}" if follows and current is not None else ""
            return request.response(ResponseCode.CONTROLLER_INVALID_MASTER,
                                    f"this broker is not the master of {config.broker_name}{master}")
        members = sorted(current.sync_state_set) if current is not None else []
        if outcome is HandOver.NO_SLAVE_IN_SYNC:
            who = "no slave is" if to is None else f"replica {to} is not"
            return request.response(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                                    f"no hand-over: {who} in the SyncStateSet {members}; still master")
        who = "no slave" if to is None else f"replica {to}"
        return request.response(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                                f"no hand-over: {who} of the SyncStateSet {members} acknowledged the whole log within "
                                f"{config.controller_lease_hand_over_timeout_mills} ms; still master")

    def delete_expired_commit_log(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        log.warning("DELETE_EXPIRED_COMMITLOG from %s", conn.peer)
        self.broker.store.execute_delete_files_manually()
        return request.response(ResponseCode.SUCCESS)

    # -- topics --------------------------------------------------------------------------------
    def _refused_on_slave(self, request: RemotingCommand) -> RemotingCommand | None:
        """RocketMQ's validateSlave: a slave's topics and groups are its master's copies
        (slave_synchronize.py), so they are changed on the master only."""
        if self.broker.store_config.broker_role is BrokerRole.SLAVE:
            return request.response(ResponseCode.SYSTEM_ERROR, "Can't modify topic or subscription group from slave "
                                    "broker, please execute it from master broker.")
        return None

    def update_and_create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if (refused := self._refused_on_slave(request)) is not None:
            return refused
        header = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        topic = header.topic
        problem = validate_topic(topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if self.broker.topic_config_manager.is_system_topic(topic):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        if header.topic_filter_type not in TopicFilterType.__members__:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"unknown topicFilterType {header.topic_filter_type!r}")
        config = TopicConfig(topic, read_queue_nums=header.read_queue_nums, write_queue_nums=header.write_queue_nums,
                             perm=header.perm, topic_filter_type=TopicFilterType[header.topic_filter_type],
                             topic_sys_flag=header.topic_sys_flag or 0)
        log.info("UPDATE_AND_CREATE_TOPIC from %s: %s", conn.peer, config)
        self.broker.topic_config_manager.put(config)
        self.broker.config_persist_service.tables_changed(self.broker.topic_config_manager)
        return request.response(ResponseCode.SUCCESS)

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """AdminBrokerProcessor.deleteTopic: forgets the topic's config, destroys its consume queues
        (cleanUnusedTopic, for this topic) and drops every group's offsets on it, so a topic created
        again under the name starts empty; its records stay in the CommitLog until they expire."""
        if (refused := self._refused_on_slave(request)) is not None:
            return refused
        header = DeleteTopicRequestHeader.from_ext_fields(request.ext_fields)
        problem = validate_topic(header.topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if self.broker.topic_config_manager.is_system_topic(header.topic):
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The topic[{header.topic}] is conflict with system topic.")
        log.info("DELETE_TOPIC_IN_BROKER from %s: %s", conn.peer, header.topic)
        broker = self.broker
        if broker.topic_config_manager.remove(header.topic) is not None:
            broker.config_persist_service.tables_changed(broker.topic_config_manager)
        # waits for dispatch and deletes files: off the event loop
        await asyncio.to_thread(broker.store.delete_topic, header.topic)
        if broker.consumer_offset_manager.remove_topic(header.topic):
            broker.config_persist_service.tables_changed(broker.consumer_offset_manager)
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
        if (refused := self._refused_on_slave(request)) is not None:
            return refused
        try:
            config = SubscriptionGroupConfig.from_dict(parse_fastjson(request.body.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {exc}")
        log.info("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP from %s: %s", conn.peer, config)
        self.broker.subscription_group_manager.put(config)
        self.broker.config_persist_service.tables_changed(self.broker.subscription_group_manager)
        return request.response(ResponseCode.SUCCESS)

    def get_all_subscription_groups(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.broker.subscription_group_manager.encode().encode())

    def delete_subscription_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if (refused := self._refused_on_slave(request)) is not None:
            return refused
        header = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        group = header.group_name
        log.info("DELETE_SUBSCRIPTIONGROUP from %s: %s", conn.peer, group)
        broker = self.broker
        if broker.subscription_group_manager.remove(group) is not None:
            broker.config_persist_service.tables_changed(broker.subscription_group_manager)
        if header.remove_offset:
            broker.consumer_offset_manager.remove_group(group)
            broker.config_persist_service.tables_changed(broker.consumer_offset_manager)
        return request.response(ResponseCode.SUCCESS)

    def get_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        group = header.consumer_group
        topic = header.topic or ""
        broker = self.broker
        topics = sorted(broker.consumer_offset_manager.topics_of_group(group)) if not topic.strip() else [topic]
        stats = ConsumeStatsBody()
        for t in topics:
            config = broker.topic_config_manager.get(t)
            if config is None or not self._group_may_consume(group, t):
                continue
            stats.offset_table.update(self._queue_offsets(group, t, config.read_queue_nums))
            stats.consume_tps += broker.broker_stats_manager.group_get_tps(group, t)
        return request.response(ResponseCode.SUCCESS, body=stats.encode())

    def _group_may_consume(self, group: str, topic: str) -> bool:
        """False when the group is online without a subscription to ``topic`` (its stats skip it)."""
        consumers = self.broker.consumer_manager
        return consumers.find_subscription_data(group, topic) is not None or consumers.subscription_count(group) == 0

    def _queue_offsets(self, group: str, topic: str, queue_nums: int) -> dict[MessageQueueData, OffsetWrapperData]:
        """OffsetWrapper of each of the topic's first ``queue_nums`` queues for ``group``."""
        broker = self.broker
        store = broker.store
        name = broker.broker_config.broker_name
        table = {}
        for queue_id in range(queue_nums):
            broker_offset = max(store.get_max_offset_in_queue(topic, queue_id), 0)
            consumer_offset = max(broker.consumer_offset_manager.query_offset(group, topic, queue_id), 0)
            last = 0
            if consumer_offset - 1 >= 0:
                stamp = store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1)
                last = stamp if stamp > 0 else 0
            mq = MessageQueueData(topic=topic, broker_name=name, queue_id=queue_id)
            table[mq] = OffsetWrapperData(broker_offset=broker_offset, consumer_offset=consumer_offset,
                                          last_timestamp=last)
        return table

    def get_broker_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """ConsumeStats of every subscription group on every topic it has offsets for (over write
        queues, as RocketMQ's fetchAllConsumeStatsInBroker); ``isOrder`` keeps only order topics."""
        is_order = GetConsumeStatsInBrokerHeader.from_ext_fields(request.ext_fields).is_order
        broker = self.broker
        stats_list: list[dict[str, list[ConsumeStatsBody]]] = []
        total_diff = 0
        for group in sorted(broker.subscription_group_manager.table()):
            per_topic = []
            for topic in sorted(broker.consumer_offset_manager.topics_of_group(group)):
                config = broker.topic_config_manager.get(topic)
                if config is None or (is_order and not config.order) or not self._group_may_consume(group, topic):
                    continue
                stats = ConsumeStatsBody(offset_table=self._queue_offsets(group, topic, config.write_queue_nums),
                                         consume_tps=broker.broker_stats_manager.group_get_tps(group, topic))
                total_diff += sum(w.broker_offset - w.consumer_offset for w in stats.offset_table.values())
                per_topic.append(stats)
            stats_list.append({group: per_topic})
        body = ConsumeStatsList(consume_stats_list=stats_list, broker_addr=broker.broker_addr, total_diff=total_diff)
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    def clone_group_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = CloneGroupOffsetRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        offsets = broker.consumer_offset_manager
        topic = (header.topic or "").strip()
        topics = [topic] if topic else sorted(offsets.topics_of_group(header.src_group))
        log.info("CLONE_GROUP_OFFSET from %s: %s -> %s on %s", conn.peer, header.src_group, header.dest_group, topics)
        cloned = False
        for t in topics:
            if broker.topic_config_manager.get(t) is None:
                continue
            if not header.offline and not self._group_may_consume(header.src_group, t):
                continue
            cloned = offsets.clone_offset(header.src_group, header.dest_group, t) or cloned
        if cloned:
            broker.config_persist_service.tables_changed(offsets)
        return request.response(ResponseCode.SUCCESS)

    def get_all_delay_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """delayOffset.json's content: the delivered offset of each delay level."""
        text = self.broker.store.schedule_message_service.offsets.encode()
        return request.response(ResponseCode.SUCCESS, body=text.encode())

    def query_consume_time_span(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryConsumeTimeSpanRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        topic, group = header.topic, header.group
        config = broker.topic_config_manager.get(topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = broker.store
        spans = []
        for queue_id in range(config.write_queue_nums):
            min_time = store.get_earliest_message_time(topic, queue_id)
            max_offset = store.get_max_offset_in_queue(topic, queue_id)
            consumer_offset = broker.consumer_offset_manager.query_offset(group, topic, queue_id)
            consume_time = (store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1)
                            if consumer_offset > 0 else min_time)
            delay = 0
            if consumer_offset < max_offset:
                delay = now_ms() - store.get_message_store_timestamp(topic, queue_id, consumer_offset)
            spans.append(QueueTimeSpan(
                message_queue=MessageQueueData(topic=topic, broker_name=broker.broker_config.broker_name,
                                               queue_id=queue_id),
                min_time_stamp=min_time,
                max_time_stamp=store.get_message_store_timestamp(topic, queue_id, max_offset - 1),
                consume_time_stamp=consume_time, delay_time=delay))
        body = QueryConsumeTimeSpanBody(consume_time_span_set=spans)
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    def query_correction_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Per queue, the lowest offset of the other groups, or Long.MAX_VALUE where the compare
        group is behind it (nothing to correct)."""
        header = QueryCorrectionOffsetHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        topic = header.topic
        exclude = {g for g in (header.filter_groups or "").split(",") if g.strip()}
        correction = broker.consumer_offset_manager.min_offsets_of_topic(
            topic, exclude, lambda q: broker.store.get_min_offset_in_queue(topic, q))
        for queue_id, offset in broker.consumer_offset_manager.query_offsets(header.compare_group, topic).items():
            lowest = correction.get(queue_id, JAVA_LONG_MAX)
            correction[queue_id] = JAVA_LONG_MAX if lowest > offset else lowest
        return request.response(ResponseCode.SUCCESS,
                                body=QueryCorrectionOffsetBody(correction_offsets=correction).encode())

    def view_broker_stats_data(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """One statistic's minute, hour and day windows (see broker_stats_manager for which exist)."""
        header = ViewBrokerStatsDataRequestHeader.from_ext_fields(request.ext_fields)
        windows = self.broker.broker_stats_manager.stats(header.stats_name, header.stats_key)
        if windows is None:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The stats <{header.stats_name}> <{header.stats_key}> not exist")
        minute, hour, day = (BrokerStatsItem(sum=w.sum, tps=w.tps, avgpt=w.avgpt) for w in windows)
        body = BrokerStatsData(stats_minute=minute, stats_hour=hour, stats_day=day)
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    # -- calls to clients ----------------------------------------------------------------------
    def reset_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        log.info("INVOKE_BROKER_TO_RESET_OFFSET from %s: topic=%s group=%s timestamp=%s force=%s", conn.peer,
                 header.topic, header.group, header.timestamp, header.is_force)
        response = broker2client.reset_offset(self.broker, request, header, request.language == LanguageCode.CPP)
        if response.code == ResponseCode.SUCCESS:
            self.offset_resets += 1
        return response

    async def get_consumer_status(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerStatusRequestHeader.from_ext_fields(request.ext_fields)
        self.client_calls += 1
        return await broker2client.consumer_status(self.broker, request, header)

    async def get_consumer_running_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
        self.client_calls += 1
        return await broker2client.call_consumer(self.broker, request, request.ext_fields, request.body,
                                                 header.consumer_group, header.client_id)

    async def consume_message_directly(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The message the id names, read from the CommitLog, handed to one consumer to consume."""
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(request.ext_fields)
        fields = {**request.ext_fields, "brokerName": self.broker.broker_config.broker_name}
        body = b""
        if header.msg_id:
            try:
                _, offset = decode_message_id(header.msg_id)
            except ValueError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, f"bad msgId {header.msg_id!r}: {exc}")
            msg = self.broker.store.look_message_by_offset(offset)
            if msg is not None:
                body = self.broker.store.select_one_message_by_offset(offset, msg.total_size) or b""
        self.client_calls += 1
        return await broker2client.call_consumer(self.broker, request, fields, body, header.consumer_group,
                                                 header.client_id or "")

    def get_producer_connection_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group = GetProducerConnectionListRequestHeader.from_ext_fields(request.ext_fields).producer_group
        channels = self.broker.producer_manager.groups.get(group)
        if channels is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = ProducerConnection(connection_set=[_connection_data(c) for c in channels.values()])
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    def get_consumer_connection_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group = GetConsumerConnectionListRequestHeader.from_ext_fields(request.ext_fields).consumer_group
        info = self.broker.consumer_manager.get(group)
        if info is None:
            return request.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        connections = [_connection_data(channel) for channel in info.channels.values()]
        body = ConsumerConnectionBody(
            connection_set=connections, subscription_table=dict(info.subscriptions), consume_type=info.consume_type,
            message_model=info.message_model, consume_from_where=info.consume_from_where)
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    def query_topic_consume_by_who(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = QueryTopicConsumeByWhoRequestHeader.from_ext_fields(request.ext_fields).topic
        broker = self.broker
        groups = broker.consumer_manager.groups_of_topic(topic) | broker.consumer_offset_manager.groups_of_topic(topic)
        return request.response(ResponseCode.SUCCESS, body=GroupList(group_list=sorted(groups)).encode())

