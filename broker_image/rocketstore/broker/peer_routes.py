"""How an embedded name server lists the broker groups of its store: static ``clusterPeers``
entries, superseded by what the groups' brokers registered (``namesrvPeers``).

``clusterPeers`` names each group's master only, fixed by configuration: with it alone, a name
server keeps routing to a master that is gone, and never names the slaves of another group. So
every broker of a store also registers with every other pod's name server (as RocketMQ brokers
register with every name server), and the registrations, which a name server drops when their
connection closes or after two minutes of silence, give each group's live members:

* :func:`live_groups`: this broker's own group first (its addresses are the name server's own
  business), then each ``clusterPeers`` group, as registered (its live members: its slaves alone
  while its master is down, so 4.x consumers read from a slave) or, before any member of it has
  registered here (right after a start), the static entry ``{0: address}``;
* :func:`merge_topic_route`: one topic's queue data and brokers: each listed group with its queue
  data (a peer's as it registered its topic table, else assumed alike to this broker's topic
  config, as before), then the registered groups that are no ``clusterPeers`` entry.

Pure functions; namesrv.py and the gRPC route do the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rocketstore.broker.broker_config import ClusterPeer
from rocketstore.common.mix_all import MASTER_ID
from rocketstore.remoting.body import BrokerData, QueueData


def live_groups(own: BrokerData, peers: Sequence[ClusterPeer],
                registered: Mapping[str, BrokerData]) -> list[BrokerData]:
    """``own``, then every ``peers`` group other than it, in ``clusterPeers`` order: its registered
    members when ``registered`` (brokerName -> BrokerData of the live registrations) has it, else
    its master as configured."""
    groups = [own]
    for peer in peers:
        if peer.broker_name == own.broker_name or any(g.broker_name == peer.broker_name for g in groups):
            continue
        live = registered.get(peer.broker_name)
        groups.append(BrokerData(cluster=own.cluster, broker_name=peer.broker_name,
                                 broker_addrs={MASTER_ID: peer.addr}) if live is None else
                      BrokerData(cluster=live.cluster, broker_name=peer.broker_name,
                                 broker_addrs=dict(sorted(live.broker_addrs.items()))))
    return groups


def merge_topic_route(groups: Sequence[BrokerData], assumed: Mapping[str, QueueData],
                      registered_queues: Sequence[QueueData], registered_brokers: Sequence[BrokerData],
                      ) -> tuple[list[QueueData], list[BrokerData]]:
    """A topic's (queue datas, broker datas).

    ``groups`` is :func:`live_groups`' answer: ``groups[0]`` is this broker's group, whose queue
    data is the ``assumed`` one (from this broker's own topic config and permission), else (a
    slave that has not copied the topic yet) what its master registered here; a peer group's is
    the one it registered (``registered_queues``: its master's own topic table), else the
    ``assumed`` one. ``assumed`` is empty for a topic this broker does not hold. A group with no
    queue data for the topic is left out. Registered groups that are not in ``groups`` follow (``registered_brokers``:
    those holding ``registered_queues``).
    """
    by_name = {q.broker_name: q for q in registered_queues}
    queues: list[QueueData] = []
    brokers: list[BrokerData] = []
    for i, group in enumerate(groups):
        mine, theirs = assumed.get(group.broker_name), by_name.get(group.broker_name)
        queue = (mine or theirs) if i == 0 else (theirs or mine)
        if queue is not None:
            queues.append(queue)
            brokers.append(group)
    listed = {g.broker_name for g in groups}
    queues += [q for q in registered_queues if q.broker_name not in listed]
    brokers += [b for b in registered_brokers if b.broker_name not in listed]
    return queues, brokers
