"""The connection limits' broker.conf keys and what the gRPC port makes of them (transport_limits.py).

What the limits do against hostile clients is tested on a broker process in test_hostile_clients.py.
"""

from __future__ import annotations

import pytest

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.grpc_v2.pop_service import MAX_BATCH
from rocketstore.broker.grpc_v2.transport_limits import (
    MAX_HEADER_LIST_BYTES,
    grpcio_options,
    max_request_bytes,
    transport_limits,
)
from rocketstore.store.config import ConfigError, StoreConfig


def test_defaults() -> None:
    props = BrokerConfig().to_properties()
    assert props["serverChannelMaxIdleTimeSeconds"] == "120"  # RocketMQ's NettyServerConfig
    assert props["grpcClientIdleTimeMills"] == "120000"  # RocketMQ's proxy
    assert props["remotingMaxConnections"] == props["grpcMaxConnections"] == "10000"
    assert props["grpcMaxConcurrentCallsPerConnection"] == "1000"


@pytest.mark.parametrize("key", ["remotingMaxConnections", "grpcMaxConnections", "grpcMaxConcurrentCallsPerConnection"])
def test_a_cap_of_zero_would_refuse_everyone_and_stops_the_start(key: str) -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig.from_properties({key: "0"})
    assert err.value.key == key


def test_a_live_update_cannot_set_the_remoting_cap_to_zero() -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig().parse_update({"remotingMaxConnections": "0"})
    assert err.value.key == "remotingMaxConnections"
    assert BrokerConfig().parse_update({"remotingMaxConnections": "5"}) == {"remoting_max_connections": 5}


def test_the_largest_request_is_a_message_of_max_message_size_and_its_largest_envelope() -> None:
    # body + twice the properties limit (protobuf map entries vs the stored string) + topic and
    # namespace names + tags, lengths and fixed-size fields
    assert max_request_bytes(4 * 1024 * 1024) == 4 * 1024 * 1024 + 2 * 32767 + 2 * 127 + 1024
    assert max_request_bytes(4 * 1024 * 1024) < 5 * 1024 * 1024  # not RocketMQ proxy's 130 MiB


def test_transport_limits_follow_the_keys() -> None:
    broker_config = BrokerConfig(grpc_max_connections=7, grpc_max_concurrent_calls_per_connection=9,
                                 grpc_client_idle_time_mills=-1)
    limits = transport_limits(broker_config, StoreConfig(max_message_size=1024))
    assert limits.max_message_bytes == max_request_bytes(1024)
    assert limits.max_request_bytes_per_connection >= 2 * limits.max_message_bytes
    # a client that reads gets a whole batch of the largest messages
    assert limits.max_response_bytes_per_connection >= MAX_BATCH * limits.max_message_bytes
    assert (limits.max_connections, limits.max_concurrent_streams, limits.idle_timeout_ms) == (7, 9, 0)
    options = dict(grpcio_options(limits))
    assert options == {"grpc.max_receive_message_length": max_request_bytes(1024), "grpc.max_concurrent_streams": 9,
                       "grpc.max_metadata_size": MAX_HEADER_LIST_BYTES, "grpc.max_allowed_incoming_connections": 7}
    with_idle = transport_limits(BrokerConfig(), StoreConfig())
    assert dict(grpcio_options(with_idle))["grpc.max_connection_idle_ms"] == 120_000
