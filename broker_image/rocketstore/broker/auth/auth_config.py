"""RocketMQ 5.3's ``AuthConfig``: the authentication and authorization keys of broker.conf.

Apache's BrokerStartup fills AuthConfig from broker.conf next to BrokerConfig but keeps it out of
the broker's Configuration, so ``getBrokerConfig`` never shows it (it holds the first user's
password) and ``updateBrokerConfig`` cannot change it; the same here: it is read once at start
(:meth:`AuthConfig.from_properties`), and a live update naming one of its keys is refused.

Keys implemented: the two switches, the two whitelists, ``initAuthenticationUser``,
``innerClientAuthenticationCredentials`` and ``migrateAuthFromV1Enabled`` (auth_migrator.py). The
provider, metadata-provider and strategy keys are accepted blank or naming Apache's own classes
(the ones RocketStore implements); any other value still refuses the start (unimplemented_config.py).
Apache's cache sizes and expiries are tuning of its caches, which RocketStore does not have
(every request is checked against the current metadata); they are ignored without a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: Apache's own classes, accepted as the values of the provider and strategy keys.
APACHE_CLASSES: Final[Mapping[str, frozenset[str]]] = {
    "authenticationProvider": frozenset({
        "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider"}),
    "authenticationMetadataProvider": frozenset({
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"}),
    # the stateful strategy caches a connection's decisions for a while; checking every request
    # against the current metadata decides the same, only never from a stale cache
    "authenticationStrategy": frozenset({
        "org.apache.rocketmq.auth.authentication.strategy.StatelessAuthenticationStrategy",
        "org.apache.rocketmq.auth.authentication.strategy.StatefulAuthenticationStrategy"}),
    "authorizationProvider": frozenset({
        "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider"}),
    "authorizationMetadataProvider": frozenset({
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider"}),
    "authorizationStrategy": frozenset({
        "org.apache.rocketmq.auth.authorization.strategy.StatelessAuthorizationStrategy",
        "org.apache.rocketmq.auth.authorization.strategy.StatefulAuthorizationStrategy"}),
}

#: Every AuthConfig key this broker reads or knowingly ignores (none is a BrokerConfig key).
AUTH_CONFIG_KEYS: Final = frozenset({
    "authenticationEnabled", "authorizationEnabled", "migrateAuthFromV1Enabled", "authenticationWhitelist",
    "authorizationWhitelist",
    "initAuthenticationUser", "innerClientAuthenticationCredentials", *APACHE_CLASSES,
    "userCacheMaxNum", "userCacheExpiredSecond", "userCacheRefreshSecond", "aclCacheMaxNum",
    "aclCacheExpiredSecond", "aclCacheRefreshSecond", "statefulAuthenticationCacheMaxNum",
    "statefulAuthenticationCacheExpiredSecond", "statefulAuthorizationCacheMaxNum",
    "statefulAuthorizationCacheExpiredSecond",
})


@dataclass(frozen=True, slots=True)
class AuthConfig:
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    authentication_whitelist: str | None = None
    authorization_whitelist: str | None = None
    init_authentication_user: str | None = None
    inner_client_authentication_credentials: str | None = None
    migrate_auth_from_v1_enabled: bool = False

    @property
    def enabled(self) -> bool:
        return self.authentication_enabled or self.authorization_enabled

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> AuthConfig:
        """From broker.conf's text. Values unimplemented_config refuses never get here (the start
        stops first), so a switch is ``true`` or ``false`` in any case, or blank."""
        def switch(key: str) -> bool:
            return props.get(key, "").strip().lower() == "true"

        def text(key: str) -> str | None:
            value = props.get(key)
            return value if value is not None and value.strip() else None

        return cls(
            authentication_enabled=switch("authenticationEnabled"),
            authorization_enabled=switch("authorizationEnabled"),
            authentication_whitelist=text("authenticationWhitelist"),
            authorization_whitelist=text("authorizationWhitelist"),
            init_authentication_user=text("initAuthenticationUser"),
            inner_client_authentication_credentials=text("innerClientAuthenticationCredentials"),
            migrate_auth_from_v1_enabled=switch("migrateAuthFromV1Enabled"),
        )
