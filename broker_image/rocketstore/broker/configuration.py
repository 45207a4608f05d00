"""Configuration: the broker's configuration as GET_BROKER_CONFIG shows it and UPDATE_BROKER_CONFIG
changes it (RocketMQ's ``Configuration``, which holds the broker's config objects and its version).

One broker.conf configures two objects, :class:`rocketstore.broker.broker_config.BrokerConfig` and
:class:`rocketstore.store.config.StoreConfig`; readers keep references to them and read their
attributes at use, so a live update assigns into these objects rather than replacing them.
Nothing is written back to broker.conf (RocketMQ does; see broker_config.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from rocketstore.broker.auth.auth_config import AUTH_CONFIG_KEYS
from rocketstore.broker.broker_config import BrokerConfig, split_properties
from rocketstore.broker.unimplemented_config import (
    refusal,
    refused_settings,
    start_only_changes,
    unimplemented_settings,
)
from rocketstore.common.data_version import DataVersion
from rocketstore.store.config import ConfigError, StoreConfig

log = logging.getLogger(__name__)


class Configuration:
    """The live broker and store configs and the configuration's DataVersion."""

    def __init__(self, broker_config: BrokerConfig, store_config: StoreConfig) -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        #: the configuration's version, bumped by every live update (GET_BROKER_CONFIG's header)
        self.data_version = DataVersion()
        #: called with an update's properties once it is applied (e.g. brokerPermission re-registers)
        self.update_listeners: list[Callable[[Mapping[str, str]], None]] = []

    def all_config_properties(self) -> dict[str, str]:
        """Every broker and store key with its current value (GET_BROKER_CONFIG's body)."""
        props = self.broker_config.to_properties()
        props.update(self.store_config.to_properties())
        return props

    def unimplemented_warnings(self) -> list[str]:
        """A warning for each broker.conf key set to a value this broker does not implement (WARN
        keys: REFUSE keys never load, see unimplemented_config.py)."""
        return [setting.message() for setting in unimplemented_settings(self.all_config_properties(),
                                                                         default_properties())]

    def update(self, props: Mapping[str, str]) -> dict[str, str]:
        """Apply broker.conf keys live, all or nothing; returns the keys whose value changed.

        Store keys go through ``StoreConfig.update``, broker keys to ``BrokerConfig``; an
        unknown key or a bad value raises ConfigError and changes nothing. Keys read only at start-up
        (ports, paths) are stored but take effect at the next start, as in RocketMQ. A key set to a
        value this broker does not implement (unimplemented_config.py) raises ConfigError saying
        what the broker does instead: RocketMQ would accept it, but answering success would be a
        success that does something else. So does a change of a start-only security key
        (``aclEnable``, ``tls.*``): it would never take effect.
        """
        refused = refused_settings(props)  # security keys (RocketMQ 5 auth...), which are no config keys here
        if refused:
            raise refusal(refused)
        auth_key = next((key for key in props if key in AUTH_CONFIG_KEYS), None)
        if auth_key is not None:  # the value may be a password: not repeated in the remark
            raise ConfigError(auth_key, "***", "refused: RocketMQ 5 AuthConfig is read at start only (as in "
                              "RocketMQ, it is not part of the broker's configuration): change broker.conf and restart")
        store_part, broker_part, unknown = split_properties(props)
        if unknown:
            key, raw = next(iter(unknown.items()))
            raise ConfigError(key, raw, "not a broker or message store config key")
        broker_values = self.broker_config.parse_update(broker_part)
        parsed = BrokerConfig.from_properties(broker_part)[0].to_properties()
        parsed.update(StoreConfig.from_properties(store_part)[0].to_properties())
        asked = {key: parsed.get(key) for key in props}
        refused = unimplemented_settings({key: value for key, value in asked.items() if value is not None},
                                         default_properties())
        refused += start_only_changes(asked, self.all_config_properties())
        if refused:
            raise refusal(refused)
        changed = self.store_config.update(store_part)  # parses everything before assigning anything
        changed.update(self.broker_config.apply(broker_values))
        if changed:
            self.data_version = self.data_version.next()
            log.info("configuration updated: %s", changed)
        for listener in self.update_listeners:
            listener(props)
        return changed


def default_properties() -> dict[str, str]:
    """Every broker and store key at RocketMQ's default, as text (what "not set" means)."""
    defaults = BrokerConfig().to_properties()
    defaults.update(StoreConfig().to_properties())
    return defaults
