"""ServiceThread: a store service's own thread, as RocketMQ's ServiceThread gives each service one.

The schedule and timer services loop until shut down, sleeping between passes; shutdown must
interrupt the sleep and wait for the pass under way, and a store started again (tests reopen
one) must get a fresh, non-signalled wake-up.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class ServiceThread(ABC):
    """Runs :meth:`run` on a daemon thread named ``name``; :meth:`wait` is its interruptible sleep."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopping = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def run(self) -> None:
        """The service's loop: runs until :attr:`stopping`."""

    def start(self) -> None:
        self.stopping = False
        self._wake.clear()
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()

    def stop_thread(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to end, interrupt its sleep, and wait for it."""
        self.stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``, less if the service is being stopped."""
        self._wake.wait(max(seconds, 0.0))
