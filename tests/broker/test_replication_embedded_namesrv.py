"""The smallest replicated set-up: a master serving the embedded name server, and a slave that
registers there (no separate name server process).

The master never registers with its own name server, so that name server must itself answer its
slave's registration with the master's HA and remoting addresses, and list the slave beside the
master in routes: otherwise the slave never learns where to replicate from, SYNC_MASTER sends
answer SLAVE_NOT_AVAILABLE for ever, and clients never see the slave.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from polling import wait_until
from ports import free_port

from rocketstore.client import Producer, PullConsumer, RemotingClient, SendStatus
from rocketstore.client.consumer import PullStatus
from rocketstore.client.remoting_client import BrokerRoutes, MessageQueue, NameServerClient, RemotingError

pytestmark = pytest.mark.integration

TOPIC = "EmbeddedNamesrvReplicated"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    (tmp_path / "master").mkdir()
    (tmp_path / "slave").mkdir()
    # haListenPort is listenPort + 1 (BrokerStartup's rule): both must be free
    master = Broker(tmp_path / "master", "brokerName=solo\nbrokerIP2=127.0.0.1\nbrokerRole=SYNC_MASTER\n",
                    listen_port=free_port(also=(1,)))
    master.start()
    slave = Broker(tmp_path / "slave", f"brokerName=solo\nbrokerIP2=127.0.0.1\nbrokerRole=SLAVE\nbrokerId=1\n"
                   f"namesrvListenPort=0\nnamesrvAddr={master.namesrv}\nslaveReadEnable=true\n",
                   listen_port=free_port(also=(1,)))
    try:
        slave.start()
        yield master, slave
    finally:
        for broker in (slave, master):
            if broker.process is not None and broker.proc.poll() is None:
                broker.stop()


def test_a_slave_of_the_embedded_name_servers_broker_replicates_and_is_routed(pair: tuple[Broker, Broker]) -> None:
    master, slave = pair
    with Producer(master.namesrv, "embedded-namesrv-producers") as producer:
        # SEND_OK under SYNC_MASTER only once the slave, told its master by the name server, is in sync
        first = wait_until("a SEND_OK from the SYNC_MASTER", lambda: (
            r := producer.send(TOPIC, b"first", timeout=10)).status is SendStatus.SEND_OK and r, 60)
        sent = [first, *(producer.send(TOPIC, f"m{i}".encode(), timeout=10) for i in range(20))]
    assert all(r.status is SendStatus.SEND_OK for r in sent), [r.status for r in sent]
    with RemotingClient() as client:
        route = NameServerClient(master.namesrv, client).get_route(TOPIC)
    assert [(b.broker_name, b.broker_addrs) for b in route.broker_datas] == [("solo", {0: master.addr,
                                                                                        1: slave.addr})]
    # every acknowledged message is on the slave: pulled from the slave's own address
    got = []
    with RemotingClient() as client:
        on_slave = BrokerRoutes(slave.addr, client)
        wait_until("the topic synchronized to the slave", lambda: routed(on_slave), 30)
        with PullConsumer(None, "embedded-namesrv-readers", client=client, routes=on_slave) as consumer:
            for r in sent:
                result = consumer.pull(MessageQueue(TOPIC, "solo", r.queue_id), r.queue_offset, 1)
                assert result.status is PullStatus.FOUND, result.status
                got.append(result.messages[0].body)
    assert got == [b"first", *(f"m{i}".encode() for i in range(20))]


def routed(routes: BrokerRoutes) -> bool:
    try:
        return bool(routes.get_route(TOPIC).queue_datas)
    except RemotingError:
        return False


def test_a_slaves_own_name_server_names_the_master_only_while_it_streams(tmp_path: Path) -> None:
    """Behind one Service, clients may ask the slave's embedded name server as well as the master's:
    it names the master while the master's HA stream is connected (so producers find the master),
    and the slave alone once the master is gone (so consumers read on from the slave)."""
    (tmp_path / "master").mkdir()
    (tmp_path / "slave").mkdir()
    master = Broker(tmp_path / "master", "brokerName=solo\nbrokerIP2=127.0.0.1\nbrokerRole=ASYNC_MASTER\n",
                    listen_port=free_port(also=(1,)))
    master.start()
    slave = Broker(tmp_path / "slave", f"brokerName=solo\nbrokerIP2=127.0.0.1\nbrokerRole=SLAVE\nbrokerId=1\n"
                   f"namesrvAddr={master.namesrv}\nslaveReadEnable=true\n", listen_port=free_port(also=(1,)))
    try:
        slave.start()
        with Producer(master.namesrv, "slave-namesrv-producers") as producer:
            producer.send(TOPIC, b"one", timeout=10)

        def slave_route() -> dict[int, str] | None:
            with RemotingClient() as client:
                try:
                    route = NameServerClient(slave.namesrv, client).get_route(TOPIC)
                except RemotingError:
                    return None
            return route.broker_datas[0].broker_addrs if route.broker_datas else None

        wait_until("the slave's name server naming master and slave",
                   lambda: slave_route() == {0: master.addr, 1: slave.addr}, 60)
        master.stop()
        wait_until("the slave's name server naming the slave alone", lambda: slave_route() == {1: slave.addr}, 60)
    finally:
        for broker in (slave, master):
            if broker.process is not None and broker.proc.poll() is None:
                broker.stop()
