"""What the 5.x client tests (Python, Go, Node.js) expect of a round trip: each driver sends bodies
``PREFIX-i`` with the keys ``PREFIX-key-i`` and ``PREFIX-alt-i`` and the user properties ``index=i``
plus those asked for, and reports what it received as JSON lines of the same shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def assert_received_as_sent(sent: Sequence[Mapping[str, Any]], received: Sequence[Mapping[str, Any]], *,
                            prefix: str, tag: str, properties: Mapping[str, str]) -> None:
    """``received`` is exactly ``sent`` (by message id), each a first delivery carrying its body,
    tag, both keys and the user properties, and none of RocketMQ's own property keys."""
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
    for r in received:
        index = r["properties"]["index"]
        assert r["body"] == f"{prefix}-{index}"
        assert r["tag"] == tag
        assert r["keys"] == sorted([f"{prefix}-key-{index}", f"{prefix}-alt-{index}"])
        assert r["properties"] == {"index": index, **properties}
        assert r["attempt"] == 1
