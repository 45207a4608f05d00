"""CPU time per acknowledged send of the broker's SEND_MESSAGE_V2 path, in process (a real store, no sockets).

    python3 bench/send_cpu.py                        # ~30 s
    ROCKETSTORE_NATIVE=0 python3 bench/send_cpu.py   # the pure-Python reference path
    python3 bench/send_cpu.py --messages 20000 --runs 7
    python3 bench/send_cpu.py --profile              # Python calls per send, and the most called
    python3 bench/send_cpu.py --reference            # the native extension, without the plain send path
    python3 bench/send_cpu.py --batch 32             # SEND_BATCH_MESSAGE of 32 x 1 KiB (figures per message)

A broker is started in this process on a temporary store (ASYNC_FLUSH, no HTTP or name-server
port). Each run sends ``--messages`` 1 KiB messages (a Java producer's properties: UNIQ_KEY, WAIT,
TAGS) through the registered SEND_MESSAGE_V2 handler, as the remoting server calls it inline for a
request read off a connection, and encodes every response into its frame (``reply.encode()``,
what the server hands the transport): the header's decoding, the checks, the put into the mapped
CommitLog and the response's making together. Printed: per send, the median and the range of
``--runs`` runs of the process CPU time (``time.process_time``: every thread, so the dispatch
service building the ConsumeQueue and index entries meanwhile counts too) and the sending
thread's alone (``time.thread_time``). The request is built once, outside the timing: the server's frame
decoder is measured by bench/remoting_micro.py.

``--batch N`` sends the messages as SEND_BATCH_MESSAGE requests of N messages each instead (a Java
producer's ``send(Collection<Message>)``: each message with its own UNIQ_KEY, WAIT and TAGS, the
batch's header with WAIT), through the SEND_BATCH_MESSAGE handler; the figures stay per message.

``--reference`` switches the processor's plain send path off (the native extension still encodes
records and frames): the send path as it was before the one native call, in the same conditions.
``--profile`` runs the sends once more under cProfile and prints the Python function calls per
send (what the one-call native send removes) and the functions called most.

Why CPU and not wall-clock time: on a machine shared with other work, a run's wall time says as
much about the neighbours as about the code; the CPU the process spent per send does not depend
on them nearly as much. What the transport adds (sockets, the event loop) is not in it:
bench/run_broker_bench.py measures sending end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from handler_micro import TOPIC, send_request

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.processor import send as send_module
from rocketstore.broker.server import Connection
from rocketstore.common.message import BatchItem, encode_batch
from rocketstore.common.native import IMPLEMENTATION
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader
from rocketstore.store.config import StoreConfig


def batch_request(size: int) -> RemotingCommand:
    """A Java producer's SEND_BATCH_MESSAGE of ``size`` 1 KiB messages."""
    header = SendMessageRequestHeader(
        producer_group="BenchProducer", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
        properties="WAIT\x01true\x02UNIQ_KEY\x017F000001B1E418B4AAC2665D6B8F0000\x02", batch=True)
    body = encode_batch([BatchItem(b"x" * 1024, 0, {"UNIQ_KEY": f"7F000001B1E418B4AAC2665D6B8F{i:04X}",
                                                   "WAIT": "true", "TAGS": "TagA"}) for i in range(size)])
    return RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=header.to_v2_ext_fields(), body=body)


async def run(root: Path, messages: int, runs: int, profile: bool, batch: int) -> dict[str, list[float]]:
    broker = BrokerController(
        BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                     http_listen_port=0, grpc_listen_port=0, max_dispatch_lag_bytes=0),
        StoreConfig(store_path_root_dir=str(root)))
    await broker.start()
    try:
        conn = Connection(broker.remoting)
        if batch:
            send = broker.remoting.handlers[RequestCode.SEND_BATCH_MESSAGE]
            request = batch_request(batch)
            requests = max(messages // batch, 1)
            messages = requests * batch
        else:
            send = broker.remoting.handlers[RequestCode.SEND_MESSAGE_V2]
            request = send_request()
            requests = messages

        def send_all() -> None:
            for _ in range(requests):
                reply = send(conn, request)
                assert isinstance(reply, RemotingCommand) and reply.code == ResponseCode.SUCCESS, reply
                reply.encode()

        send_all()  # warm: the topic's config, the first segment mapped
        process, thread = [], []
        for _ in range(runs):
            start, start_thread = time.process_time(), time.thread_time()
            send_all()
            process.append((time.process_time() - start) / messages * 1e6)
            thread.append((time.thread_time() - start_thread) / messages * 1e6)
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(send_all)
            stats = pstats.Stats(profiler)
            calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
            print(f"cProfile: {calls / messages:.1f} Python-visible calls per message; the most called:")
            stats.sort_stats("ncalls").print_stats(25)
        results = {"send 1 KiB, process CPU": process, "send 1 KiB, sending thread CPU": thread}
        for label, values in results.items():  # before the broker stops: its stop has been seen to hang
            print(f"{label:40s} {statistics.median(values):6.2f} us per message "
                  f"(median; runs {min(values):.2f} to {max(values):.2f})", flush=True)
        return results
    finally:
        await broker.stop(grace_s=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000, help="1 KiB messages sent per run")
    parser.add_argument("--runs", type=int, default=5, help="runs (the median is shown)")
    parser.add_argument("--profile", action="store_true", help="count the Python calls per send under cProfile")
    parser.add_argument("--reference", action="store_true", help="without the plain send path (the path before it)")
    parser.add_argument("--batch", type=int, default=0, help="messages per SEND_BATCH_MESSAGE (0: SEND_MESSAGE_V2)")
    args = parser.parse_args()
    if args.reference:
        send_module.NATIVE = None  # read per send by SendMessageProcessor.handle
    path = "reference send path" if args.reference or send_module.NATIVE is None else "plain send path"
    shape = f"batches of {args.batch}" if args.batch else "one per request"
    print(f"{IMPLEMENTATION} hot path, {path}, {args.messages} messages of 1 KiB ({shape}), {args.runs} runs",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="send-cpu-") as tmp:
        asyncio.run(run(Path(tmp), args.messages, args.runs, args.profile, args.batch))


if __name__ == "__main__":
    main()
