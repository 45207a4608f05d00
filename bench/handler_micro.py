"""Micro-benchmark of the broker's SEND and PULL handlers and of the gRPC port's per-call logic
(a real store, no sockets).

    python3 bench/handler_micro.py              # ~20 s
    python3 bench/handler_micro.py -n 20000 --repeat 7

A broker is started in this process on a temporary store (ASYNC_FLUSH, no HTTP or name-server
port); its registered handlers for SEND_MESSAGE_V2 and PULL_MESSAGE are then called directly on
the broker's loop, as the remoting server calls them inline for a request that does not wait.
Printed: microseconds per call, best of ``--repeat`` timed runs (noise only makes a number
worse):

* ``send 1 KiB``: one SEND_MESSAGE_V2 of a 1 KiB body (decode header, checks, put, response);
* ``pull 32``: one PULL_MESSAGE returning 32 of those messages (checks, store read, response);
* ``pull 1``: one PULL_MESSAGE returning a single message;
* ``grpc send 1 KiB``: one SendMessage of a 1 KiB body through the gRPC port's per-call logic
  (grpc_v2/call_logic.py: parse, the servicer, the call's metrics) and its response serialized,
  as the native front runs a call that answers inline;
* ``grpc receive, per msg``: ReceiveMessage calls of 32 messages each (pop state, conversion to
  v2 messages, every response serialized), per message received;
* ``grpc ack``: one AckMessage of one receipt handle, as a SimpleConsumer acks.

What it is for: the cost the broker's own bookkeeping (per-topic and per-group counters, latency
histograms) adds per request, and the gRPC port's Python work per call, measured by running it
before and after a change. What the transports add (sockets, HTTP/2, the event loop) is not in
it: bench/run_broker_bench.py and bench/run_grpc_bench.py measure those end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2.call_logic import Method, methods
from rocketstore.broker.grpc_v2.native_front import CallContext
from rocketstore.broker.grpc_v2.server import GrpcServer
from rocketstore.broker.server import Connection
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader
from rocketstore.store.config import StoreConfig

TOPIC = "BenchTopic"
GROUP = "BenchGroup"


def send_request() -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="BenchProducer", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
        properties="UNIQ_KEY\x017F000001B1E418B4AAC2665D6B8F0000\x02WAIT\x01true\x02TAGS\x01TagA\x02")
    return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_v2_ext_fields(), body=b"x" * 1024)


def pull_request(offset: int, max_msgs: int) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": str(max_msgs), "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subscription": "*", "subVersion": "0", "expressionType": "TAG"})


def grpc_send_request() -> bytes:
    message = pb.Message(topic=pb.Resource(name=TOPIC), body=b"x" * 1024)
    system = message.system_properties
    system.message_id = "01" + "AB" * 16
    system.tag = "TagA"
    system.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    system.born_host = "127.0.0.1"
    system.message_type = pb.NORMAL
    raw: bytes = pb.SendMessageRequest(messages=[message]).SerializeToString()
    return raw


def grpc_receive_request(batch: int) -> bytes:
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=batch)
    request.invisible_duration.FromSeconds(300)
    request.long_polling_timeout.FromSeconds(0)
    raw: bytes = request.SerializeToString()
    return raw


def inline(method: Method, raw: bytes, context: CallContext) -> Any:
    """A unary call's response, which these calls give inline (a coroutine would mean they waited)."""
    answer = method.behaviour(raw, context)
    assert not asyncio.iscoroutine(answer), f"{method.name} waited"
    return answer


async def grpc_cases(broker: BrokerController, n: int, repeat: int) -> dict[str, float]:
    server = GrpcServer(broker, "127.0.0.1", 0)
    await server.start()
    try:
        assert server._service is not None
        by_name = {m.name: m for m in methods(server._service, server.metrics)}
        send, receive, ack = by_name["SendMessage"], by_name["ReceiveMessage"], by_name["AckMessage"]
        context = CallContext("ipv4:127.0.0.1:50000", [("x-mq-client-id", "bench-client")], None)
        raw_send = grpc_send_request()

        def one_send(_: int) -> None:
            response = inline(send, raw_send, context)
            assert response.status.code == pb.OK, response
            send.serialize(response)

        results = {"grpc send 1 KiB": best_us(one_send, n, repeat)}
        assert await asyncio.to_thread(broker.store.reput_service.wait_caught_up, 30.0)
        raw_receive = grpc_receive_request(32)
        messages: list[pb.Message] = []
        receive_s = 0.0
        while len(messages) < n:  # the messages the sends left, 32 a call
            start = time.perf_counter()
            got = [receive.serialize(response) async for response in receive.behaviour(raw_receive, context)]
            receive_s += time.perf_counter() - start
            received = [pb.ReceiveMessageResponse.FromString(raw) for raw in got]
            assert any(r.HasField("message") for r in received), "the store ran out of messages to receive"
            messages += [r.message for r in received if r.HasField("message")]
        handles = [pb.AckMessageRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
            entries=[pb.AckMessageEntry(message_id=m.system_properties.message_id,
                                        receipt_handle=m.system_properties.receipt_handle)],
        ).SerializeToString() for m in messages]
        results["grpc receive, per msg"] = receive_s / len(handles) * 1e6

        def one_ack(i: int) -> None:
            response = inline(ack, handles[i], context)
            assert response.status.code == pb.OK, response
            ack.serialize(response)

        results["grpc ack"] = best_us(one_ack, len(handles), 1)  # a handle acks once
        return results
    finally:
        await server.stop(grace_s=1.0)


def best_us(fn: Callable[[int], Any], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


async def run(root: Path, n: int, repeat: int) -> dict[str, float]:
    broker = BrokerController(
        BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                     http_listen_port=0, grpc_listen_port=0,  # the gRPC logic is started below, without a port
                     max_dispatch_lag_bytes=0),  # no back-pressure waits: inline only
        StoreConfig(store_path_root_dir=str(root)))
    await broker.start()
    try:
        conn = Connection(broker.remoting)
        send = broker.remoting.handlers[RequestCode.SEND_MESSAGE_V2]
        pull = broker.remoting.handlers[RequestCode.PULL_MESSAGE]
        request = send_request()

        def one_send(_: int) -> None:
            reply = send(conn, request)
            assert isinstance(reply, RemotingCommand) and reply.code == ResponseCode.SUCCESS, reply

        results = {"send 1 KiB": best_us(one_send, n, repeat)}
        assert await asyncio.to_thread(broker.store.reput_service.wait_caught_up, 30.0)
        stored = broker.store.get_max_offset_in_queue(TOPIC, 0)
        for label, batch in (("pull 32", 32), ("pull 1", 1)):
            requests = [pull_request((i * batch) % (stored - batch), batch) for i in range(n)]

            def one_pull(i: int, requests: list[RemotingCommand] = requests) -> None:
                reply = pull(conn, requests[i])
                assert isinstance(reply, RemotingCommand) and reply.code == ResponseCode.SUCCESS, reply

            results[label] = best_us(one_pull, n, repeat)
        results.update(await grpc_cases(broker, n, repeat))
        return results
    finally:
        await broker.stop(grace_s=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (best is shown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="handler-micro-") as tmp:
        results = asyncio.run(run(Path(tmp), args.n, args.repeat))
    for label, us in results.items():
        print(f"{label:22s} {us:8.2f} us/call")


if __name__ == "__main__":
    main()
