"""Sends/s and broker CPU per send over the remoting port, asyncio against the native remoting front.

    python3 bench/remoting_front_cpu.py                    # 5 rounds, 4 producers x 3000 sends
    python3 bench/remoting_front_cpu.py --rounds 7 --producers 8 --messages 2000

Each round starts a broker in a child process (ASYNC_FLUSH, a scratch store, its event loop on the
process's main thread: see _e2e_send.py) once with ``remotingNativeFront=false`` and once with
``true``, in alternating order (the machine may be busy: neighbours slow both alike), and sends
1 KiB messages from ``--producers`` client processes, each one synchronous
:class:`rocketstore.client.Producer`, after a warm-up. Printed per setting: the median and range
over the rounds of sends/s, of the broker's CPU per send (user + system, every thread) and of the
interpreter thread's alone (the event loop and every handler: what the interpreter lock
serialises), from /proc.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from _e2e_send import _cpu_seconds, spawned_broker

from rocketstore.client import Producer

BODY = b"x" * 1024


def _produce(namesrv: str, count: int, start: multiprocessing.synchronize.Event) -> None:
    with Producer(namesrv, "bench-producer") as producer:
        for _ in range(200):  # warm-up: route, topic creation, caches
            producer.send("BenchTopic", BODY)
        start.wait()
        for _ in range(count):
            producer.send("BenchTopic", BODY)


def _round(native_front: bool, producers: int, count: int) -> tuple[float, float, float]:
    """(sends/s, broker CPU us per send, interpreter thread CPU us per send) of one broker."""
    ctx = multiprocessing.get_context("spawn")
    with spawned_broker(native_front) as (broker, namesrv_port):
        start = ctx.Event()
        clients = [ctx.Process(target=_produce, args=(f"127.0.0.1:{namesrv_port}", count, start))
                   for _ in range(producers)]
        for client in clients:
            client.start()
        time.sleep(3)  # the warm-ups
        assert broker.pid is not None
        cpu, loop_cpu = _cpu_seconds(broker.pid), _cpu_seconds(broker.pid, broker.pid)
        began = time.perf_counter()
        start.set()
        for client in clients:
            client.join()
            if client.exitcode != 0:
                raise RuntimeError(f"a producer failed: exit code {client.exitcode}")
        elapsed = time.perf_counter() - began
        sends = producers * count
        cpu = _cpu_seconds(broker.pid) - cpu
        loop_cpu = _cpu_seconds(broker.pid, broker.pid) - loop_cpu
    return sends / elapsed, cpu / sends * 1e6, loop_cpu / sends * 1e6


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):9.1f} ({min(values):.1f}..{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--messages", type=int, default=3000, help="sends per producer per round")
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for i in range(args.rounds):
        for native_front in (False, True) if i % 2 == 0 else (True, False):
            result = _round(native_front, args.producers, args.messages)
            results[native_front].append(result)
            print(f"round {i + 1} {'native' if native_front else 'asyncio':7}: {result[0]:.0f} sends/s, "
                  f"{result[1]:.1f} us CPU per send, {result[2]:.1f} us on the interpreter thread", flush=True)
    print(f"\n{args.producers} producers x {args.messages} 1 KiB sends, {args.rounds} rounds: median (range)")
    print(f"{'front':8}{'sends/s':>26}{'CPU us/send':>26}{'loop thread us/send':>26}")
    for native_front, rows in results.items():
        print(f"{'native' if native_front else 'asyncio':8}" + "".join(
            f"{_summary([row[k] for row in rows]):>26}" for k in range(3)))


if __name__ == "__main__":
    main()
