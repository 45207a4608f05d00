"""``ROCKETSTORE_TEST_REMOTING_FRONT``: which server the brokers the tests start put on their remoting
port. ``native``: the native remoting front (``remotingNativeFront=true``); ``asyncio``: the asyncio
server (``remotingNativeFront=false``, the broker's default, and what a TLS port or a broker without
the native extension runs):

    ROCKETSTORE_TEST_REMOTING_FRONT=native python3 -m pytest tests/broker/test_send.py -q

Both harnesses read it (inprocess_broker.start_broker and broker_process.Broker); a test that sets
``remotingNativeFront`` itself keeps its value. Any other value, or none, leaves the broker's default.
"""

from __future__ import annotations

import os
from typing import Final

ENV: Final = "ROCKETSTORE_TEST_REMOTING_FRONT"


def front_requested() -> bool | None:
    """``remotingNativeFront`` for the tests' brokers: True (native), False (asyncio) or None (the default)."""
    return {"native": True, "asyncio": False}.get(os.environ.get(ENV, ""))
