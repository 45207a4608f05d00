"""WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) on the embedded name server:
what ``mqadmin wipeWritePerm`` / ``addWritePerm`` send, and what the operator's drain sends.

Real brokers over real sockets: broker-a serves the name server (with broker-p as a clusterPeers
entry that never registers), broker-b registers with it (namesrvAddr). The Apache side (mqadmin
itself and a Java producer) is tests/compat/mqadmin/test_mqadmin.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle, RawClient
from polling import wait_until
from ports import free_port

from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

Factory = Callable[..., BrokerHandle]
RW, R = 6, 4


def _perms(ns: RawClient, topic: str) -> dict[str, int]:
    resp = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return {q.broker_name: q.perm for q in TopicRouteData.decode(resp.body).queue_datas}


def _wipe(ns: RawClient, broker_name: str) -> int:
    resp = ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["wipeTopicCount"])


def _add(ns: RawClient, broker_name: str) -> int:
    resp = ns.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["addTopicCount"])


def _create_topic(broker: BrokerHandle, name: str) -> None:
    controller = broker.controller

    def put() -> None:
        controller.topic_config_manager.put(TopicConfig(name, read_queue_nums=4, write_queue_nums=4))
        controller.config_persist_service.tables_changed(controller.topic_config_manager)
    broker.call_soon(put)


def test_wiped_registered_broker_stays_read_only_across_its_registrations(broker_factory: Factory) -> None:
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1", broker_name="broker-a")
    assert a.controller.namesrv is not None
    b = broker_factory(namesrv_addr=f"127.0.0.1:{a.controller.namesrv.port}", broker_cluster_name="C1",
                       broker_name="broker-b")
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    _create_topic(a, "Orders")
    _create_topic(b, "Orders")
    b.run(b.controller.register_broker_service.register_broker_all(check_order_config=False, oneway=False,
                                                                    force=True))
    assert _perms(ns, "Orders") == {"broker-a": RW, "broker-b": RW}

    registered = {t for t, q in a.controller.namesrv.routes.topic_queue_table.items() if "broker-b" in q}
    count = _wipe(ns, "broker-b")
    # every topic this name server routes to broker-b: its registered ones and, since
    # broker-b is no clusterPeers entry of broker-a, nothing assumed
    assert count == len(registered) and "Orders" in registered
    assert _perms(ns, "Orders") == {"broker-a": RW, "broker-b": R}

    # RocketMQ's name server would take the changed topic table's permissions back; the wipe holds
    _create_topic(b, "Payments")
    b.run(b.controller.register_broker_service.register_broker_all(check_order_config=False, oneway=False,
                                                                    force=True))
    routes = a.controller.namesrv.routes
    wait_until("Payments registered", lambda: "Payments" in routes.topic_queue_table, timeout=5)
    assert _perms(ns, "Payments") == {"broker-b": R}
    assert _perms(ns, "Orders") == {"broker-a": RW, "broker-b": R}

    assert _add(ns, "broker-b") == count + 1
    assert _perms(ns, "Orders") == {"broker-a": RW, "broker-b": RW}
    assert _perms(ns, "Payments") == {"broker-b": RW}


def test_wipe_of_the_name_servers_own_broker_and_of_a_peer(broker_factory: Factory) -> None:
    """The embedded broker's own queue data and a clusterPeers peer's assumed ones are masked too;
    a brokerName routed nowhere here is a no-op (0) that is not remembered."""
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1", broker_name="broker-a",
                       cluster_peers="broker-p@127.0.0.1:1")
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    _create_topic(a, "Orders")
    wait_until("Orders created", lambda: a.controller.topic_config_manager.get("Orders"), timeout=5)
    topics = len(a.controller.topic_config_manager.table())

    assert _wipe(ns, "broker-a") == topics
    assert _perms(ns, "Orders") == {"broker-a": R, "broker-p": RW}
    assert _wipe(ns, "broker-p") == topics
    assert _perms(ns, "Orders") == {"broker-a": R, "broker-p": R}

    assert _wipe(ns, "broker-x") == 0
    assert "broker-x" not in a.controller.namesrv.routes.write_perm_wiped

    assert _add(ns, "broker-a") == topics
    assert _perms(ns, "Orders") == {"broker-a": RW, "broker-p": R}
    # a read-only topic stays read-only when the wipe ends (RocketMQ's would make it read-write)
    a.call_soon(lambda: a.controller.topic_config_manager.put(TopicConfig("Archive", perm=R)))
    wait_until("Archive created", lambda: a.controller.topic_config_manager.get("Archive"), timeout=5)
    assert _add(ns, "broker-p") == topics + 1
    assert _perms(ns, "Archive") == {"broker-a": R, "broker-p": R}
    assert _perms(ns, "Orders") == {"broker-a": RW, "broker-p": RW}
