"""TransactionalMessageCheckService: a check pass every ``transactionCheckInterval`` ms.

A broker task: it sleeps the interval (read again each round, so a live update applies at the
next one), then runs :meth:`TransactionalMessageService.check` in a worker thread with the
current ``transactionTimeOut`` and ``transactionCheckMax``. The first pass comes one interval
after start, as in RocketMQ, whose service thread waits before its first check too.
"""

from __future__ import annotations

import asyncio
import logging
import time

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.transaction.service import CheckListener, TransactionalMessageService

log = logging.getLogger(__name__)

#: Shortest interval honoured: a smaller value would only spin the worker thread.
MIN_CHECK_INTERVAL_MS = 100


async def run_check_service(config: BrokerConfig, service: TransactionalMessageService,
                            listener: CheckListener) -> None:
    """Run check passes until cancelled."""
    while True:
        await asyncio.sleep(max(config.transaction_check_interval, MIN_CHECK_INTERVAL_MS) / 1000)
        begin = time.monotonic()
        try:
            await asyncio.to_thread(service.check, config.transaction_time_out, config.transaction_check_max,
                                    listener)
        except Exception:  # the next round tries again
            log.exception("transaction check pass failed")
        log.debug("transaction check pass took %.0f ms", (time.monotonic() - begin) * 1000)
