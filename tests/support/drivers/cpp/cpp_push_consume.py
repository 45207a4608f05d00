"""Push-consume with the C++ RocketMQ 4.x client (rocketmq-client-python 0.5.0rc2); JSON lines out.

``cpp_push_consume.py NAMESRV TOPIC GROUP EXPECTED [--tags EXPR] [--fail-times N] [--timeout S]
[--linger MS]``: subscribes GROUP to TOPIC with EXPR and runs until EXPECTED distinct messages
were consumed successfully (or the timeout). Every delivery is one ``{"kind": "received", ...}``
line; the first ``--fail-times`` deliveries of each message answer RECONSUME_LATER. Then the
consumer shuts down (which commits its offsets to the broker) and a summary line follows.
Exit 0 when enough messages arrived, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter

from rocketmq.client import ConsumeStatus, PushConsumer, RecvMessage

_lock = threading.Lock()


def emit(**fields: object) -> None:
    with _lock:
        print(json.dumps(fields), flush=True)


def text(value: bytes | str | None) -> str | None:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("expected", type=int)
    parser.add_argument("--tags", default="*")
    parser.add_argument("--fail-times", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--linger", type=int, default=0)
    args = parser.parse_args()

    deliveries: Counter[str] = Counter()
    succeeded: set[str] = set()
    enough = threading.Event()

    def on_message(msg: RecvMessage) -> ConsumeStatus:
        uniq = text(msg.get_property("UNIQ_KEY"))
        with _lock:
            deliveries[uniq or msg.id] += 1
            n = deliveries[uniq or msg.id]
        ok = n > args.fail_times
        emit(kind="received", msgId=msg.id, uniqKey=uniq, topic=msg.topic, tags=text(msg.tags),
             keys=text(msg.keys), body=text(msg.body), queueId=msg.queue_id, queueOffset=msg.queue_offset,
             commitLogOffset=msg.commit_log_offset, reconsumeTimes=msg.reconsume_times, delivery=n,
             status="CONSUME_SUCCESS" if ok else "RECONSUME_LATER")
        if ok:
            with _lock:
                succeeded.add(uniq or msg.id)
                if len(succeeded) >= args.expected:
                    enough.set()
            return ConsumeStatus.CONSUME_SUCCESS
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    # One message per callback: the C API hands a batch to the wrapper, which stops at the first
    # failed message and fails the whole batch (the rest are sent back without being seen).
    consumer.set_message_batch_max_size(1)
    consumer.subscribe(args.topic, on_message, args.tags)
    consumer.start()
    ok = enough.wait(args.timeout)
    if ok and args.linger:
        time.sleep(args.linger / 1000)
    # shutdown() persists the consume offsets to the broker; never let a hung shutdown hold the run
    stopper = threading.Thread(target=consumer.shutdown, daemon=True)
    stopper.start()
    stopper.join(20)
    emit(kind="summary", consumed=len(succeeded), deliveries=sum(deliveries.values()), expected=args.expected,
         timedOut=not ok, shutdownHung=stopper.is_alive())
    sys.stdout.flush()
    os._exit(0 if ok else 1)  # the client's native threads must not keep the process alive


if __name__ == "__main__":
    main()
