"""Write-side flow control against a real broker process: a client that pipelines pulls and never
reads its socket must not make the broker buffer their responses without bound.

The broker runs as a process of its own (tests/support/broker_process.py) so that its resident size,
read from /proc/<pid>/status, is the broker's alone.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_process import Broker
from inprocess_broker import RawClient, decode_records

from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

pytestmark = pytest.mark.integration  # a broker process

TOPIC = "FlowControl"
BODY = b"x" * 4096
PULLS = 20_000
SECONDS = 10.0
MAX_GROWTH = 200 * 1024 * 1024


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _sockets(pid: int) -> int:
    """How many sockets the process holds open (a closed connection leaves the kernel's tables
    when reset, so only the broker's descriptors show whether the broker let go of it)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            count += fd.readlink().name.startswith("socket:")
    return count


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _pull_frames(count: int) -> bytes:
    """``count`` PULL_MESSAGE requests for 32 messages from offset 0, no suspension, back to back."""
    fields = {
        "consumerGroup": "CG", "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0", "expressionType": "TAG",
    }
    return b"".join(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=n, ext_fields=fields).encode()
                    for n in range(1, count + 1))


# Both remoting servers, whatever ROCKETSTORE_TEST_REMOTING_FRONT says: the bound is each one's own
# (the front's read and write pauses in native/src/remoting_front.rs; asyncio's, which a TLS port runs).
@pytest.mark.parametrize("native_front", [True, False], ids=["native-front", "asyncio"])
def test_client_that_never_reads_cannot_grow_the_broker(tmp_path: Path, native_front: bool) -> None:
    broker = Broker(tmp_path, extra_conf=f"remotingNativeFront={str(native_front).lower()}\n")
    broker.start()
    pid = broker.proc.pid
    good = RawClient("127.0.0.1", broker.listen_port)
    try:
        for _ in range(32):
            assert good.send_message(TOPIC, BODY).code == ResponseCode.SUCCESS
        # a send is answered once stored; pulls see it once dispatch has run, a moment later
        _wait_for(lambda: good.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}).ext_fields.get(
            "offset") == "32", "the sends were not dispatched")
        warm = good.pull(TOPIC, 0, 0, sys_flag=0)  # so that the pull path's own first-use cost is in the baseline
        assert warm.code == ResponseCode.SUCCESS and len(decode_records(warm.body)) == 32
        baseline = _rss(pid)
        sockets = _sockets(pid)

        bad = socket.create_connection(("127.0.0.1", broker.listen_port))
        _wait_for(lambda: _sockets(pid) == sockets + 1, "the broker did not accept the connection")
        requests = memoryview(_pull_frames(PULLS))
        bad.setblocking(False)  # it writes what the broker takes and never reads
        sent, peak = 0, baseline
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            if sent < len(requests):
                with contextlib.suppress(BlockingIOError):
                    sent += bad.send(requests[sent:])
            peak = max(peak, _rss(pid))
            time.sleep(0.01)
        # The well-behaved client is still served while the other one is held.
        served = good.pull(TOPIC, 0, 0, sys_flag=0)
        assert served.code == ResponseCode.SUCCESS and len(decode_records(served.body)) == 32
        assert good.send_message(TOPIC, BODY).code == ResponseCode.SUCCESS
        peak = max(peak, _rss(pid))
        assert peak - baseline < MAX_GROWTH, f"broker RSS grew by {(peak - baseline) >> 20} MiB"

        assert _sockets(pid) == sockets + 1
        bad.close()  # unread data makes this a reset; the broker must notice although it stopped reading
        _wait_for(lambda: _sockets(pid) == sockets, "the broker kept the closed client's connection")
        assert good.pull(TOPIC, 0, 0, sys_flag=0).code == ResponseCode.SUCCESS
    finally:
        good.close()
        broker.stop()
