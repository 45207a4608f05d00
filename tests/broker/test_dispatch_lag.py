"""Acknowledged messages become visible promptly even when the broker is starved of CPU.

Dispatch (ConsumeQueue and IndexFile entries) runs on its own thread and shares CPython's
interpreter lock with the send path. With the machine's cores busy, it used to fall seconds
behind a flat-out send load (3.5 s behind the last acknowledged send measured here on 2 cores
with ``maxDispatchLagBytes=0``), so a consumer or a batch read planned from the queues' max
offsets missed messages that had been acknowledged. ``maxDispatchLagBytes`` makes sends wait
for dispatch. Everything here is real: a broker process, sender processes using the client
library, and two busy-loop processes that take the CPU (the contention is real, not simulated).
The lag is read where operators read it, from the broker's Prometheus endpoint.

A send held back that way waits for dispatch without polling: the second test holds dispatch
for real (a dispatcher that blocks until released) and counts how often the broker's event
loop wakes up while the send waits, then checks the send goes on as soon as dispatch catches up.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from broker_process import Broker

from rocketstore.client.admin import MQAdmin
from rocketstore.client.producer import Producer
from rocketstore.remoting.codes import ResponseCode
from rocketstore.remoting.command import RemotingCommand

if TYPE_CHECKING:
    # Only a type: the sender processes this module spawns import it again, and need no broker.
    from inprocess_broker import BrokerHandle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "LagTopic"
LIMIT = 64 * 1024
SENDERS = 3
BATCHES = 300
BATCH = [bytes(1024)] * 64
_BEHIND = re.compile(rb"^rocketstore_dispatch_behind_bytes (\S+)$", re.M)


def _send(namesrv: str) -> None:
    with Producer(namesrv, "lag-producers") as producer:
        for _ in range(BATCHES):
            producer.send_batch(TOPIC, BATCH)


def _visible(namesrv: str) -> int:
    with MQAdmin(namesrv) as admin:
        return sum(s.max_offset for s in admin.topic_status(TOPIC))


def test_dispatch_stays_within_max_dispatch_lag_bytes_under_cpu_contention(tmp_path: Path) -> None:
    broker = Broker(tmp_path, f"maxDispatchLagBytes={LIMIT}\n")
    broker.start()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        with MQAdmin(broker.namesrv) as admin:
            admin.create_topic(TOPIC, 8, 8)
        samples: list[float] = []
        done = threading.Event()

        def watch() -> None:
            url = f"http://127.0.0.1:{broker.http_port}/metrics"
            while not done.is_set():
                with urllib.request.urlopen(url, timeout=10) as response:
                    found = _BEHIND.search(response.read())
                assert found is not None, "rocketstore_dispatch_behind_bytes missing from /metrics"
                samples.append(float(found.group(1)))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        ctx = multiprocessing.get_context("spawn")
        senders = [ctx.Process(target=_send, args=(broker.namesrv,)) for _ in range(SENDERS)]
        for p in senders:
            p.start()
        for p in senders:
            p.join(timeout=300)
            assert p.exitcode == 0, "a sender failed"
        last_ack = time.monotonic()
        total = SENDERS * BATCHES * len(BATCH)
        while _visible(broker.namesrv) < total:
            assert time.monotonic() - last_ack < 60, "acknowledged messages never became visible"
            time.sleep(0.01)
        visible_after = time.monotonic() - last_ack
        done.set()
        watcher.join(timeout=10)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        broker.stop()
    assert len(samples) > 20, "the load ended before the lag could be watched"
    # each sender may store one batch (64 x ~1.2 KB) between the check and its put
    bound = LIMIT + SENDERS * 64 * 1300
    assert max(samples) <= 2 * bound, f"dispatch fell {max(samples):.0f} bytes behind (bound {bound})"
    assert visible_after < 2.0, f"the last acknowledged messages became visible only after {visible_after:.2f} s"


def test_a_send_held_back_waits_without_polling_and_goes_on_when_dispatch_catches_up(
    broker_factory: Callable[..., BrokerHandle],
) -> None:
    limit = 4096
    broker = broker_factory(max_dispatch_lag_bytes=limit, wait_time_mills_in_send_queue=30_000)
    client = broker.client()
    assert client.send_message("HeldTopic", b"creates the topic").code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    reput = broker.store.reput_service
    release = threading.Event()
    reput.dispatchers.append(lambda request: release.wait(30))  # dispatch stops at the next record
    while reput.behind_bytes <= limit:
        assert client.send_message("HeldTopic", bytes(1024)).code == ResponseCode.SUCCESS

    wakeups = [0]
    selector = broker.loop._selector  # type: ignore[attr-defined]
    select = selector.select

    def counting_select(timeout: float | None = None) -> Any:
        wakeups[0] += 1
        return select(timeout)

    broker.call_soon(lambda: setattr(selector, "select", counting_select))
    answer: list[RemotingCommand] = []
    held = threading.Thread(target=lambda: answer.append(client.send_message("HeldTopic", b"held back")))
    held.start()
    held.join(0.5)
    assert held.is_alive(), "the send did not wait for dispatch"
    woken_while_waiting = wakeups[0]
    release.set()
    released = time.monotonic()
    held.join(10)
    waited_after_release = time.monotonic() - released
    broker.call_soon(lambda: setattr(selector, "select", select))
    assert answer and answer[0].code == ResponseCode.SUCCESS
    # a 1 ms poll wakes the loop hundreds of times in half a second; the broker's own timers a few
    assert woken_while_waiting < 25, f"the loop woke {woken_while_waiting} times while the send waited"
    assert waited_after_release < 2.0, (
        f"the send went on {waited_after_release:.2f} s after dispatch caught up (wake-up lost?)")
