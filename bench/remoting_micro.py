"""Micro-benchmark of the SEND_MESSAGE_V2 remoting path (no sockets, no store).

    python3 bench/remoting_micro.py            # ~10 s
    python3 bench/remoting_micro.py -n 50000   # more iterations per case

Each case runs in a loop timed with ``time.perf_counter`` and prints microseconds per call
(best of ``--repeat`` runs, so scheduler noise only ever makes a number worse):

* ``feed json`` / ``feed rocketmq``: :meth:`FrameDecoder.feed` of one realistic frame as RocketMQ's
  Java client 4.9.8 sends it (SEND_MESSAGE_V2 with the one-letter header names, a typical
  properties string and a 1 KiB body; about 1.3 KB on the wire), with a JSON or a binary header;
* ``send header v2``: :meth:`SendMessageRequestHeader.from_v2_ext_fields` of those extFields;
* ``response encode json`` / ``rocketmq``: :meth:`RemotingCommand.encode` of the broker's
  successful SEND response (msgId, queueId, queueOffset, MSG_REGION, TRACE_ON);
* ``send path total``: feed + header decode + response build + encode, what the event loop pays
  per request outside the handler and the store.

``--e2e N`` also sends N messages with our own :class:`rocketstore.client.Producer` (one thread,
synchronous sends) to a broker in a child process (``bench/_e2e_send.py``): msgs/s, and the
broker's CPU time per message, which is what the changes here lower (msgs/s is mostly latency).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import FrameDecoder, RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader

_EXT_FIELDS = {
    "a": "please_rename_unique_group_name",
    "b": "BenchTopic",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "0",
    "g": "1763757617123",
    "h": "0",
    "i": "UNIQ_KEY\x017F000001B1E418B4AAC2665D6B8F0000\x02WAIT\x01true\x02TAGS\x01TagA\x02KEYS\x01OrderID188\x02",
    "j": "0",
    "k": "false",
    "l": "16",
    "m": "false",
    "n": "broker-a",
}


def request_frame(serialize_type: SerializeType) -> bytes:
    """One SEND_MESSAGE_V2 frame as the Java client writes it."""
    return RemotingCommand(
        code=RequestCode.SEND_MESSAGE_V2, opaque=4711, flag=0, ext_fields=dict(_EXT_FIELDS),
        body=bytes(range(256)) * 4, language=LanguageCode.JAVA, version=409, serialize_type=serialize_type,
    ).encode()


def response(request: RemotingCommand) -> RemotingCommand:
    fields = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    fields.update(SendMessageResponseHeader(
        msg_id="7F00000100002A9F00000000000F4240", queue_id=3, queue_offset=123456).to_ext_fields())
    return request.response(ResponseCode.SUCCESS, None, fields)


def timeit(fn: Callable[[], object], n: int, repeat: int) -> float:
    """Best microseconds per call over ``repeat`` runs of ``n`` calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def micro(n: int, repeat: int) -> dict[str, float]:
    results: dict[str, float] = {}
    for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
        frame = request_frame(st)
        decoder = FrameDecoder()
        (req,) = decoder.feed(frame)
        assert req.ext_fields == _EXT_FIELDS and len(req.body) == 1024, req
        label = st.name.lower()
        def feed(frame: bytes = frame, decoder: FrameDecoder = decoder) -> list[RemotingCommand]:
            return decoder.feed(frame)

        results[f"feed {label} ({len(frame)} B)"] = timeit(feed, n, repeat)
        resp = response(req)
        results[f"response encode {label}"] = timeit(resp.encode, n, repeat)

        def total(frame: bytes = frame, decoder: FrameDecoder = decoder) -> bytes:
            (cmd,) = decoder.feed(frame)
            SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields)
            return response(cmd).encode()

        results[f"send path total {label}"] = timeit(total, n, repeat)
    fields = dict(_EXT_FIELDS)
    results["send header v2"] = timeit(lambda: SendMessageRequestHeader.from_v2_ext_fields(fields), n, repeat)
    return results


def e2e(count: int) -> tuple[float, float] | None:
    """(msgs/s, broker CPU us per message) of one synchronous producer against a broker process."""
    import subprocess

    code = Path(__file__).resolve().parent / "_e2e_send.py"
    if not code.exists():
        return None
    out = subprocess.run([sys.executable, str(code), str(count)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    rate, cpu_us = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu_us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (best is shown)")
    parser.add_argument("--e2e", type=int, default=0, metavar="MSGS", help="also send MSGS messages end to end")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {args.n} calls x {args.repeat} runs, best shown")
    print("| case | us/call |\n| --- | --- |")
    for name, us in micro(args.n, args.repeat).items():
        print(f"| {name} | {us:.2f} |")
    if args.e2e:
        result = e2e(args.e2e)
        if result is None:
            print("| e2e producer, 1 thread, sync sends | n/a |")
        else:
            print(f"| e2e producer, 1 thread, sync sends: msgs/s | {result[0]:,.0f} |")
            print(f"| e2e broker CPU per message (us) | {result[1]:.1f} |")


if __name__ == "__main__":
    main()
