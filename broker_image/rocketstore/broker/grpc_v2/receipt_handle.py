"""Receipt handles: what a received message carries so that its consumer can ack it or change
its invisible time.

A handle names the message (queue id, queue offset) and the delivery it belongs to, by that
delivery's visible-again time in ms: every receive and every ChangeInvisibleDuration sets a new
time, so a handle from an earlier delivery (its message was redelivered since) no longer matches
and is refused, as RocketMQ refuses a handle whose checkpoint has been revived. The text is
opaque to clients; ``rs1`` versions the format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

_PREFIX: Final = "rs1"


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    queue_id: int
    offset: int
    visible_at_ms: int

    def encode(self) -> str:
        return f"{_PREFIX}_{self.queue_id}_{self.offset}_{self.visible_at_ms}"


def decode(text: str) -> ReceiptHandle:
    """The handle ``text`` encodes; ValueError when it is not one of ours."""
    parts = text.split("_")
    if len(parts) != 4 or parts[0] != _PREFIX:
        raise ValueError(f"not a receipt handle of this broker: {text[:80]!r}")
    try:
        queue_id, offset, visible_at_ms = (int(part) for part in parts[1:])
    except ValueError:
        raise ValueError(f"not a receipt handle of this broker: {text[:80]!r}") from None
    if queue_id < 0 or offset < 0:
        raise ValueError(f"receipt handle with a negative queue or offset: {text[:80]!r}")
    return ReceiptHandle(queue_id, offset, visible_at_ms)
