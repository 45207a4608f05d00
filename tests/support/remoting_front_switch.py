"""``ROCKETSTORE_TEST_REMOTING_FRONT=native``: the brokers the tests start serve their remoting port
with the native remoting front (``remotingNativeFront=true``) instead of asyncio.

    ROCKETSTORE_TEST_REMOTING_FRONT=native python3 -m pytest tests/broker/test_send.py -q

Both harnesses read it (inprocess_broker.start_broker and broker_process.Broker); a test that sets
``remotingNativeFront`` itself keeps its value. Any other value, or none, leaves the default.
"""

from __future__ import annotations

import os
from typing import Final

ENV: Final = "ROCKETSTORE_TEST_REMOTING_FRONT"


def native_front_requested() -> bool:
    """Whether the tests' brokers should run the native remoting front."""
    return os.environ.get(ENV, "") == "native"
