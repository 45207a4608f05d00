"""Child process of test_truncation.py's kill -9 tests (a script, not a test module).

Usage: ``python truncation_child.py STORE_DIR SEGMENT CQ_ENTRIES OFFSET``

Opens and starts the store (so ``abort`` marks the run), then truncates it to OFFSET. The test
either sets ROCKETSTORE_TEST_TRUNCATE_CRASH_POINT, so the process SIGKILLs itself at that point
inside the truncation (exit status 0 means it never got there), or kills it from outside: the
child prints ``truncating`` just before it starts and ``truncated <seconds>`` once done, so the
test can time its kill -9 from the first line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_support import small_config, start_store


def main(argv: list[str]) -> int:
    store_dir, segment, cq_entries, offset = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    store = start_store(small_config(store_dir, commit_log_size=segment, cq_entries=cq_entries))
    print("truncating", flush=True)
    began = time.monotonic()
    ok = store.truncate_files(offset)
    print(f"truncated {time.monotonic() - began:.6f}", flush=True)
    store.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
