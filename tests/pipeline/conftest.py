"""Fixtures of the pipeline tests (defined in pipeline_fixtures.py, which the tests also import helpers from)."""

from __future__ import annotations

from tool_support import require_module

require_module("pyspark", "pyspark", "the pipeline tests need the spark extra (pip install -e '.[spark]')")

from pipeline_fixtures import pristine, project_wheel, spark, written  # noqa: E402 (needs pyspark)

__all__ = ["pristine", "project_wheel", "spark", "written"]
