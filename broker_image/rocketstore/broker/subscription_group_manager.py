"""SubscriptionGroupManager: the broker's consumer groups (``subscriptionGroup.json``) and their
auto-creation.

The table and its file format are :class:`rocketstore.store.config_manager.SubscriptionGroupManager`;
this subclass adds RocketMQ's broker-side rules: the system groups every broker has, created when
the table is loaded (before the file, so a file's own definition of one wins), and
:meth:`SubscriptionGroupManager.find_subscription_group_config`, which creates a group on first use.
Changes are reported to ``on_change``, as the topic table's are (see topic_config_manager.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.common.mix_all import CID_RMQ_SYS_PREFIX
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.store import config_manager
from rocketstore.store.config_manager import ConfigManager

log = logging.getLogger(__name__)

#: Consumer groups every broker has (SubscriptionGroupManager.init).
SYSTEM_GROUPS: Final = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                        "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")


class SubscriptionGroupManager(config_manager.SubscriptionGroupManager):
    """subscriptionGroup.json plus group auto-creation; ``broker_config`` is read at use,
    ``on_change`` is called with this manager after every group it creates (from any thread)."""

    def __init__(self, config_dir: Path, broker_config: BrokerConfig,
                 on_change: Callable[[ConfigManager], None]) -> None:
        super().__init__(config_dir)
        self.broker_config = broker_config
        self._on_change = on_change
        self._create_lock = threading.Lock()  # auto-creation may be called from worker threads

    def load(self) -> bool:
        """Create the system groups, then load subscriptionGroup.json over them."""
        for name in SYSTEM_GROUPS:
            self.put(SubscriptionGroupConfig(group_name=name))
        return super().load()

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when autoCreateSubscriptionGroup is on (or for
        a ``CID_RMQ_SYS_`` group), else None."""
        config = self.get(group)
        if config is not None:
            return config
        if not (self.broker_config.auto_create_subscription_group or group.startswith(CID_RMQ_SYS_PREFIX)):
            return None
        with self._create_lock:
            config = self.get(group)
            if config is not None:
                return config
            config = SubscriptionGroupConfig(group_name=group)
            self.put(config)
        log.info("auto-created subscription group %s", group)
        self._on_change(self)
        return config
