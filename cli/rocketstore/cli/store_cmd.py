"""``rocketstore store``: offline, read-only inspection of a store directory.

    rocketstore store stats  [--store-dir DIR] [-c broker.conf] [--json]
    rocketstore store dump   [--store-dir DIR] [-c broker.conf] [--json] [--topic T] [--queue-id N]
                             [--start-offset X] [--end-offset Y] [--key K] [--limit N]
    rocketstore store verify [--store-dir DIR] [-c broker.conf] [--json]

The store directory is ``--store-dir``, else ``storePathRootDir`` from the broker.conf given
with ``-c``, else RocketMQ's default ``~/store``. Segment and index sizes come from the
broker.conf (``mappedFileSizeCommitLog``, ``mappedFileSizeConsumeQueue``, ``maxHashSlotNum``,
``maxIndexNum``); without one, RocketMQ's defaults apply.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from rocketstore.common.message import StoredMessage
from rocketstore.store.config import ConfigError, StoreConfig, load_broker_conf
from rocketstore.store.offline import VerifyProgress, dump_messages, store_stats, verify_store
from rocketstore.store.store_view import NotAStoreError


class CommandError(Exception):
    """Something that keeps the command from running; reported in one line, exit code 2."""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``store`` and its actions to the top-level parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store-dir", metavar="DIR",
                        help="store root directory (overrides storePathRootDir, and storePathCommitLog "
                             "becomes DIR/commitlog); default: storePathRootDir from -c, else ~/store")
    common.add_argument("-c", "--config", metavar="BROKER_CONF",
                        help="RocketMQ broker.conf to read the store layout from (segment and index sizes, "
                             "storePathRootDir)")
    common.add_argument("--json", action="store_true", help="machine-readable output")

    store = groups.add_parser(
        "store", help="inspect a store directory (offline, read-only)",
        description="Inspect a store directory without changing it: no lock is taken, no recovery runs.",
    )
    actions = store.add_subparsers(dest="action", metavar="ACTION", required=True)

    stats = actions.add_parser("stats", parents=[common], help="segments, offsets, queues, index files, disk usage",
                               description="Summarise a store directory.")
    stats.set_defaults(handler=_handler(_stats))

    dump = actions.add_parser("dump", parents=[common], help="print messages, filtered",
                              description="Print the messages of the CommitLog in physical order. With --json, "
                                          "one JSON object per line, body in base64.")
    dump.add_argument("--topic", help="only this topic")
    dump.add_argument("--queue-id", type=int, metavar="N", help="only this queue id")
    dump.add_argument("--start-offset", type=int, metavar="OFFSET", help="physical offset to start at (inclusive)")
    dump.add_argument("--end-offset", type=int, metavar="OFFSET", help="physical offset to stop at (exclusive)")
    dump.add_argument("--key", help="only messages with this KEYS value or UNIQ_KEY (client message id)")
    dump.add_argument("--limit", type=int, metavar="N", help="stop after N messages")
    dump.add_argument("--preview", type=int, default=200, metavar="CHARS",
                      help="body preview length in human output (default 200, 0 = none)")
    dump.set_defaults(handler=_handler(_dump))

    verify = actions.add_parser("verify", parents=[common], help="check CRCs, consume queues and index files",
                                description="Check every CommitLog record (CRC), ConsumeQueue entry and IndexFile "
                                            "entry. Exit code 0 when clean, 1 when problems were found.")
    verify.set_defaults(handler=_handler(_verify))


def _handler(action: Callable[[argparse.Namespace, StoreConfig], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            config = load_config(args)
            if not config.root_dir().exists():
                # Every action reads an existing store: a path that is not there is a typo or the
                # wrong machine, never an empty store, so it is an error (exit 2) naming the path.
                where = "" if args.store_dir or args.config else (
                    " (RocketMQ's default; give --store-dir DIR or -c broker.conf)")
                raise CommandError(f"store directory {config.root_dir()} does not exist{where}")
            return action(args, config)
        except (CommandError, NotAStoreError, ConfigError) as exc:
            _error(args, str(exc))
        except BrokenPipeError:
            raise  # the reader of our output went away: the entry point ends quietly
        except OSError as exc:
            _error(args, f"{exc.filename or 'I/O'}: {exc.strerror or exc}")
        return 2

    return run


def _error(args: argparse.Namespace, message: str) -> None:
    print(f"rocketstore store {args.action}: error: {message}", file=sys.stderr)


def load_config(args: argparse.Namespace) -> StoreConfig:
    """The StoreConfig the options describe (see the module docstring for precedence)."""
    if args.config:
        if not os.path.isfile(args.config):
            raise CommandError(f"config file {args.config} does not exist")
        config, _broker_keys = load_broker_conf(args.config)
    else:
        config = StoreConfig()
    if args.store_dir:
        config.store_path_root_dir = os.path.abspath(os.path.expanduser(args.store_dir))
        config.store_path_commit_log = None
    return config


# -- formatting helpers -----------------------------------------------------------------------
def format_ms(ms: int) -> str:
    """Local time with milliseconds; '-' for 0 (never set)."""
    if ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms // 1000)) + f".{ms % 1000:03d}"


def format_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def message_to_json(msg: StoredMessage) -> dict[str, Any]:
    """Every MessageExt field of a record, JSON-ready (body in base64)."""
    return {
        "topic": msg.topic,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.physical_offset,
        "storeSize": msg.total_size,
        "bodyCRC": msg.body_crc,
        "flag": msg.flag,
        "sysFlag": msg.sys_flag,
        "bornTimestamp": msg.born_timestamp,
        "bornHost": str(msg.born_host),
        "storeTimestamp": msg.store_timestamp,
        "storeHost": str(msg.store_host),
        "reconsumeTimes": msg.reconsume_times,
        "preparedTransactionOffset": msg.prepared_transaction_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "uniqKey": msg.uniq_key,
        "msgId": msg.msg_id,
        "properties": dict(msg.properties),
        "body": base64.b64encode(msg.body).decode("ascii"),
    }


def _preview(body: bytes, chars: int) -> str:
    """The body as UTF-8 text (undecodable bytes as U+FFFD), control characters escaped, cut at ``chars``."""
    text = body.decode("utf-8", errors="replace")
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:chars])
    return shown + (f"... ({len(text) - chars} more chars)" if len(text) > chars else "")


# -- actions ----------------------------------------------------------------------------------
def _stats(args: argparse.Namespace, config: StoreConfig) -> int:
    stats = store_stats(config)
    if args.json:
        json.dump(stats, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_stats(stats, sys.stdout)
    return 0


def print_stats(stats: dict[str, Any], out: TextIO) -> None:
    w = out.write
    shutdown = "abnormal (abort file present, or a store is running)" if stats["abort_present"] else "normal"
    w(f"Store {stats['store_dir']}  last shutdown: {shutdown}\n")

    cl = stats["commit_log"]
    segments = cl["segments"]
    used = cl["max_offset"] - max(cl["min_offset"], 0)
    seg_size = cl["segment_size_on_disk"]
    w(f"CommitLog: {len(segments)} segments of {format_bytes(seg_size)}, "
      f"offsets {cl['min_offset']} .. {cl['max_offset']} ({format_bytes(max(used, 0))} of records)\n")
    if seg_size != cl["segment_size"]:
        w(f"  note: segments are {seg_size} bytes on disk but mappedFileSizeCommitLog is {cl['segment_size']}: "
          "pass the store's broker.conf with -c\n")
    shown = segments if len(segments) <= 8 else [*segments[:3], None, *segments[-3:]]
    for seg in shown:
        if seg is None:
            w(f"  ... {len(segments) - 6} more\n")
            continue
        size_note = "" if seg["size"] == seg_size else "  (WRONG SIZE)"
        empty_note = "" if seg["has_data"] else "  (empty)"
        w(f"  {seg['name']}  {format_bytes(seg['size'])}{size_note}{empty_note}\n")

    queues = stats["queues"]
    total = sum(q["message_count"] for q in queues)
    w(f"Topics: {len(stats['topics'])} topics, {len(queues)} queues, {total} messages\n")
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for q in queues:
        by_topic.setdefault(q["topic"], []).append(q)
    width = max((len(t) for t in by_topic), default=0)
    for topic, qs in by_topic.items():
        count = sum(q["message_count"] for q in qs)
        if len(qs) <= 8:
            ranges = ", ".join(f"q{q['queue_id']} {q['min_offset']}..{q['max_offset']}" for q in qs)
        else:
            ranges = f"queues {qs[0]['queue_id']}..{qs[-1]['queue_id']}"
        w(f"  {topic:<{width}}  {count} messages  ({ranges})\n")

    index_files = stats["index_files"]
    entries = sum(f.get("entries", 0) for f in index_files)
    w(f"Index: {len(index_files)} files, {entries} entries\n")
    for f in index_files:
        if "error" in f:
            w(f"  {f['name']}  {f['error']}\n")
            continue
        w(f"  {f['name']}  {f['entries']} entries  {format_ms(f['begin_timestamp'])} .. "
          f"{format_ms(f['end_timestamp'])}  offsets {f['begin_phy_offset']} .. {f['end_phy_offset']}\n")

    cp = stats["checkpoint"]
    if cp is None:
        w("Checkpoint: none\n")
    elif "error" in cp:
        w(f"Checkpoint: {cp['error']}\n")
    else:
        w(f"Checkpoint: physic {format_ms(cp['physic_msg_timestamp'])}, logics "
          f"{format_ms(cp['logics_msg_timestamp'])}, index {format_ms(cp['index_msg_timestamp'])}\n")

    parts = [f"{name} {format_bytes(u['allocated_bytes'])}" for name, u in stats["disk_usage"].items()]
    w("Disk usage: " + ", ".join(parts) + "\n")


def _dump(args: argparse.Namespace, config: StoreConfig) -> int:
    messages = dump_messages(
        config, topic=args.topic, queue_id=args.queue_id, start_offset=args.start_offset,
        end_offset=args.end_offset, key=args.key,
    )
    out = sys.stdout
    shown = 0
    for msg in messages:
        if args.limit is not None and shown >= args.limit:
            break
        if args.json:
            out.write(json.dumps(message_to_json(msg), ensure_ascii=False) + "\n")
        else:
            print_message(msg, out, args.preview)
        shown += 1
    if not args.json:
        out.write(f"{shown} message{'' if shown == 1 else 's'}\n")
    return 0


def print_message(msg: StoredMessage, out: TextIO, preview: int) -> None:
    w = out.write
    w(f"{msg.topic}[{msg.queue_id}]@{msg.queue_offset}  offset {msg.physical_offset}  size {msg.total_size}  "
      f"stored {format_ms(msg.store_timestamp)}  msgId {msg.msg_id}\n")
    extras = {k: v for k, v in msg.properties.items() if k not in ("TAGS", "KEYS", "UNIQ_KEY")}
    w(f"  tags {msg.tags or '-'}  keys {msg.keys or '-'}  uniqKey {msg.uniq_key or '-'}  born {msg.born_host} "
      f"{format_ms(msg.born_timestamp)}  storeHost {msg.store_host}  flag {msg.flag}  sysFlag {msg.sys_flag}  "
      f"reconsume {msg.reconsume_times}  bodyCRC {msg.body_crc}")
    if msg.prepared_transaction_offset:
        w(f"  preparedTxOffset {msg.prepared_transaction_offset}")
    if extras:
        w(f"  properties {extras}")
    w("\n")
    if preview > 0:
        w(f"  body ({len(msg.body)} B): {_preview(msg.body, preview)}\n")


def _verify_progress(out: TextIO) -> Callable[[VerifyProgress], None]:
    """A progress callback writing one line per segment and index file checked to ``out``.

    A store of many GiB takes minutes to verify: without these lines it looks hung. Consume
    queues (a store may have thousands) get a line at most every couple of seconds, and their last.
    The CLI passes stderr, so ``--json`` output on stdout stays one document.
    """
    last_queue_line = -1.0
    names = {"commitlog": "segment", "consumequeue": "consume queue", "index": "index file"}

    def report(step: VerifyProgress) -> None:
        nonlocal last_queue_line
        if step.part == "consumequeue":
            if step.done < step.total and last_queue_line >= 0 and step.elapsed - last_queue_line < 2.0:
                return
            last_queue_line = step.elapsed
        out.write(f"verify: {names[step.part]} {step.item} checked ({step.done}/{step.total}), "
                  f"{step.elapsed:.1f} s\n")
        out.flush()

    return report


def _verify(args: argparse.Namespace, config: StoreConfig) -> int:
    report = verify_store(config, _verify_progress(sys.stderr))
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if report.ok else 1
    out = sys.stdout
    root = config.root_dir()
    summary = (f"{report.records} records, {report.blank_records} blank, {report.consume_queue_entries} consume "
               f"queue entries, {report.index_entries} index entries")
    if report.expired_references:
        summary += f", {report.expired_references} pointing at deleted data"
    if report.ok:
        out.write(f"{root}: OK ({summary})\n")
    else:
        count = report.problem_count
        out.write(f"{root}: CORRUPT, {count} problem{'s' if count != 1 else ''} ({summary})\n")
        for problem in report.problems:
            out.write(f"  {problem}\n")
    for note in report.notes:
        out.write(f"  note: {note}\n")
    return 0 if report.ok else 1
