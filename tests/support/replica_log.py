"""What a broker replica holds, as replication and failover tests compare it: its CommitLog's bytes
and the messages a consumer pulls from it.

Shared by the Lease tests (tests/operator/lease_group.py) and the test against Apache's controller
(tests/compat/apache_broker): both check that a rejoined replica ends byte-equal with its master
and that every acknowledged message can be pulled from the new one.
"""

from __future__ import annotations

from broker_process import Broker
from inprocess_broker import RawClient, decode_records

from rocketstore.remoting.codes import ResponseCode

__all__ = ["commit_log", "pulled", "pulled_from", "raw_client"]


def raw_client(broker: Broker) -> RawClient:
    """A raw remoting connection to ``broker``'s listen address."""
    host, _, port = broker.addr.rpartition(":")
    return RawClient(host, int(port))


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
