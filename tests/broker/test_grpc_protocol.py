"""The committed modules of rocketstore.broker.grpc_v2 are what messaging.proto generates.

The broker imports the generated modules, not the .proto: an edit of the .proto that is not
regenerated (``python -m rocketstore.broker.grpc_v2.generate``) would ship stale code.
That our field numbers and types equal the real client's is checked against the real
``rocketmq-python-client`` in tests/compat/python5/test_python_5x_client.py.
"""

from __future__ import annotations

from pathlib import Path

from tool_support import require_module


def test_generated_modules_are_current(tmp_path: Path) -> None:
    require_module("grpc_tools", "grpcio-tools (the test extra)", "it regenerates the gRPC v2 modules")
    from rocketstore.broker.grpc_v2 import generate

    stale = []
    for fresh in generate.generate(tmp_path):
        committed = generate.SOURCE_ROOT / fresh.relative_to(tmp_path)
        if not committed.exists() or committed.read_bytes() != fresh.read_bytes():
            stale.append(str(committed))
    assert not stale, f"regenerate with `python -m rocketstore.broker.grpc_v2.generate`: {stale}"


def test_service_names_what_clients_call() -> None:
    """The full method path is what a 5.x client dials; a typo in the package or service name
    would leave every call UNIMPLEMENTED."""
    from rocketstore.broker.grpc_v2 import messaging_pb2

    service = messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    streams = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert streams["ReceiveMessage"] == (False, True)
    assert streams["Telemetry"] == (True, True)
    assert streams["SendMessage"] == (False, False)
