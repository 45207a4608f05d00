"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: orderly consumers' queue locks."""

from __future__ import annotations

import json

import pytest
from inprocess_broker import BrokerHandle

from rocketstore.broker.processor.lock import MessageQueue, RebalanceLockManager
from rocketstore.remoting.codes import RequestCode, ResponseCode


def _mq(qid: int) -> dict[str, object]:
    return {"topic": "TopicLock", "brokerName": "broker-a", "queueId": qid}


def _lock(client, client_id: str, qids: list[int], group: str = "CG") -> list[int]:
    body = json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [_mq(q) for q in qids]}).encode()
    resp = client.call(RequestCode.LOCK_BATCH_MQ, body=body)
    assert resp.code == ResponseCode.SUCCESS
    return sorted(mq["queueId"] for mq in json.loads(resp.body)["lockOKMQSet"])


def _unlock(client, client_id: str, qids: list[int], group: str = "CG") -> None:
    body = json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [_mq(q) for q in qids]}).encode()
    assert client.call(RequestCode.UNLOCK_BATCH_MQ, body=body).code == ResponseCode.SUCCESS


@pytest.mark.integration
def test_lock_conflicts_between_two_clients(broker: BrokerHandle) -> None:
    a, b = broker.client(), broker.client()
    assert _lock(a, "client-A", [0, 1]) == [0, 1]
    assert _lock(b, "client-B", [1, 2]) == [2]  # queue 1 is A's
    assert _lock(a, "client-A", [0, 1, 2]) == [0, 1]  # renewal; queue 2 is B's
    assert _lock(b, "client-B", [0], group="OtherGroup") == [0]  # locks are per group
    _unlock(b, "client-B", [1])  # not the holder: ignored
    assert _lock(b, "client-B", [1]) == []
    _unlock(a, "client-A", [1])
    assert _lock(b, "client-B", [1]) == [1]


@pytest.mark.integration
def test_response_body_is_fastjson_shaped(broker: BrokerHandle) -> None:
    client = broker.client()
    body = json.dumps({"consumerGroup": "CG", "clientId": "c", "mqSet": [_mq(3)]}).encode()
    resp = client.call(RequestCode.LOCK_BATCH_MQ, body=body)
    assert resp.body == b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":3,"topic":"TopicLock"}]}'
    bad = client.call(RequestCode.LOCK_BATCH_MQ, body=b"not json")
    assert bad.code == ResponseCode.SYSTEM_ERROR


def test_expired_lock_goes_to_the_next_client() -> None:
    now = [1000.0]
    manager = RebalanceLockManager(max_live_time_ms=60_000, clock=lambda: now[0])
    mq = MessageQueue("T", "b", 0)
    assert manager.try_lock_batch("G", [mq], "A") == [mq]
    now[0] += 59.0
    assert manager.try_lock_batch("G", [mq], "B") == []
    assert manager.try_lock_batch("G", [mq], "A") == [mq]  # renews at t+59
    now[0] += 59.0
    assert manager.try_lock_batch("G", [mq], "B") == []  # 59 s after the renewal: still A's
    now[0] += 2.0
    assert manager.holder("G", mq) is None
    assert manager.try_lock_batch("G", [mq], "B") == [mq]  # expired: B takes it
    assert manager.holder("G", mq) == "B"
    manager.unlock_batch("G", [mq], "A")
    assert manager.holder("G", mq) == "B"
