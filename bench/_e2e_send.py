"""Helper of ``remoting_micro.py --e2e N``: one synchronous Producer against a broker process.

The broker (embedded name server on, ASYNC_FLUSH, a scratch store) runs in a child process so
that it has an interpreter and GIL of its own; this process sends ``N`` 1 KiB messages with
:class:`rocketstore.client.Producer` from one thread after a warm-up and prints, as its last
line, msgs/s and the broker process's CPU time (user + system, from /proc) per message in us.
The second number is the one the broker's code decides; the first is mostly round-trip latency.
``spawned_broker`` starts that broker process for remoting_front_cpu.py as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from ports import free_port

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.server import event_loop_factory
from rocketstore.client import Producer
from rocketstore.store.config import StoreConfig


def _cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc), or of its thread ``tid`` only."""
    stat = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_broker(root: str, port: int, namesrv_port: int, native_front: bool = False) -> None:
    """A broker whose event loop (the interpreter thread) is the process's main thread."""
    async def main() -> None:
        controller = BrokerController(
            BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=port,
                         namesrv_listen_port=namesrv_port, http_listen_port=0, broker_name="broker-a",
                         grpc_listen_port=0, remoting_native_front=native_front),
            StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024 * 1024),
        )
        await controller.start()
        await asyncio.Event().wait()

    with asyncio.Runner(loop_factory=event_loop_factory()[0]) as runner:  # the broker's own (uvloop)
        runner.run(main())


@contextlib.contextmanager
def spawned_broker(native_front: bool = False) -> Iterator[tuple[multiprocessing.process.BaseProcess, int]]:
    """A broker (``_run_broker``, a scratch store) in a spawned child process, once its remoting port
    accepts connections: the process and its embedded name server's port. Terminated on exit."""
    with tempfile.TemporaryDirectory() as root:
        port, namesrv_port = free_port(), free_port()
        broker = multiprocessing.get_context("spawn").Process(
            target=_run_broker, args=(root, port, namesrv_port, native_front), daemon=True)
        broker.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            yield broker, namesrv_port
        finally:
            broker.terminate()
            broker.join(10)


def main() -> None:
    count = int(sys.argv[1])
    with spawned_broker() as (broker, namesrv_port):
        body = b"x" * 1024
        with Producer(f"127.0.0.1:{namesrv_port}", "bench-producer") as producer:
            for _ in range(max(count // 10, 200)):  # warm-up: route, topic creation, caches
                producer.send("BenchTopic", body)
            assert broker.pid is not None
            cpu_before, start = _cpu_seconds(broker.pid), time.perf_counter()
            for _ in range(count):
                producer.send("BenchTopic", body)
            elapsed = time.perf_counter() - start
            cpu = _cpu_seconds(broker.pid) - cpu_before
    print(f"{count / elapsed:.1f} {cpu / count * 1e6:.1f}")


if __name__ == "__main__":
    main()
