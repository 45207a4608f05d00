"""BrokerStartup's rules for a broker's place in its group, as apply_broker_startup_rules applies them."""

from __future__ import annotations

import pytest

from rocketstore.broker.broker_config import BrokerConfig, apply_broker_startup_rules
from rocketstore.store.config import BrokerRole, ConfigError, StoreConfig


@pytest.mark.parametrize("role", [BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER])
def test_a_master_is_broker_id_0_whatever_broker_conf_says(role: BrokerRole) -> None:
    broker, store = BrokerConfig(broker_id=3, listen_port=10911), StoreConfig(broker_role=role)
    apply_broker_startup_rules(broker, store)
    assert broker.broker_id == 0


def test_a_slave_keeps_its_broker_id_and_needs_one() -> None:
    broker, store = BrokerConfig(broker_id=2, listen_port=10911), StoreConfig(broker_role=BrokerRole.SLAVE)
    apply_broker_startup_rules(broker, store)
    assert broker.broker_id == 2
    with pytest.raises(ConfigError, match="Slave's brokerId must be > 0"):
        apply_broker_startup_rules(BrokerConfig(broker_id=0), StoreConfig(broker_role=BrokerRole.SLAVE))


def test_ha_listen_port_is_listen_port_plus_one_whatever_broker_conf_says() -> None:
    broker, store = BrokerConfig(listen_port=20911), StoreConfig(ha_listen_port=30000)
    apply_broker_startup_rules(broker, store)
    assert store.ha_listen_port == 20912
    any_port = StoreConfig()
    apply_broker_startup_rules(BrokerConfig(listen_port=0), any_port)  # a free port: the HA port is one too
    assert any_port.ha_listen_port == 0


def test_controller_mode_needs_a_broker_id_unless_a_controller_grants_it() -> None:
    broker, store = BrokerConfig(enable_controller_mode=True), StoreConfig(broker_role=BrokerRole.SYNC_MASTER)
    with pytest.raises(ConfigError, match="needs this replica's id"):
        apply_broker_startup_rules(broker, store)
    broker.controller_addr = "127.0.0.1:9878"
    apply_broker_startup_rules(broker, store)  # the controller grants it before the broker is built
    assert store.broker_role is BrokerRole.SLAVE
    broker.fetch_controller_addr_by_dns_lookup = True
    with pytest.raises(ConfigError, match="fetchControllerAddrByDnsLookup"):
        apply_broker_startup_rules(broker, store)


def test_the_lease_elector_needs_controller_mode_a_broker_id_and_no_controller_addr() -> None:
    def rules(**keys: object) -> None:
        apply_broker_startup_rules(BrokerConfig(controller_lease_enable=True, **keys), StoreConfig())  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match=r"controllerLeaseEnable.*needs enableControllerMode=true"):
        rules(broker_id=1, listen_port=10911)
    with pytest.raises(ConfigError, match=r"controllerLeaseEnable.*cannot be used with controllerAddr"):
        rules(enable_controller_mode=True, broker_id=1, listen_port=10911, controller_addr="127.0.0.1:9878")
    with pytest.raises(ConfigError, match="needs this replica's id"):
        rules(enable_controller_mode=True, listen_port=10911)
    with pytest.raises(ConfigError, match="listenPort"):  # the Lease names the address before it serves
        rules(enable_controller_mode=True, broker_id=1, listen_port=0)
    rules(enable_controller_mode=True, broker_id=2, listen_port=10911)
