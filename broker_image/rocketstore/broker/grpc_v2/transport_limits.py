"""TransportLimits: what one client may make the gRPC port hold, from broker.conf, for both servers.

A hostile client (or a broken one) must not be able to grow the broker without bound through the
gRPC port. What bounds it:

* the largest request, tied to the store's ``maxMessageSize`` (:func:`max_request_bytes`) rather
  than RocketMQ proxy's 130 MiB, which one pod could not hold many of;
* the request bytes one connection may have in messages not complete yet, all its streams
  together (:data:`REQUESTS_IN_PROGRESS_PER_CONNECTION` requests of the largest size): the
  HTTP/2 windows stop bounding what the front holds once it has read the bytes (it reads them
  as they come so that a message larger than a window can arrive);
* the response bytes one connection's calls may have waiting for the client to open its windows
  (:data:`RESPONSE_BATCHES_PER_CONNECTION` batches of the largest messages): a client that asks
  for messages and never reads them (a slow reader) would otherwise make the broker hold a batch
  per stream. Past it the call is reset ENHANCE_YOUR_CALM; what it received becomes visible again
  after its invisible time, as after any lost response;
* HTTP/2 streams open at once per connection (``grpcMaxConcurrentCallsPerConnection``), the
  header list (:data:`MAX_HEADER_LIST_BYTES`), frames;
* connections at once (``grpcMaxConnections``), and how long one with no call open is kept
  (``grpcClientIdleTimeMills``, RocketMQ's proxy key: grpc-java's ``maxConnectionIdle``).

The native front (native/src/grpc_front.rs) takes these and adds its own fixed HTTP/2 limits
(frame size, windows, send buffer, reset floods); grpcio gets them as channel arguments
(:func:`grpcio_options`), where its core has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.grpc_v2.pop_service import MAX_BATCH
from rocketstore.common.message import MAX_PROPERTIES_LENGTH
from rocketstore.common.topic_validator import TOPIC_MAX_LENGTH
from rocketstore.store.config import StoreConfig

#: Request header list (all metadata) accepted: grpc-java servers take 8 KiB; twice that leaves
#: room for signatures and tracing headers. The native front has the same (MAX_HEADER_LIST_BYTES).
MAX_HEADER_LIST_BYTES: Final = 16 * 1024
#: Bytes of a SendMessageRequest around the body of its message that are neither properties nor
#: names: field tags and lengths, timestamps, enums, the body digest, message id and born host.
ENVELOPE_FIXED_BYTES: Final = 1024
#: Largest requests one connection may have in progress at once (see the module docstring).
REQUESTS_IN_PROGRESS_PER_CONNECTION: Final = 8
#: Batches (ReceiveMessage, PullMessage: up to MAX_BATCH messages) of the largest messages one
#: connection's calls may have waiting for the client's windows: a client that reads receives
#: whole batches, however large.
RESPONSE_BATCHES_PER_CONNECTION: Final = 2


def max_request_bytes(max_message_size: int) -> int:
    """The largest gRPC request: a SendMessageRequest with one message of ``maxMessageSize`` bytes
    of body and the largest envelope RocketMQ stores with it.

    Everything RocketMQ stores as the message's properties (tag, keys, message group, user
    properties...) must fit its properties limit once stored (``MAX_PROPERTIES_LENGTH``, separators
    included). In protobuf a map entry costs at most twice what it does stored: a key and a value
    of one byte each take 4 bytes stored (two separators) and 8 in protobuf (a tag and a length
    for the entry, the key and the value). The topic and its namespace are names of at most
    ``TOPIC_MAX_LENGTH`` characters each, stored apart from the properties. A batch
    (several messages in one request) fits when its bodies and envelopes do, as the store bounds
    a remoting batch by its whole body.
    """
    return max_message_size + 2 * MAX_PROPERTIES_LENGTH + 2 * TOPIC_MAX_LENGTH + ENVELOPE_FIXED_BYTES


@dataclass(frozen=True, slots=True)
class TransportLimits:
    """The gRPC port's limits, read when it opens."""

    max_message_bytes: int
    max_request_bytes_per_connection: int
    max_response_bytes_per_connection: int
    max_concurrent_streams: int
    max_connections: int
    #: 0: idle connections are kept
    idle_timeout_ms: int


def transport_limits(broker_config: BrokerConfig, store_config: StoreConfig) -> TransportLimits:
    """The limits broker.conf sets (the keys are checked at load: see broker_config.py)."""
    largest = max_request_bytes(store_config.max_message_size)
    return TransportLimits(
        max_message_bytes=largest,
        # + 5: each gRPC message's length prefix
        max_request_bytes_per_connection=REQUESTS_IN_PROGRESS_PER_CONNECTION * (largest + 5),
        # a response message is at most as large as the request that stored it
        max_response_bytes_per_connection=RESPONSE_BATCHES_PER_CONNECTION * MAX_BATCH * (largest + 5),
        max_concurrent_streams=broker_config.grpc_max_concurrent_calls_per_connection,
        max_connections=broker_config.grpc_max_connections,
        idle_timeout_ms=max(broker_config.grpc_client_idle_time_mills, 0),
    )


def grpcio_options(limits: TransportLimits) -> list[tuple[str, int]]:
    """The limits as grpcio channel arguments (grpcio serves a TLS port). grpcio bounds no request
    or response bytes per connection; its core answers ping floods itself (GOAWAY after repeated
    pings without data)."""
    options = [("grpc.max_receive_message_length", limits.max_message_bytes),
               ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
               ("grpc.max_metadata_size", MAX_HEADER_LIST_BYTES),
               ("grpc.max_allowed_incoming_connections", limits.max_connections)]
    if limits.idle_timeout_ms > 0:
        options.append(("grpc.max_connection_idle_ms", limits.idle_timeout_ms))
    return options
