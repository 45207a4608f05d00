"""The ``rocketstore`` command.

    rocketstore store stats|dump|verify [--store-dir DIR] [-c broker.conf] [--json]
    rocketstore broker [-c broker.conf] [--store-dir DIR] [--listen-port N] [--namesrv-port N] [--http-port N]

Each command group lives in its own module exposing ``register(subparsers)``: it adds its
parser and sets ``handler`` (``argparse.Namespace -> exit code``) on every runnable leaf.
Plugging in a new group (broker, operator, pipeline, admin) is adding its ``register`` to
:data:`GROUPS`.

Exit codes: 0 success; 1 the command ran and found a problem (``store verify`` on a damaged
store); 2 usage errors and anything that kept the command from running (missing directory,
unreadable config).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Sequence

from rocketstore.cli import admin_cmd, broker_cmd, operator_cmd, pipeline_cmd, store_cmd

#: command groups, in the order ``--help`` lists them
GROUPS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    store_cmd.register,
    broker_cmd.register,
    admin_cmd.register,
    operator_cmd.register,
    pipeline_cmd.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocketstore",
        description="RocketStore: a RocketMQ-compatible message store and its tools.",
    )
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    for register in GROUPS:
        register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_usage(sys.stderr)
        return 2
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            # Topics, keys and bodies are arbitrary text: on a terminal that cannot show a
            # character, print an escape rather than die with UnicodeEncodeError.
            stream.reconfigure(errors="backslashreplace")
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (``rocketstore store dump | head``): stop quietly, and keep the
        # interpreter from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
