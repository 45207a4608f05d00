"""Child process of test_truncation.py's kill -9 tests (a script, not a test module).

Usage: ``python truncation_child.py STORE_DIR SEGMENT CQ_ENTRIES OFFSET``

Opens and starts the store (so ``abort`` marks the run), then truncates it to OFFSET. The test
sets ROCKETSTORE_TEST_TRUNCATE_CRASH_POINT, so the process SIGKILLs itself at that point inside
the truncation; exit status 0 means it never got there.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_support import small_config, start_store


def main(argv: list[str]) -> int:
    store_dir, segment, cq_entries, offset = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    store = start_store(small_config(store_dir, commit_log_size=segment, cq_entries=cq_entries))
    ok = store.truncate_files(offset)
    store.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
