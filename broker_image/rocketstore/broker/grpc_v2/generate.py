"""Regenerate the Python modules of messaging.proto: ``python -m rocketstore.broker.grpc_v2.generate``.

The generated ``messaging_pb2.py``, ``messaging_pb2.pyi`` and ``messaging_pb2_grpc.py`` are
committed, so the broker needs only grpcio and protobuf at run time; grpcio-tools (pinned in the
``test`` extra, because its version is written into the output) is needed only here.
tests/broker/test_grpc_protocol.py regenerates into a scratch directory and compares, so an edit of
the .proto without regenerating fails there.

The proto is compiled under its package path (``rocketstore/broker/grpc_v2/messaging.proto``
relative to ``broker_image``), so the service module imports the messages as
``rocketstore.broker.grpc_v2.messaging_pb2`` rather than as a top-level ``messaging_pb2``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

PACKAGE_DIR: Final = Path(__file__).resolve().parent
#: the folder holding the ``rocketstore`` namespace of this part (broker_image/)
SOURCE_ROOT: Final = PACKAGE_DIR.parents[2]
PROTO: Final = "rocketstore/broker/grpc_v2/messaging.proto"
#: the files protoc writes for PROTO, relative to the output root
OUTPUTS: Final = tuple(f"rocketstore/broker/grpc_v2/{name}"
                       for name in ("messaging_pb2.py", "messaging_pb2.pyi", "messaging_pb2_grpc.py"))


def generate(out_root: Path) -> list[Path]:
    """Compile PROTO into ``out_root`` (which gets the ``rocketstore/broker/grpc_v2/`` folders);
    returns the written files. Raises RuntimeError with protoc's exit status on failure."""
    from importlib.resources import files

    from grpc_tools import protoc

    include = str(files("grpc_tools") / "_proto")  # google/protobuf/*.proto
    (out_root / "rocketstore/broker/grpc_v2").mkdir(parents=True, exist_ok=True)
    status = protoc.main(["protoc", f"-I{SOURCE_ROOT}", f"-I{include}", f"--python_out={out_root}",
                          f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", PROTO])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status} on {PROTO}")
    return [out_root / name for name in OUTPUTS]


def main() -> int:
    """Regenerate in place (the committed modules)."""
    for path in generate(SOURCE_ROOT):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
