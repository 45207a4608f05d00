"""MessagingService: the apache.rocketmq.v2 RPCs, answered from the broker's own tables and paths.

A thin layer: it validates a request, calls what the broker already has, and builds the answer.

* QueryRoute / QueryAssignment: the topic's queues from the topic config, each with its
  permission (topic and broker permission combined) and this broker's gRPC endpoint; then the
  same queues of each broker in ``clusterPeers``, at its host and gRPC port
  (:func:`advertised_grpc_port`).
* SendMessage: each message becomes the SEND_MESSAGE_V2 request a 4.x producer would send and
  goes through the registered send handler (processor/send.py: topic checks and auto-creation,
  the put, SYNC_FLUSH waits, the timer store for a delivery timestamp, statistics), as RocketMQ's
  proxy in local mode hands its sends to the broker's processor. A FIFO message's group picks its
  queue by hash; other messages go to a random writable queue.
* Telemetry: every settings command is answered OK with the settings a client needs to run
  (publishing: the maximum body size; subscription: batch size and long-polling time). A
  producer's stream joins the producer groups of its topics, so transaction checks reach it
  (transaction.py); Heartbeat keeps it there, NotifyClientTermination or the stream's end removes it.
* SendMessage of a TRANSACTION message / EndTransaction: a half message and its commit or
  rollback, through the broker's 4.x transaction paths (transaction.py).
* ReceiveMessage / AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue:
  pop_service.py; a message goes to its dead-letter queue through the registered
  CONSUMER_SEND_MSG_BACK handler (processor/send_back.py). A receive with ``auto_renew`` (push
  consumers) is renewed by the broker until its client decides (auto_renew.py).
* PullMessage / GetOffset / QueryOffset / UpdateOffset: offset-based consumption of one queue,
  the 4.x pull model over gRPC (RocketMQ's proxy leaves these UNIMPLEMENTED): a pull reads the
  store from the offset the client names, long-polling at the queue's end; offsets are the
  group's committed offsets in ConsumerOffsetManager, the ones 4.x consumers, pop and admin
  tools share.
* Heartbeat / NotifyClientTermination: OK; they keep a producer in its groups or remove it, and
  keep renewing a consumer's messages or release them (gRPC consumers are not listed among a
  group's connections yet).

Methods not overridden here answer UNIMPLEMENTED (grpc's default servicer).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.client_manager import ClientChannelInfo
from rocketstore.broker.filter.expression_message_filter import ExpressionMessageFilter
from rocketstore.broker.grpc_v2 import message_convert
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.auto_renew import AutoRenew
from rocketstore.broker.grpc_v2.call_logic import code_name
from rocketstore.broker.grpc_v2.message_convert import BadMessage
from rocketstore.broker.grpc_v2.pop_service import (
    MAX_BATCH,
    DeadLetterForwarder,
    InvalidHandle,
    PopService,
    decode_message,
    parse_handle,
)
from rocketstore.broker.grpc_v2.receipt_handle import ReceiptHandle
from rocketstore.broker.grpc_v2.transaction import (
    TelemetryChannel,
    parse_transaction_id,
    transaction_id,
    transaction_properties,
)
from rocketstore.broker.mq_version import BROKER_VERSION
from rocketstore.broker.peer_routes import live_groups
from rocketstore.broker.processor.end_transaction import check_prepare_message
from rocketstore.broker.processor.send import SendMessageProcessor, SendOutcome
from rocketstore.broker.server import Connection
from rocketstore.common.clock import now_ms
from rocketstore.common.filter import SQL92, SelectorSyntaxError
from rocketstore.common.message import HostAddress, StoredMessage, SysFlag
from rocketstore.common.mix_all import MASTER_ID
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.common.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC, validate_topic
from rocketstore.remoting.body import BrokerData
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeader,
)
from rocketstore.store.config import BrokerRole
from rocketstore.store.message_store import MessageFilter, TagFilter
from rocketstore.store.schedule_message_service import parse_delay_levels
from rocketstore.store.status import GetMessageStatus

#: what a queue accepts (topics carry no message type here: every queue takes every type)
ACCEPTED_TYPES: Final = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
#: queue count of a topic auto-created by a send (RocketMQ producers' defaultTopicQueueNums)
DEFAULT_TOPIC_QUEUE_NUMS: Final = 4
#: long polling a consumer is told to use, and the longest the broker holds a receive
LONG_POLLING_MS: Final = 20_000
#: answered before the client's deadline by this much (RocketMQ proxy's longPollingReserveTimeInMillis)
DEADLINE_RESERVE_S: Final = 0.1
PRODUCER_MAX_ATTEMPTS: Final = 3
#: the metadata keys a 5.x client names itself and its language with
CLIENT_ID_KEY: Final = "x-mq-client-id"
LANGUAGE_KEY: Final = "x-mq-language"
#: the version a gRPC producer is listed with among a group's connections (MQVersion's V5_0_0, as
#: RocketMQ's proxy lists them)
GRPC_CLIENT_VERSION: Final = 413
#: EndTransaction's resolution as END_TRANSACTION's commitOrRollback
_RESOLUTIONS: Final = {pb.COMMIT: SysFlag.TRANSACTION_COMMIT, pb.ROLLBACK: SysFlag.TRANSACTION_ROLLBACK}


def _status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or code_name(code))  # type: ignore[arg-type]


def _ms(duration: Any) -> int:
    """A Duration or Timestamp in ms (the arithmetic inline: ToMilliseconds is Python-level code)."""
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def endpoints_of(host: str, port: int) -> pb.Endpoints:
    """``host:port`` as v2 Endpoints, with the scheme its host text has."""
    try:
        scheme = pb.IPv4 if ipaddress.ip_address(host).version == 4 else pb.IPv6
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def advertised_grpc_port(remoting_port: int, own_grpc_port: int, offset: int) -> int:
    """The gRPC port routes give for a broker whose remoting port is ``remoting_port``: with
    ``grpcAdvertisedPortOffset`` set, that port plus the offset (per-broker ports behind the
    operator's external Services, at one distance from the remoting ports), else this broker's
    own gRPC port, its ``grpcListenPort``, which every broker of the store listens on."""
    return remoting_port + offset if offset else own_grpc_port


def queue_permission(queue_id: int, config: TopicConfig, broker_perm: int) -> int:
    """A queue's v2 permission: readable below readQueueNums, writable below writeQueueNums, each
    only where topic and broker permit it."""
    perm = config.perm & broker_perm
    readable = queue_id < config.read_queue_nums and bool(perm & PERM_READ)
    writable = queue_id < config.write_queue_nums and bool(perm & PERM_WRITE)
    if readable and writable:
        return int(pb.READ_WRITE)
    if readable:
        return int(pb.READ)
    return int(pb.WRITE) if writable else int(pb.NONE)


def settings_answer(client: pb.Settings, *, max_body_size: int, retry_max_times: int,
                    delay_levels: list[int], fifo: bool = False) -> pb.Settings:
    """The settings a Telemetry settings command is answered with: the client's own, completed.

    A producer needs ``publishing.max_body_size`` (0 fails every send) and
    ``validate_message_type``; a consumer ``subscription.long_polling_timeout``, ``fifo`` and
    ``receive_batch_size`` (``fifo``: the group's ``consumeMessageOrderly``, which makes a push
    consumer hand a message group's messages to its listener one after another), and a retry
    policy: ``retryMaxTimes + 1`` deliveries spaced by the broker's delay levels from the third on
    (10 s, 30 s, 1 min, ...), as 4.x retries are spaced.
    """
    answer = pb.Settings()
    answer.CopyFrom(client)
    if client.WhichOneof("pub_sub") == "subscription":
        sub = answer.subscription
        sub.fifo = fifo
        sub.receive_batch_size = 32
        sub.long_polling_timeout.FromMilliseconds(LONG_POLLING_MS)
        policy = answer.backoff_policy
        policy.Clear()
        policy.max_attempts = retry_max_times + 1
        for level_ms in delay_levels[2:]:
            policy.customized_backoff.next.add().FromMilliseconds(level_ms)
    else:
        answer.publishing.max_body_size = max_body_size
        answer.publishing.validate_message_type = True
        if not client.HasField("backoff_policy"):
            policy = answer.backoff_policy
            policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
    return answer


def dead_letter_forwarder(broker: BrokerContext) -> DeadLetterForwarder:
    """How pop moves a message to ``%DLQ%{group}``: the CONSUMER_SEND_MSG_BACK a 4.x consumer sends
    with a negative delay level, through the broker's registered send-back handler (DLQ topic
    creation, RETRY_TOPIC / ORIGIN_MESSAGE_ID properties, statistics)."""
    def forward(group: str, message: StoredMessage) -> str | None:
        header = ConsumerSendMsgBackRequestHeader(offset=message.physical_offset, group=group, delay_level=-1,
                                                  origin_msg_id=message.msg_id, origin_topic=message.topic)
        command = RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=header.to_ext_fields(),
                                  version=BROKER_VERSION)
        reply = broker.remoting.handlers[RequestCode.CONSUMER_SEND_MSG_BACK](_connection(broker, "pop"), command)
        if not isinstance(reply, RemotingCommand):  # the send-back path answers at once; never expected
            if isinstance(reply, Coroutine):
                reply.close()
            return "the send-back path did not answer"
        return None if reply.code == ResponseCode.SUCCESS else f"code {reply.code}: {reply.remark}"

    return forward


Summed = TypeVar("Summed", pb.SendMessageResponse, pb.AckMessageResponse)


def _summed_up(response: Summed) -> Summed:
    """``response`` with its top-level status: its entries' when they agree, else MULTIPLE_RESULTS
    (each entry keeps its own). Entries and statuses are filled in place: building them as
    objects and copying them in cost a tenth of a send."""
    entries = response.entries
    first = entries[0].status
    if len(entries) == 1 or len({entry.status.code for entry in entries}) == 1:
        response.status.code = first.code
        response.status.message = first.message
    else:
        response.status.code = pb.MULTIPLE_RESULTS
        response.status.message = "the entries have different results"
    return response


def _send_result(entry: pb.SendResultEntry, message: pb.Message, outcome: SendOutcome) -> None:
    """Fill ``entry`` with a send's outcome as the client's result: the v2 status the proxy maps the
    response code to and, when stored, the queue offset (and a half message's transaction id,
    which names its CommitLog and half-queue offsets: what a 4.x producer's END_TRANSACTION sends
    back)."""
    system = message.system_properties
    code = message_convert.send_status_code(outcome.code)
    append = None if outcome.result is None else outcome.result.append
    entry.status.code = code  # type: ignore[assignment]
    if code != pb.OK or append is None:
        entry.status.message = outcome.remark or code_name(code)
        entry.message_id = system.message_id
        return
    entry.status.message = "OK"
    entry.message_id = system.message_id or append.msg_id
    entry.offset = append.logics_offset
    if system.message_type == pb.TRANSACTION:
        entry.transaction_id = transaction_id(append.wrote_offset, append.logics_offset)


def _connection(broker: BrokerContext, peer: str) -> Connection:
    """What the remoting handlers take as the caller: a gRPC call has no remoting connection (RocketMQ's
    proxy in local mode hands its processors a channel of its own the same way)."""
    conn = Connection(server=broker.remoting)
    conn.peer = peer
    conn.peer_host = _peer_host(peer)
    return conn


def _metadata(context: Any, name: str) -> str:
    return next((value for key, value in context.invocation_metadata() or () if key == name), "")


def _client_id(context: Any) -> str:
    return _metadata(context, CLIENT_ID_KEY)


def language_code(language: str) -> LanguageCode:
    """A client's ``x-mq-language`` as the LanguageCode admin tools show (Go sends GOLANG)."""
    name = "GO" if language == "GOLANG" else language
    return LanguageCode.__members__.get(name, LanguageCode.OTHER)


@functools.lru_cache(maxsize=4096)  # a send asks it for the peer of each call
def _peer_host(peer: str) -> HostAddress:
    """grpc's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` as a bornHost."""
    _, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    try:
        return HostAddress(host.strip("[]") or "127.0.0.1", int(port))
    except ValueError:
        return HostAddress("127.0.0.1", 0)


class MessagingService(pb_grpc.MessagingServiceServicer):
    """The servicer; ``endpoint`` is this broker's gRPC address as clients reach it."""

    def __init__(self, broker: BrokerContext, pop: PopService, renew: AutoRenew,
                 endpoint: Callable[[], pb.Endpoints]) -> None:
        self.broker = broker
        self.pop = pop
        self.renew = renew
        self.endpoint = endpoint
        #: the broker's send path, called directly as RocketMQ's proxy in local mode calls it
        self._sender = SendMessageProcessor(broker)
        self._closing = asyncio.Event()
        #: producers' Telemetry streams by client id (Heartbeat keeps them in their groups)
        self._producers: dict[str, TelemetryChannel] = {}

    # -- routes --------------------------------------------------------------------------------
    def _topic(self, name: str) -> TopicConfig | pb.Status:
        if not name:
            return _status(pb.ILLEGAL_TOPIC, "the request names no topic")
        invalid = validate_topic(name)
        if invalid is not None:
            return _status(pb.ILLEGAL_TOPIC, invalid)
        config = self.broker.topic_config_manager.get(name)
        if config is None:
            return _status(pb.TOPIC_NOT_FOUND, f"topic {name} does not exist")
        return config

    def _queues(self, config: TopicConfig) -> list[pb.MessageQueue]:
        """This broker's group, then each ``clusterPeers`` group as the name-server role lists it
        (:func:`rocketstore.broker.peer_routes.live_groups`: its members registered with this
        broker's name server, else its configured master): a peer carries the same topic config
        and serves gRPC at the host of its remoting address, on this broker's grpcListenPort or,
        with grpcAdvertisedPortOffset, on its remoting port plus the offset, as the operator's
        brokers do. A peer group whose master is down is listed with its slaves alone,
        so clients send to it no more (nor are assigned its queues) until its master is back.

        A SLAVE names its group's master first (brokerId 0, at the host of the master's remoting
        address as the name server last gave it, on the gRPC port derived as a peer's), then itself under its
        brokerId, as RocketMQ 5's proxy lists every member of the name server's route: clients
        send to and are assigned the master's queues (brokerId 0) only. While no master is known
        (it is down) the slave lists itself alone.

        A brokerName whose write permission the embedded name server wiped (a drain,
        ``mqadmin wipeWritePerm``) has read-only queues here too.
        """
        cfg = self.broker.broker_config
        own_id = cfg.broker_id if self.broker.store_config.broker_role is BrokerRole.SLAVE else MASTER_ID
        brokers = [(pb.Broker(name=cfg.broker_name, id=own_id, endpoints=self.endpoint()), cfg.broker_permission)]
        master = self.broker.master_addr
        if own_id != MASTER_ID and master is not None:
            brokers.insert(0, (pb.Broker(name=cfg.broker_name, id=MASTER_ID, endpoints=self._grpc_endpoint(master)),
                               PERM_READ | PERM_WRITE))
        own = BrokerData(cluster=cfg.broker_cluster_name, broker_name=cfg.broker_name, broker_addrs={})
        for group in live_groups(own, cfg.cluster_peer_list(), self.broker.registered_groups())[1:]:
            for broker_id, addr in group.broker_addrs.items():
                brokers.append((pb.Broker(name=group.broker_name, id=broker_id, endpoints=self._grpc_endpoint(addr)),
                                PERM_READ | PERM_WRITE))
        wiped = self.broker.write_perm_wiped()
        return [pb.MessageQueue(topic=pb.Resource(name=config.topic_name), id=queue_id,
                                permission=queue_permission(
                                    queue_id, config, perm & ~PERM_WRITE if broker.name in wiped else perm,
                                ),  # type: ignore[arg-type]
                                broker=broker, accept_message_types=ACCEPTED_TYPES)
                for broker, perm in brokers
                for queue_id in range(max(config.read_queue_nums, config.write_queue_nums))]

    def _grpc_endpoint(self, remoting_addr: str) -> pb.Endpoints:
        """The gRPC endpoint of the broker at ``remoting_addr`` (``host:port``, as routes give it)."""
        host, _, port = remoting_addr.rpartition(":")
        cfg = self.broker.broker_config
        return endpoints_of(host.strip("[]"), advertised_grpc_port(int(port), self.endpoint().addresses[0].port,
                                                                    cfg.grpc_advertised_port_offset))

    def QueryRoute(self, request: pb.QueryRouteRequest, context: Any) -> pb.QueryRouteResponse:
        config = self._topic(request.topic.name)
        if isinstance(config, pb.Status):
            return pb.QueryRouteResponse(status=config)
        return pb.QueryRouteResponse(status=_status(pb.OK), message_queues=self._queues(config))

    def QueryAssignment(self, request: pb.QueryAssignmentRequest, context: Any) -> pb.QueryAssignmentResponse:
        config = self._topic(request.topic.name)
        if isinstance(config, pb.Status):
            return pb.QueryAssignmentResponse(status=config)
        # RocketMQ 5's proxy assigns the masters' queues only (a slave serves no pop)
        assignments = [pb.Assignment(message_queue=queue) for queue in self._queues(config)
                       if queue.permission in (pb.READ, pb.READ_WRITE) and queue.broker.id == MASTER_ID]
        return pb.QueryAssignmentResponse(status=_status(pb.OK), assignments=assignments)

    # -- client session ------------------------------------------------------------------------
    def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        channel = self._producers.get(_client_id(context))
        if channel is not None:
            self._join_groups(channel)
        self.renew.seen(_client_id(context), now_ms())
        return pb.HeartbeatResponse(status=_status(pb.OK))

    def NotifyClientTermination(self, request: pb.NotifyClientTerminationRequest,
                                context: Any) -> pb.NotifyClientTerminationResponse:
        channel = self._producers.get(_client_id(context))
        if channel is not None:
            self._leave_groups(channel)
        self.renew.release_client(_client_id(context))
        return pb.NotifyClientTerminationResponse(status=_status(pb.OK))

    def _join_groups(self, channel: TelemetryChannel) -> None:
        """The producer is a member of each of its topics' groups (registering again only renews it)."""
        for topic in channel.topics:
            self.broker.producer_manager.register(topic, ClientChannelInfo(
                connection=channel, client_id=channel.client_id, language=channel.language,
                version=GRPC_CLIENT_VERSION))

    def _leave_groups(self, channel: TelemetryChannel) -> None:
        self.broker.producer_manager.connection_closed(channel)
        if self._producers.get(channel.client_id) is channel:
            del self._producers[channel.client_id]

    async def Telemetry(self, request_iterator: AsyncIterator[pb.TelemetryCommand],
                        context: Any) -> AsyncIterator[pb.TelemetryCommand]:
        """Answers settings commands until the client closes the stream or the broker stops (a
        client holds this stream for its whole life: without ending it, every stop would wait
        out its whole grace period)."""
        delay_levels = list(parse_delay_levels(self.broker.store_config.message_delay_level))
        requests = aiter(request_iterator)
        closing = asyncio.ensure_future(self._closing.wait())
        channel = TelemetryChannel(server=self.broker.remoting, peer=context.peer(), client_id=_client_id(context),
                                   store_host=str(self.broker.store_host),
                                   language=language_code(_metadata(context, LANGUAGE_KEY)))
        following = asyncio.ensure_future(anext(requests))
        outgoing = asyncio.ensure_future(channel.outgoing.get())
        try:
            while True:
                await asyncio.wait([following, closing, outgoing], return_when=asyncio.FIRST_COMPLETED)
                if closing.done():
                    return
                if outgoing.done():  # a transaction check for this producer, or None: the broker dropped it
                    command = outgoing.result()
                    if command is None:
                        return
                    yield command
                    outgoing = asyncio.ensure_future(channel.outgoing.get())
                    continue
                try:
                    command = following.result()
                except StopAsyncIteration:
                    return
                following = asyncio.ensure_future(anext(requests))
                if command.WhichOneof("command") != "settings":
                    continue  # answers to commands this broker never sends
                if command.settings.WhichOneof("pub_sub") == "publishing":
                    self._producer_settings(channel, command.settings.publishing)
                group = command.settings.subscription.group.name
                groups = self.broker.subscription_group_manager
                group_config = groups.find_subscription_group_config(group) if group else None
                retry_max_times = group_config.retry_max_times if group_config is not None else 16
                yield pb.TelemetryCommand(status=_status(pb.OK), settings=settings_answer(
                    command.settings, max_body_size=self.broker.store_config.max_message_size,
                    retry_max_times=retry_max_times, delay_levels=delay_levels,
                    fifo=group_config is not None and group_config.consume_message_orderly))
        finally:
            for waiting in (closing, following, outgoing):
                if waiting.done() and not waiting.cancelled():
                    waiting.exception()  # retrieved: the stream's end is no error
                waiting.cancel()
            self._leave_groups(channel)
            channel.close()

    def _producer_settings(self, channel: TelemetryChannel, publishing: pb.Publishing) -> None:
        """A producer's (new) settings: it joins the groups of the topics it names."""
        self.broker.producer_manager.connection_closed(channel)  # topics it no longer names
        channel.topics = tuple(topic.name for topic in publishing.topics)
        if channel.client_id:
            earlier = self._producers.get(channel.client_id)
            if earlier is not None and earlier is not channel:  # the client opened a new stream
                self._leave_groups(earlier)
            self._producers[channel.client_id] = channel
        self._join_groups(channel)

    def close(self) -> None:
        """The broker stops: end every Telemetry stream (calls of other methods finish as they are)."""
        self._closing.set()

    # -- send ----------------------------------------------------------------------------------
    def SendMessage(self, request: pb.SendMessageRequest,
                    context: Any) -> pb.SendMessageResponse | Coroutine[Any, Any, pb.SendMessageResponse]:
        """Answers inline unless a put waits (SYNC_FLUSH, back-pressure): then a coroutine sends the
        rest of the request's messages after it, in order."""
        if not request.messages:
            return pb.SendMessageResponse(status=_status(pb.BAD_REQUEST, "no messages to send"))
        peer = context.peer()
        born_host = _peer_host(peer)
        response = pb.SendMessageResponse()
        for index, message in enumerate(request.messages):
            waiting = self._send_one(response.entries.add(), message, born_host, peer)
            if waiting is not None:
                return self._send_after_wait(request, response, waiting, index + 1, born_host, peer)
        return _summed_up(response)

    async def _send_after_wait(self, request: pb.SendMessageRequest, response: pb.SendMessageResponse,
                               waiting: Coroutine[Any, Any, None], rest: int, born_host: HostAddress,
                               peer: str) -> pb.SendMessageResponse:
        await waiting
        for message in request.messages[rest:]:
            waiting_too = self._send_one(response.entries.add(), message, born_host, peer)
            if waiting_too is not None:
                await waiting_too
        return _summed_up(response)

    def _send_one(self, entry: pb.SendResultEntry, message: pb.Message, born_host: HostAddress,
                  peer: str) -> Coroutine[Any, Any, None] | None:
        """The broker's send path for one message (as RocketMQ's proxy in local mode calls the broker's
        SendMessageProcessor), its result filled into ``entry``; a coroutine that fills it when the
        put waits (SYNC_FLUSH, back-pressure)."""
        try:
            header, properties = self._send_header(message)
        except BadMessage as exc:
            entry.status.code = exc.code  # type: ignore[assignment]
            entry.status.message = str(exc)
            entry.message_id = message.system_properties.message_id
            return None
        sent = self._sender.send(header, message.body, born_host, peer, BROKER_VERSION, properties)
        if isinstance(sent, SendOutcome):
            _send_result(entry, message, sent)
            return None
        return self._send_result_when_stored(entry, message, sent)

    @staticmethod
    async def _send_result_when_stored(entry: pb.SendResultEntry, message: pb.Message,
                                       sending: Coroutine[Any, Any, SendOutcome]) -> None:
        _send_result(entry, message, await sending)

    def _send_header(self, message: pb.Message) -> tuple[SendMessageRequestHeader, dict[str, str]]:
        """The send header a 4.x producer would send for ``message`` and its properties (as a map, which
        the send path takes as it is); BadMessage names what is wrong."""
        system = message.system_properties
        if not message.body:
            raise BadMessage(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
        if len(message.body) > self.broker.store_config.max_message_size:
            raise BadMessage(pb.MESSAGE_BODY_TOO_LARGE, f"the body has {len(message.body)} bytes, more than "
                             f"maxMessageSize {self.broker.store_config.max_message_size}")
        if system.body_encoding == pb.GZIP:
            raise BadMessage(pb.BAD_REQUEST, "GZIP-encoded bodies are not accepted; send the body as is")
        topic = message.topic.name
        invalid = validate_topic(topic) if topic else "the message names no topic"
        if invalid is not None:
            raise BadMessage(pb.ILLEGAL_TOPIC, invalid)
        properties = message_convert.store_properties(message)
        sys_flag = 0
        if system.message_type == pb.TRANSACTION:
            properties.update(transaction_properties(message))
            sys_flag = SysFlag.TRANSACTION_PREPARED
        queue_id = -1  # the send path picks a random writable queue
        if system.HasField("message_group"):
            config = self.broker.topic_config_manager.get(topic)
            if config is not None:
                queue_id = message_convert.fifo_queue(system.message_group, config.write_queue_nums)
        born_ms = _ms(system.born_timestamp) if system.HasField("born_timestamp") else int(time.time() * 1000)
        header = SendMessageRequestHeader(
            producer_group="", topic=topic, default_topic=AUTO_CREATE_TOPIC_KEY_TOPIC,
            default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS, queue_id=queue_id, sys_flag=sys_flag,
            born_timestamp=born_ms, flag=0, reconsume_times=0)
        return header, properties

    # -- transactions ----------------------------------------------------------------------------
    async def EndTransaction(self, request: pb.EndTransactionRequest, context: Any) -> pb.EndTransactionResponse:
        """The END_TRANSACTION a 4.x producer sends, through the registered handler; a transaction id
        that names no half message of the topic is INVALID_TRANSACTION_ID."""
        kind = _RESOLUTIONS.get(request.resolution)
        if kind is None:
            return pb.EndTransactionResponse(status=_status(
                pb.BAD_REQUEST, f"resolution {pb.TransactionResolution.Name(request.resolution)} ends no transaction; "
                "COMMIT or ROLLBACK"))
        try:
            commit_log_offset, half_offset = parse_transaction_id(request.transaction_id)
        except ValueError as exc:
            return pb.EndTransactionResponse(status=_status(pb.INVALID_TRANSACTION_ID, str(exc)))
        header = EndTransactionRequestHeader(
            producer_group=request.topic.name, tran_state_table_offset=half_offset,
            commit_log_offset=commit_log_offset, commit_or_rollback=kind, msg_id=request.message_id,
            from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK, transaction_id=request.transaction_id)
        half = self.broker.transactional_message_service.bridge.look_message_by_offset(commit_log_offset)
        refusal = check_prepare_message(half, header)
        if refusal is not None:
            return pb.EndTransactionResponse(status=_status(
                pb.INVALID_TRANSACTION_ID, f"{refusal}: transaction {request.transaction_id} of topic "
                f"{request.topic.name}"))
        command = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields(),
                                  version=BROKER_VERSION)
        reply = self.broker.remoting.handlers[RequestCode.END_TRANSACTION](_connection(self.broker, context.peer()),
                                                                           command)
        response = await reply if isinstance(reply, Awaitable) else reply
        if response is None:  # answered for COMMIT and ROLLBACK; never expected
            return pb.EndTransactionResponse(status=_status(pb.INTERNAL_SERVER_ERROR, "no answer"))
        code = message_convert.send_status_code(response.code)
        return pb.EndTransactionResponse(status=_status(code, response.remark or ""))

    # -- pop -----------------------------------------------------------------------------------
    async def ReceiveMessage(self, request: pb.ReceiveMessageRequest,
                             context: Any) -> AsyncIterator[pb.ReceiveMessageResponse | bytes]:
        group, topic = request.group.name, request.message_queue.topic.name
        config = self._topic(topic)
        problem = config if isinstance(config, pb.Status) else self._receive_problem(request)
        if problem is not None:
            yield pb.ReceiveMessageResponse(status=problem)
            return
        message_filter = self._message_filter(group, topic, request.filter_expression)
        if isinstance(message_filter, pb.Status):
            yield pb.ReceiveMessageResponse(status=message_filter)
            return
        invisible_ms = _ms(request.invisible_duration) if request.HasField("invisible_duration") \
            else self.broker.broker_config.default_invisible_time_mills
        if request.auto_renew:  # the broker keeps it invisible while the client consumes (as the proxy)
            invisible_ms = self.broker.broker_config.default_invisible_time_mills
        polling_ms = _ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") \
            else LONG_POLLING_MS
        wait_s = min(polling_ms, LONG_POLLING_MS) / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            wait_s = max(min(wait_s, remaining - DEADLINE_RESERVE_S), 0.0)
        received = await self.pop.receive(group, topic, message_filter, request.batch_size, invisible_ms, wait_s,
                                          request.attempt_id)
        if not received:
            yield pb.ReceiveMessageResponse(status=_status(pb.MESSAGE_NOT_FOUND, "no new message"))
            return
        if request.auto_renew:
            client_id, now = _client_id(context), now_ms()
            for item in received:
                self.renew.track(group, topic, client_id, item.handle, now)
        yield pb.ReceiveMessageResponse(status=_status(pb.OK))
        now = pb.ReceiveMessageResponse()
        now.delivery_timestamp.GetCurrentTime()
        yield now
        store_host = str(self.broker.store_host)
        for item in received:  # serialized already (see call_logic.Method.serialize)
            yield message_convert.received_message_response(
                item.message, receipt_handle=item.handle.encode(), attempt=item.attempt, invisible_ms=invisible_ms,
                store_host=store_host)

    def _message_filter(self, group: str, topic: str, expression: pb.FilterExpression) -> MessageFilter | pb.Status:
        """What a receive or pull filters by: a TAG expression (``*`` or empty for all), or a SQL92 one
        compiled as a 4.x pull's is (same cache, same ``rocketstore_filter_*`` counters); a SQL92
        expression needs ``enablePropertyFilter`` and must compile (ILLEGAL_FILTER_EXPRESSION)."""
        if expression.type != pb.SQL:
            return TagFilter(expression.expression)
        if not self.broker.broker_config.enable_property_filter:
            return _status(pb.ILLEGAL_FILTER_EXPRESSION, "the broker does not filter by SQL92 "
                           "(enablePropertyFilter=false); use a TAG expression")
        manager = self.broker.consumer_filter_manager
        built = manager.build(topic, group, expression.expression, SQL92)
        if isinstance(built, SelectorSyntaxError):
            return _status(pb.ILLEGAL_FILTER_EXPRESSION, f"the SQL92 expression does not parse: {built}")
        return ExpressionMessageFilter(built, manager.stats)

    def _receive_problem(self, request: pb.ReceiveMessageRequest) -> pb.Status | None:
        if self.broker.store_config.broker_role is BrokerRole.SLAVE:
            # pop state (pop.log) is the master's and is not replicated: a slave popping would hand
            # out messages the master hands out too (QueryAssignment names the master)
            return _status(pb.FORBIDDEN, f"the broker[{self.broker.broker_addr}] is a slave: receive from its "
                           "master, which QueryAssignment names")
        group = request.group.name
        if not group:
            return _status(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
        if self.broker.subscription_group_manager.find_subscription_group_config(group) is None:
            return _status(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        if request.batch_size <= 0:
            return _status(pb.BAD_REQUEST, f"batch_size must be positive, not {request.batch_size}")
        cfg = self.broker.broker_config
        if request.HasField("invisible_duration") and not request.auto_renew:
            invisible_ms = _ms(request.invisible_duration)
            if not cfg.min_invisible_time_mills_for_recv <= invisible_ms <= cfg.max_invisible_time_mills:
                return _status(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside "
                               f"[{cfg.min_invisible_time_mills_for_recv}, {cfg.max_invisible_time_mills}] ms")
        if request.HasField("long_polling_timeout") and _ms(request.long_polling_timeout) < 0:
            return _status(pb.ILLEGAL_POLLING_TIME, "the long polling timeout is negative")
        return None

    def _handle(self, request: Any, text: str) -> ReceiptHandle:
        """The delivery a client's receipt handle names now (renewed since, if the broker renews it);
        InvalidHandle when it names none."""
        return self.renew.current(request.group.name, request.topic.name, parse_handle(text))

    def AckMessage(self, request: pb.AckMessageRequest, context: Any) -> pb.AckMessageResponse:
        if not request.entries:
            return pb.AckMessageResponse(status=_status(pb.BAD_REQUEST, "no entries to ack"))
        response = pb.AckMessageResponse()
        group, topic = request.group.name, request.topic.name
        for entry in request.entries:
            result = response.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle)
            try:
                self.pop.ack(group, topic, self._handle(request, entry.receipt_handle))
            except InvalidHandle as exc:
                result.status.code = pb.INVALID_RECEIPT_HANDLE
                result.status.message = str(exc)
            else:
                result.status.code = pb.OK
                result.status.message = "OK"
        return _summed_up(response)

    def ForwardMessageToDeadLetterQueue(self, request: pb.ForwardMessageToDeadLetterQueueRequest,
                                        context: Any) -> pb.ForwardMessageToDeadLetterQueueResponse:
        try:
            error = self.pop.forward_to_dead_letter_queue(request.group.name, request.topic.name,
                                                          self._handle(request, request.receipt_handle))
        except InvalidHandle as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=_status(pb.INVALID_RECEIPT_HANDLE, str(exc)))
        if error is not None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=_status(pb.INTERNAL_SERVER_ERROR, error))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=_status(pb.OK))

    def ChangeInvisibleDuration(self, request: pb.ChangeInvisibleDurationRequest,
                                context: Any) -> pb.ChangeInvisibleDurationResponse:
        invisible_ms = _ms(request.invisible_duration)
        limit = self.broker.broker_config.max_invisible_time_mills
        if not 0 <= invisible_ms <= limit:
            return pb.ChangeInvisibleDurationResponse(status=_status(
                pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside [0, {limit}] ms"))
        try:
            handle = self.pop.change_invisible(request.group.name, request.topic.name,
                                               self._handle(request, request.receipt_handle), invisible_ms)
        except InvalidHandle as exc:
            return pb.ChangeInvisibleDurationResponse(status=_status(pb.INVALID_RECEIPT_HANDLE, str(exc)))
        return pb.ChangeInvisibleDurationResponse(status=_status(pb.OK), receipt_handle=handle.encode())

    # -- offset-based consumption ----------------------------------------------------------------
    def _own_queue(self, queue: pb.MessageQueue, *, readable: bool = True) -> tuple[TopicConfig, int] | pb.Status:
        """The topic config and queue id of a request's message queue, which must be one of this
        broker's (a peer's queue is served by that peer) and exist."""
        config = self._topic(queue.topic.name)
        if isinstance(config, pb.Status):
            return config
        own = self.broker.broker_config.broker_name
        if queue.broker.name and queue.broker.name != own:
            return _status(pb.BAD_REQUEST, f"queue {queue.id} of {config.topic_name} belongs to broker "
                           f"{queue.broker.name}; this is {own}")
        queue_nums = config.read_queue_nums if readable else max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= queue.id < queue_nums:
            return _status(pb.BAD_REQUEST, f"topic {config.topic_name} has no readable queue {queue.id} "
                           f"(readQueueNums {config.read_queue_nums})")
        return config, queue.id

    def _group_problem(self, group: str) -> pb.Status | None:
        if not group:
            return _status(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
        if self.broker.subscription_group_manager.find_subscription_group_config(group) is None:
            return _status(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        return None

    async def PullMessage(self, request: pb.PullMessageRequest, context: Any) -> AsyncIterator[pb.PullMessageResponse]:
        """Up to ``batch_size`` messages of one queue from ``offset``: a status, the messages, then the
        offset to pull from next (also when nothing matched the filter, so the client moves on)."""
        group = request.group.name
        found = self._own_queue(request.message_queue)
        problem = found if isinstance(found, pb.Status) else self._group_problem(group)
        if problem is None and request.batch_size <= 0:
            problem = _status(pb.BAD_REQUEST, f"batch_size must be positive, not {request.batch_size}")
        if problem is None and request.offset < 0:
            problem = _status(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        if problem is not None or isinstance(found, pb.Status):
            yield pb.PullMessageResponse(status=problem)
            return
        config, queue_id = found
        message_filter = self._message_filter(group, config.topic_name, request.filter_expression)
        if isinstance(message_filter, pb.Status):
            yield pb.PullMessageResponse(status=message_filter)
            return
        topic = config.topic_name
        polling_ms = _ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        wait_s = min(max(polling_ms, 0), LONG_POLLING_MS) / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            wait_s = max(min(wait_s, remaining - DEADLINE_RESERVE_S), 0.0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            result = self.broker.store.get_message(group, topic, queue_id, request.offset,
                                                   min(request.batch_size, MAX_BATCH), message_filter)
            at_end = result.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE)
            left = deadline - loop.time()
            if not at_end or left <= 0:
                break
            await self.pop.wait_for_news(topic, left)
            if self._closing.is_set():
                break
        if result.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            yield pb.PullMessageResponse(status=_status(
                pb.ILLEGAL_OFFSET, f"offset {request.offset} is outside queue {queue_id} of {topic}: "
                f"[{result.min_offset}, {result.max_offset}]"))
            yield pb.PullMessageResponse(next_offset=result.next_begin_offset)
            return
        messages = [message for message in map(decode_message, result.messages) if message is not None]
        if not messages:
            yield pb.PullMessageResponse(status=_status(pb.MESSAGE_NOT_FOUND, "no new message"))
            yield pb.PullMessageResponse(next_offset=result.next_begin_offset)
            return
        yield pb.PullMessageResponse(status=_status(pb.OK))
        store_host = str(self.broker.store_host)
        for message in messages:
            yield pb.PullMessageResponse(message=message_convert.received_message(
                message, receipt_handle="", attempt=message.reconsume_times + 1, invisible_ms=0,
                store_host=store_host))
        yield pb.PullMessageResponse(next_offset=result.next_begin_offset)

    def GetOffset(self, request: pb.GetOffsetRequest, context: Any) -> pb.GetOffsetResponse:
        """The group's committed offset of the queue (OFFSET_NOT_FOUND when it never committed one)."""
        found = self._own_queue(request.message_queue)
        problem = found if isinstance(found, pb.Status) else self._group_problem(request.group.name)
        if problem is not None or isinstance(found, pb.Status):
            return pb.GetOffsetResponse(status=problem)
        config, queue_id = found
        offset = self.broker.consumer_offset_manager.query_offset(request.group.name, config.topic_name, queue_id)
        if offset < 0:
            return pb.GetOffsetResponse(status=_status(
                pb.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset for queue {queue_id} of "
                f"{config.topic_name}"))
        return pb.GetOffsetResponse(status=_status(pb.OK), offset=offset)

    def QueryOffset(self, request: pb.QueryOffsetRequest, context: Any) -> pb.QueryOffsetResponse:
        """The queue's first offset, its end (the next message's offset), or the first offset stored
        at or after a timestamp."""
        found = self._own_queue(request.message_queue)
        if isinstance(found, pb.Status):
            return pb.QueryOffsetResponse(status=found)
        config, queue_id = found
        store = self.broker.store
        if request.query_offset_policy == pb.BEGINNING:
            offset = max(store.get_min_offset_in_queue(config.topic_name, queue_id), 0)
        elif request.query_offset_policy == pb.END:
            offset = store.get_max_offset_in_queue(config.topic_name, queue_id)
        elif not request.HasField("timestamp"):
            return pb.QueryOffsetResponse(status=_status(pb.BAD_REQUEST, "policy TIMESTAMP needs a timestamp"))
        else:
            offset = store.get_offset_in_queue_by_time(config.topic_name, queue_id,
                                                       request.timestamp.ToMilliseconds())
        return pb.QueryOffsetResponse(status=_status(pb.OK), offset=offset)

    def UpdateOffset(self, request: pb.UpdateOffsetRequest, context: Any) -> pb.UpdateOffsetResponse:
        """Commit the group's offset of the queue (what it consumes next); pop receives of the group
        continue from there too."""
        found = self._own_queue(request.message_queue)
        problem = found if isinstance(found, pb.Status) else self._group_problem(request.group.name)
        if problem is not None or isinstance(found, pb.Status):
            return pb.UpdateOffsetResponse(status=problem)
        config, queue_id = found
        end = self.broker.store.get_max_offset_in_queue(config.topic_name, queue_id)
        if not 0 <= request.offset <= end:
            return pb.UpdateOffsetResponse(status=_status(
                pb.ILLEGAL_OFFSET, f"offset {request.offset} is outside queue {queue_id} of {config.topic_name}: "
                f"[0, {end}]"))
        self.broker.consumer_offset_manager.commit_offset(request.group.name, config.topic_name, queue_id,
                                                          request.offset)
        return pb.UpdateOffsetResponse(status=_status(pb.OK))
