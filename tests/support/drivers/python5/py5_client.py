"""Drives the real RocketMQ 5.x Python client (``rocketmq-python-client``) for
tests/compat/python5/test_python_5x_client.py; run by the interpreter of the client's own virtualenv.

Prints one JSON object per line on stdout (``kind`` says what it is):

    produce ENDPOINT TOPIC COUNT [--tag T] [--prop k=v ...]   -> {"kind": "sent", ...} per message
    consume ENDPOINT TOPIC GROUP --expect N --mode MODE ...   -> {"kind": "received", ...} per delivery
    push ENDPOINT TOPIC GROUP --expect N                      -> {"kind": "received", ...} per message a
                                                                 PushConsumer's listener consumed
    facts                                                     -> {"kind": "facts", ...} the client's
                                                                 protocol (field numbers and types)

produce, consume and push take ``--access-key AK --secret-key SK``: the client then signs its calls
(``MQv2-HMAC-SHA1``) for a broker with ``aclEnable``; without them it sends empty credentials.

consume modes: ``ack`` acks every message; ``none`` acks nothing; ``nack-first`` puts a first
delivery back at once (ChangeInvisibleDuration 0 s) and acks later ones; ``ignore-first`` leaves a
first delivery unacked and acks later ones; ``ack-even`` acks the messages whose ``index`` property is
even and leaves the others. It stops after ``--expect`` deliveries or ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def configuration(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key), request_timeout=5)


def produce(args: argparse.Namespace) -> None:
    from rocketmq import Message, Producer

    producer = Producer(configuration(args), (args.topic,))
    producer.startup()
    try:
        for index in range(args.count):
            message = Message()
            message.topic = args.topic
            message.body = f"{args.body_prefix}-{index}".encode()
            if args.tag:
                message.tag = args.tag
            message.keys = f"{args.body_prefix}-key-{index}"  # the setter adds one key per assignment
            message.keys = f"{args.body_prefix}-alt-{index}"
            message.add_property("index", str(index))
            for pair in args.prop:
                key, _, value = pair.partition("=")
                message.add_property(key, value)
            receipt = producer.send(message)
            emit(kind="sent", index=index, message_id=receipt.message_id, body=message.body.decode())
    finally:
        producer.shutdown()


def consume(args: argparse.Namespace) -> None:
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(configuration(args), args.group, {args.topic: FilterExpression(args.tag)},
                              await_duration=args.await_s)
    consumer.startup()
    deliveries = 0
    started = time.monotonic()
    try:
        while deliveries < args.expect and time.monotonic() - started < args.timeout:
            for message in consumer.receive(16, args.invisible):
                deliveries += 1
                attempt = message.delivery_attempt
                emit(kind="received", message_id=message.message_id, body=message.body.decode(), tag=message.tag,
                     keys=sorted(message.keys), properties=message.properties, attempt=attempt,
                     at=time.monotonic() - started)
                if args.mode == "ack" or (args.mode in ("nack-first", "ignore-first") and attempt > 1) or (
                        args.mode == "ack-even" and int(message.properties["index"]) % 2 == 0):
                    consumer.ack(message)
                    emit(kind="acked", message_id=message.message_id)
                elif args.mode == "nack-first":
                    consumer.change_invisible_duration(message, 0)
                    emit(kind="nacked", message_id=message.message_id)
    finally:
        consumer.shutdown()
    emit(kind="done", deliveries=deliveries)


def push(args: argparse.Namespace) -> None:
    """A PushConsumer until ``--expect`` messages were consumed (each one answered SUCCESS)."""
    import threading

    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

    done = threading.Event()
    lock = threading.Lock()
    consumed: list[str] = []

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message):  # type: ignore[no-untyped-def]
            with lock:
                consumed.append(message.message_id)
                emit(kind="received", message_id=message.message_id, body=message.body.decode(),
                     attempt=message.delivery_attempt)
                if len(consumed) >= args.expect:
                    done.set()
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(configuration(args), args.group, Listener(), {args.topic: FilterExpression("*")})
    consumer.startup()
    try:
        done.wait(args.timeout)
    finally:
        consumer.shutdown()
    emit(kind="done", deliveries=len(consumed))


def facts(_: argparse.Namespace) -> None:
    """Every message's fields (number, type, label, type name), every enum's values and the
    service's methods of the client's own generated protocol modules."""
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    messages: dict[str, list[list[object]]] = {}
    enums: dict[str, dict[str, int]] = {}
    methods: dict[str, list[object]] = {}

    def walk(descriptor) -> None:  # type: ignore[no-untyped-def]
        messages[descriptor.full_name] = sorted(
            [f.number, f.name, f.type, f.is_repeated, f.has_presence, f.message_type.full_name if f.message_type else
             f.enum_type.full_name if f.enum_type else ""] for f in descriptor.fields)
        for nested in descriptor.nested_types:
            walk(nested)
        for enum in descriptor.enum_types:
            enums[enum.full_name] = {v.name: v.number for v in enum.values}

    for module in (definition_pb2, service_pb2):
        for descriptor in module.DESCRIPTOR.message_types_by_name.values():
            walk(descriptor)
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            enums[enum.full_name] = {v.name: v.number for v in enum.values}
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods[f"{service.full_name}/{method.name}"] = [
                    method.input_type.full_name, method.output_type.full_name, method.client_streaming,
                    method.server_streaming]
    emit(kind="facts", messages=messages, enums=enums, methods=methods)


def main() -> int:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    credentials = argparse.ArgumentParser(add_help=False)
    credentials.add_argument("--access-key", default="")
    credentials.add_argument("--secret-key", default="")
    p = commands.add_parser("produce", parents=[credentials])
    p.add_argument("endpoint")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("--tag", default="")
    p.add_argument("--body-prefix", default="body")
    p.add_argument("--prop", action="append", default=[])
    p.set_defaults(run=produce)
    c = commands.add_parser("consume", parents=[credentials])
    c.add_argument("endpoint")
    c.add_argument("topic")
    c.add_argument("group")
    c.add_argument("--expect", type=int, required=True)
    c.add_argument("--mode", choices=["ack", "none", "nack-first", "ignore-first", "ack-even"], default="ack")
    c.add_argument("--tag", default="*")
    c.add_argument("--invisible", type=int, default=30, help="seconds")
    c.add_argument("--await-s", type=int, default=2, help="long polling, seconds")
    c.add_argument("--timeout", type=float, default=30.0)
    c.set_defaults(run=consume)
    u = commands.add_parser("push", parents=[credentials])
    u.add_argument("endpoint")
    u.add_argument("topic")
    u.add_argument("group")
    u.add_argument("--expect", type=int, required=True)
    u.add_argument("--timeout", type=float, default=30.0)
    u.set_defaults(run=push)
    f = commands.add_parser("facts")
    f.set_defaults(run=facts)
    args = parser.parse_args()
    try:
        args.run(args)
    except Exception as exc:  # the test reads the reason from stdout
        emit(kind="error", error=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
