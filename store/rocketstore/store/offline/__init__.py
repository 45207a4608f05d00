"""Offline inspection of a store directory: verify, stats and dump, strictly read-only.

Meant for a store nothing runs on (a stopped broker, a copied directory, a crash site), and
harmless beside a running one: every file is read through
:class:`~rocketstore.store.store_view.StoreView` (``open(path, 'rb')``, ``mmap.ACCESS_READ``),
nothing is created, truncated or renamed, the ``lock`` file is never taken and no recovery
runs. At most a couple of files are mapped at a time, so inspecting a store of many GiB-sized
segments keeps memory small. The on-disk formats come from the engine's own codecs.

One module per job, one public function each, gathered here as the package's interface
(``rocketstore store`` and the tests call ``rocketstore.store.offline.verify_store``):

* :mod:`.verify`: :func:`verify_store` walks every CommitLog record with its CRC, every
  ConsumeQueue entry and every IndexFile entry and reports each inconsistency as a precise string.
* :mod:`.stats`: :func:`store_stats` summarises segments, offsets, queues, index files, disk
  usage and checkpoint times as a JSON-ready dict.
* :mod:`.dump`: :func:`dump_messages` yields the records matching filters.
"""

from rocketstore.store.offline.dump import dump_messages
from rocketstore.store.offline.stats import store_stats
from rocketstore.store.offline.verify import MAX_REPORTED_PROBLEMS, VerifyProgress, VerifyReport, verify_store

__all__ = ["MAX_REPORTED_PROBLEMS", "VerifyProgress", "VerifyReport", "dump_messages", "store_stats", "verify_store"]
