"""Spark's plug-in entry for the ``rocketstore`` data source.

PySpark 4 looks through the Python path for top-level packages named ``pyspark_*`` and registers
their ``DefaultSource`` by its ``name()``, so once the project is installed
``spark.read.format("rocketstore")`` works in any session, with no ``spark.dataSource.register``
call. This is the only top-level name the project installs besides the ``rocketstore`` namespace.

Spark imports every such package in one lookup and drops all Python data sources when one of
them fails to import. Without the ``spark`` extra (pyarrow, numpy) the real source cannot load,
so a stand-in of the same name takes its place: other plug-ins keep working, and reading or
writing ``rocketstore`` says which module is missing and how to install it.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

try:
    from rocketstore.pipeline.source import RocketStoreDataSource
except ImportError as missing:
    _MISSING = f"{missing.name or missing}"

    class _SparkExtraMissing(DataSource):
        """``rocketstore`` without its dependencies: any use explains what to install."""

        @classmethod
        def name(cls) -> str:
            return "rocketstore"

        def __init__(self, options: dict[str, str]) -> None:
            # Spark makes an instance for every read and write: refusing here covers them all.
            raise RuntimeError(f"the rocketstore data source needs {_MISSING!r}, which is not installed here: "
                               "pip install 'rocketstore[spark]' (or pip install -e '.[spark]' in a checkout)")

    DefaultSource: type[DataSource] = _SparkExtraMissing
else:
    DefaultSource = RocketStoreDataSource

__all__ = ["DefaultSource"]
