"""What a broker replica holds, as replication and failover tests compare it: its CommitLog's bytes
and the messages a consumer pulls from it; and the sends those tests count as acknowledged.

Shared by the Lease tests (tests/operator/lease_group.py) and the tests against Apache's controller
(tests/compat/apache_broker): both check that a rejoined replica ends byte-equal with its master
and that every acknowledged message can be pulled from the new one.
"""

from __future__ import annotations

import itertools

from broker_process import Broker
from inprocess_broker import RawClient, decode_records
from polling import wait_until

from rocketstore.remoting.codes import ResponseCode

__all__ = ["acknowledged_sends", "commit_log", "first_acknowledged", "pulled", "pulled_from", "raw_client", "send",
           "send_to"]


def raw_client(broker: Broker) -> RawClient:
    """A raw remoting connection to ``broker``'s listen address."""
    host, _, port = broker.addr.rpartition(":")
    return RawClient(host, int(port))


def send(broker: Broker, topic: str, body: bytes) -> int:
    """A send's answer code from ``broker`` (-1: no answer)."""
    return send_to(broker.addr, topic, body)


def send_to(addr: str, topic: str, body: bytes) -> int:
    """``send`` to any broker at ``addr`` (``host:port``): Apache's as well as ours."""
    host, _, port = addr.rpartition(":")
    try:
        raw = RawClient(host, int(port))
    except OSError:
        return -1
    try:
        return int(raw.send_message(topic, body).code)
    except Exception:
        return -1
    finally:
        raw.close()


def acknowledged_sends(addr: str, topic: str, label: str, count: int = 10) -> list[bytes]:
    """Sends ``count`` bodies (``label-0`` ...) to the master at ``addr``, each of which it must
    acknowledge; the bodies, as a failover test then counts them acknowledged."""
    bodies = []
    for i in range(count):
        body = f"{label}-{i}".encode()
        assert send_to(addr, topic, body) == ResponseCode.SUCCESS
        bodies.append(body)
    return bodies


def first_acknowledged(addr: str, topic: str, label: str, timeout: float) -> bytes:
    """Sends to the slave at ``addr`` every 50 ms until it took over and acknowledges; the
    acknowledged body (one body per attempt, so a refused one is never counted)."""
    attempts = itertools.count(1)

    def acknowledged() -> bytes | None:
        body = f"{label}-first-{next(attempts)}".encode()
        return body if send_to(addr, topic, body) == ResponseCode.SUCCESS else None

    body: bytes = wait_until("the slave takes over and acknowledges", acknowledged, timeout, interval=0.05)
    return body


def pulled(broker: Broker, topic: str) -> list[bytes]:
    """Every message of queue 0 of ``topic`` a consumer pulls from ``broker``, from offset 0."""
    return pulled_from(broker.addr, topic)


def pulled_from(addr: str, topic: str) -> list[bytes]:
    """``pulled`` from any broker at ``addr`` (``host:port``): Apache's as well as ours."""
    host, _, port = addr.rpartition(":")
    raw = RawClient(host, int(port))
    bodies: list[bytes] = []
    try:
        while True:
            response = raw.pull(topic, 0, len(bodies))
            if response.code != ResponseCode.SUCCESS:
                return bodies
            bodies.extend(msg.body for msg in decode_records(response.body))
    finally:
        raw.close()


def commit_log(broker: Broker) -> bytes:
    """The whole CommitLog, its segments in order, without the unwritten end."""
    return b"".join(path.read_bytes() for path in sorted((broker.store / "commitlog").iterdir())).rstrip(b"\0")
