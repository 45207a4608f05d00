"""The Grafana dashboard shipped in charts/: valid JSON of the shape Grafana imports, and every
broker metric it queries is one a real broker publishes on /metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import published_metric_names
from inprocess_broker import BrokerHandle

from rocketstore.remoting.codes import ResponseCode

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "rocketstore-operator" / "dashboards" / "rocketstore.json"

#: metric names in PromQL: ours, the rocketmq-exporter families and the process collector's
METRIC = re.compile(r"\b(?:rocketstore|rocketmq|process)_[a-z0-9_]+\b")


def walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in walk_panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def test_dashboard_is_valid_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    panels = list(walk_panels(dashboard["panels"]))
    assert len({p["id"] for p in panels}) == len(panels), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "cluster", "broker", "topic", "group"} <= variables
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            # every variable a query uses is defined, and every query names a metric
            assert set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"} <= variables, target["expr"]
            assert METRIC.search(target["expr"]), target["expr"]


@pytest.mark.integration
def test_every_queried_metric_is_published(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory()
    client = broker.client()
    assert client.send_message("Dash", b"x").code == ResponseCode.SUCCESS
    client.wait_dispatched("Dash", 0, 1)
    assert client.pull("Dash", 0, 0, group="DashGroup").code == ResponseCode.SUCCESS
    offsets = broker.controller.consumer_offset_manager
    broker.call_soon(lambda: offsets.commit_offset("DashGroup", "Dash", 0, 0))

    published = published_metric_names(broker.metrics())
    # the operator's series (rocketstore_operator_*) are checked against a real operator in
    # tests/operator/test_operator_chart.py
    used = {name for expr in queries(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(expr)
            if not name.startswith("rocketstore_operator_")}
    assert used, "the dashboard queries no metric"
    assert sorted(used - published) == []
