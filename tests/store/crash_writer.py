"""Child process for the kill -9 crash cycles (a script, not a test module).

Usage: ``python crash_writer.py STORE_DIR START_SEQ [SEED]``

Opens a SYNC_FLUSH DefaultMessageStore with tiny segments on STORE_DIR and puts messages with
sequence numbers from START_SEQ on, each to a random topic/queue, with a KEYS value and a body
derived from the sequence number (see crash_cycle.body_for). After every put that returns
PUT_OK it prints ``<seq> <topic> <queueId> <queueOffset> <commitLogOffset>`` and flushes stdout,
so every complete line the parent reads is an acknowledged message. It runs until killed.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crash_cycle import QUEUES, TOPICS, body_for, key_for, make_config

from rocketstore.common.message import Message
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus


def main(argv: list[str]) -> int:
    store_dir, seq = argv[1], int(argv[2])
    rng = random.Random(int(argv[3]) if len(argv) > 3 else seq)
    store = DefaultMessageStore(make_config(store_dir))
    store.load()
    store.start()
    out = sys.stdout
    while True:
        topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
        msg = Message(topic=topic, body=body_for(seq), queue_id=queue_id,
                      properties={"KEYS": key_for(seq), "TAGS": f"t{seq % 5}"})
        result = store.put_message(msg)
        if result.status is PutMessageStatus.PUT_OK and result.append is not None:
            out.write(f"{seq} {topic} {queue_id} {result.append.logics_offset} {result.append.wrote_offset}\n")
            out.flush()
        else:
            print(f"seq {seq}: put returned {result.status.name}", file=sys.stderr, flush=True)
        seq += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
