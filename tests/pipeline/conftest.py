"""Fixtures of the pipeline tests (defined in pipeline_fixtures.py, which the tests also import helpers from)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pipeline_fixtures import pristine, spark, written

__all__ = ["pristine", "spark", "written"]
