"""RocketStore's own client library over RocketMQ's remoting protocol.

Used by the ``rocketstore admin`` CLI, the Kubernetes operator and the Spark pipeline::

    from rocketstore.client import Producer, PullConsumer, MQAdmin, BrokerAdmin

Producer, PullConsumer and MQAdmin take a name-server address, or ``routes=BrokerRoutes(addrs, client)``
(a route source) to ask brokers directly, with no name server.

Security is opt-in per :class:`RemotingClient` (``ssl_context=client_ssl_context(...)`` for TLS,
``rpc_hook=AclClientRPCHook(SessionCredentials(ak, sk))`` for a broker with plain ACL).

Everything here is synchronous and thread-safe; asyncio code can await
:meth:`RemotingClient.invoke_async` / ``call_async`` or run the blocking calls with
``asyncio.to_thread``.
"""

from rocketstore.client.acl_hook import AclClientRPCHook, SessionCredentials
from rocketstore.client.admin import BrokerAdmin, ConsumeStats, MQAdmin, OffsetWrapper, TopicOffset
from rocketstore.client.consumer import PullConsumer, PullResult, PullStatus
from rocketstore.client.producer import (
    OutgoingMessage,
    Producer,
    SendResult,
    SendStatus,
    create_uniq_id,
    nearly_time_from_uniq_id,
)
from rocketstore.client.remoting_client import (
    BrokerRoutes,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    RemotingClientError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
    RouteSource,
)
from rocketstore.client.tls import client_ssl_context

__all__ = [
    "AclClientRPCHook",
    "BrokerAdmin",
    "BrokerRoutes",
    "ConsumeStats",
    "MQAdmin",
    "MessageQueue",
    "NameServerClient",
    "OffsetWrapper",
    "OutgoingMessage",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "RemotingClient",
    "RemotingClientError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeout",
    "RouteSource",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "TopicOffset",
    "client_ssl_context",
    "create_uniq_id",
    "nearly_time_from_uniq_id",
]
