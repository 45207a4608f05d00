"""Send messages with the C++ RocketMQ 4.x client (rocketmq-client-python 0.5.0rc2); JSON lines out.

Run with the client's own virtualenv's python (see tests/compat/cpp/test_cpp_client.py), never the test
interpreter: ``cpp_produce.py NAMESRV TOPIC COUNT [--tags A,B] [--size N] [--oneway N]``.
Message i gets body ``body-<i>`` (padded with x to ``--size``), key ``key-<i>`` and tag
``tags[i % len(tags)]``. One line ``{"kind": "sent", ...}`` per send, then a summary line;
``--oneway N`` sends the last N messages one-way (no result).
"""

from __future__ import annotations

import argparse
import json
import sys

from rocketmq.client import Message, Producer, SendStatus


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("count", type=int)
    parser.add_argument("--group", default="cpp_e2e_producer")
    parser.add_argument("--tags", default="")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--oneway", type=int, default=0)
    args = parser.parse_args()
    tags = [t for t in args.tags.split(",") if t]

    producer = Producer(args.group, timeout=5000)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    failed = 0
    try:
        for i in range(args.count):
            body = f"body-{i}".ljust(args.size, "x")
            msg = Message(args.topic)
            msg.set_keys(f"key-{i}")
            tag = tags[i % len(tags)] if tags else None
            if tag:
                msg.set_tags(tag)
            msg.set_body(body)
            common = {"body": body, "key": f"key-{i}", "tag": tag}
            if i >= args.count - args.oneway:
                producer.send_oneway(msg)
                emit(kind="sent", status="ONEWAY", msgId=None, queueOffset=None, **common)
                continue
            try:
                result = producer.send_sync(msg)
            except Exception as exc:  # the client raises ProducerSendSyncFailed with its own text
                failed += 1
                emit(kind="error", error=f"send {i} failed: {exc}")
                continue
            if result.status is not SendStatus.OK:
                failed += 1
            emit(kind="sent", status=result.status.name, msgId=result.msg_id, queueOffset=result.offset, **common)
    finally:
        producer.shutdown()
    emit(kind="summary", count=args.count, failed=failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
