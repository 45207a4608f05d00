"""RocketStore's data pipeline on Spark (PySpark >= 4.2, the ``spark`` extra).

* :mod:`pipeline.source`: the ``rocketstore`` Python data source (offline batch reads of a
  store directory, Arrow batches out);
* :mod:`pipeline.jobs`: ``export``, ``reindex`` and ``retention`` jobs, run as
  ``rocketstore pipeline ...``, ``python -m rocketstore.pipeline.jobs ...`` or through spark-submit.

Importing this package does not import Spark; its modules do.
"""
