"""CPU time per pulled message of the broker's PULL_MESSAGE path, in process (a real store, no sockets).

    python3 bench/pull_cpu.py                        # ~30 s
    ROCKETSTORE_NATIVE=0 python3 bench/pull_cpu.py   # the pure-Python reference path
    python3 bench/pull_cpu.py --messages 20000 --runs 7

A broker is started in this process on a temporary store (ASYNC_FLUSH, no HTTP or name-server
port) and filled with 1 KiB messages through its SEND_MESSAGE_V2 handler. Each run then pulls the
whole queue 32 messages at a time through the registered PULL_MESSAGE handler, as the remoting
server calls it inline, and encodes every response into its frame (``reply.encode()``, what the
server hands the transport): the handler's checks, the store read and the response's making
together. Printed per subscription (``*`` and a tag that every message carries), per pulled
message, the median and the range of ``--runs`` runs: the process CPU time
(``time.process_time``: user + system of every thread, so the store's own threads, the dispatch
and flush services polling meanwhile, count too) and the pulling thread's alone
(``time.thread_time``: the handler, the store read and the encoding). With the native extension,
two more rows time the serving from the read (``PullMessageProcessor.serve_pull_frames``, what
answers the lean drain of bench/run_broker_bench.py): the same pulls as encoded frames, one or four
per read, each answered from the read with its response frame made.

Why CPU and not wall-clock time: on a machine shared with other work, a run's wall time says as
much about the neighbours as about the code; the CPU the process spent per message does not
depend on them nearly as much. What the transport adds (sockets, the event loop) is not in it:
bench/run_broker_bench.py measures consumption end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from handler_micro import pull_request, send_request

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.processor.pull import PullMessageProcessor
from rocketstore.broker.server import Connection
from rocketstore.common.native import IMPLEMENTATION
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import MAX_FRAME_SIZE, RemotingCommand
from rocketstore.store.config import StoreConfig

BATCH = 32


async def run(root: Path, messages: int, runs: int) -> dict[str, list[float]]:
    broker = BrokerController(
        BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                     http_listen_port=0, grpc_listen_port=0, max_dispatch_lag_bytes=0),
        StoreConfig(store_path_root_dir=str(root)))
    await broker.start()
    try:
        conn = Connection(broker.remoting)
        send = broker.remoting.handlers[RequestCode.SEND_MESSAGE_V2]
        pull = broker.remoting.handlers[RequestCode.PULL_MESSAGE]
        request = send_request()
        for _ in range(messages):
            reply = send(conn, request)
            assert isinstance(reply, RemotingCommand) and reply.code == ResponseCode.SUCCESS, reply
        assert await asyncio.to_thread(broker.store.reput_service.wait_caught_up, 30.0)
        stored = broker.store.get_max_offset_in_queue("BenchTopic", 0)
        results: dict[str, list[float]] = {}
        for subscription in ("*", "TagA"):
            requests = []
            for offset in range(0, stored, BATCH):
                pulled = pull_request(offset, BATCH)
                pulled.ext_fields["subscription"] = subscription
                requests.append(pulled)
            process, thread = [], []
            for _ in range(runs):
                start, start_thread = time.process_time(), time.thread_time()
                for pulled in requests:
                    reply = pull(conn, pulled)
                    assert isinstance(reply, RemotingCommand) and reply.code == ResponseCode.SUCCESS, reply
                    reply.encode()
                process.append((time.process_time() - start) / stored * 1e6)  # every message, once
                thread.append((time.thread_time() - start_thread) / stored * 1e6)
            results[f"pull {BATCH}, subscription {subscription!r}, process CPU"] = process
            results[f"pull {BATCH}, subscription {subscription!r}, pulling thread CPU"] = thread
        if IMPLEMENTATION == "native":  # the serving from the read is native only
            processor = pull.__self__  # type: ignore[attr-defined]  # the handler is a bound method
            for per_read in (1, 4):
                results[f"served, {per_read} pull(s) per read, pulling thread CPU"] = served(
                    processor, conn, stored, per_read, runs)
        return results
    finally:
        await broker.stop(grace_s=1.0)


def served(processor: PullMessageProcessor, conn: Connection, stored: int, per_read: int, runs: int) -> list[float]:
    """CPU per message of the pulls served from the read (PullMessageProcessor.serve_pull_frames,
    what the lean drain of bench/run_broker_bench.py runs): reads of ``per_read`` whole pull
    frames, each served at once, their response frames made."""
    frames = [pull_request(offset, BATCH).encode() for offset in range(0, stored, BATCH)]
    chunks = [frames[i:i + per_read] for i in range(0, len(frames), per_read)]
    reads = [(b"".join(chunk), len(chunk)) for chunk in chunks]
    serve = processor.serve_pull_frames
    thread = []
    for _ in range(runs):
        start = time.thread_time()
        for data, pulls in reads:
            consumed, responses = serve(conn, data, MAX_FRAME_SIZE)
            assert consumed == len(data) and len(responses) == pulls, (consumed, len(data), len(responses))
        thread.append((time.thread_time() - start) / stored * 1e6)
    return thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000, help="1 KiB messages stored, all pulled per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per subscription (the median is shown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pull-cpu-") as tmp:
        results = asyncio.run(run(Path(tmp), args.messages, args.runs))
    print(f"{IMPLEMENTATION} hot path, {args.messages} messages of 1 KiB, {args.runs} runs")
    for label, values in results.items():
        print(f"{label:52s} {statistics.median(values):6.2f} us per pulled message "
              f"(median; runs {min(values):.2f} to {max(values):.2f})")


if __name__ == "__main__":
    main()
