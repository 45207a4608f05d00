"""``rocketstore broker``: run a broker in the foreground.

    rocketstore broker [-c broker.conf] [--store-dir DIR] [--listen-port N] [--namesrv-port N]
                       [--http-port N] [--grpc-port N] [--host ADDR] [--log-level LEVEL]

Without arguments it serves the default store directory ``~/store`` (RocketMQ's default) with
RocketMQ's default ports: remoting 10911, the embedded name server 9876, the HTTP side
port 10925 (``/metrics``, ``/healthz``, ``/readyz``) and the gRPC v2 endpoint of 5.x clients 8081
(the port of RocketMQ's proxy). Options override the broker.conf. A
remoting port of 0 picks a free port; a name-server or HTTP port of 0 or less, or a gRPC port
of 0, turns that listener off.

Once serving it prints one line per listener on stdout, e.g. ``remoting 0.0.0.0:10911 (published
as 10.0.0.5:10911)``, ``namesrv 0.0.0.0:9876``, ``http 0.0.0.0:10925``, ``grpc 0.0.0.0:8081``, ``ha 0.0.0.0:10912
(published as 10.0.0.5:10912)`` (the HA port slaves replicate from: listenPort + 1, at brokerIP2),
then ``ready``. SIGTERM or SIGINT stops it gracefully: listeners close, in-flight requests finish (10 s grace), consumer
offsets and config tables are written, the store is flushed and ``abort`` removed; exit code 0.
Exit code 2 when it cannot start (bad config, store locked by another process, port in use).

The broker runs on uvloop when it is installed (``ROCKETSTORE_UVLOOP=0``: on asyncio's own loop;
see :func:`rocketstore.broker.server.event_loop_factory`), and logs which loop at start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from rocketstore.store.config import ConfigError, StoreConfig, load_broker_conf
from rocketstore.store.config_manager import ConfigFileError
from rocketstore.store.store_lock import StoreLockedError

if TYPE_CHECKING:
    # Imported when the command runs, so that the other command groups work in an
    # installation without the broker packages.
    from rocketstore.broker.broker import BrokerController
    from rocketstore.broker.broker_config import BrokerConfig
    from rocketstore.broker.controller_elector import ControllerElector
    from rocketstore.broker.lease_elector import LeaseElector
    from rocketstore.broker.master_elector import MasterElector

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``broker`` to the top-level parser."""
    parser = groups.add_parser(
        "broker", help="run a RocketMQ-compatible broker (remoting, embedded name server, metrics)",
        description="Run a broker in the foreground until SIGTERM/SIGINT.",
    )
    parser.add_argument("-c", "--config", metavar="BROKER_CONF", help="RocketMQ broker.conf")
    parser.add_argument("--store-dir", metavar="DIR",
                        help="store root directory (overrides storePathRootDir; the CommitLog goes to DIR/commitlog)")
    parser.add_argument("--listen-port", type=int, metavar="N", help="remoting port (listenPort, default 10911)")
    parser.add_argument("--namesrv-port", type=int, metavar="N",
                        help="embedded name-server port (namesrvListenPort, default 9876; 0: off)")
    parser.add_argument("--http-port", type=int, metavar="N",
                        help="metrics/health port (httpListenPort, default 10925; 0: off)")
    parser.add_argument("--grpc-port", type=int, metavar="N",
                        help="gRPC v2 port of RocketMQ 5.x clients (grpcListenPort, default 8081; 0: off)")
    parser.add_argument("--host", metavar="ADDR", help="address to bind (listenHost, default 0.0.0.0)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log level on stderr (default INFO)")
    parser.set_defaults(handler=run)


def build_configs(args: argparse.Namespace) -> tuple[BrokerConfig, StoreConfig]:
    from rocketstore.broker.broker_config import BrokerConfig, apply_broker_startup_rules, load_config_file

    if args.config:
        if not os.path.isfile(args.config):
            raise ConfigError("-c", args.config, "config file does not exist")
        broker_config, store_config = load_config_file(args.config)
    else:
        broker_config, store_config = BrokerConfig(), StoreConfig()
    if args.store_dir:
        store_config.store_path_root_dir = os.path.abspath(os.path.expanduser(args.store_dir))
        store_config.store_path_commit_log = None
    if args.listen_port is not None:
        broker_config.listen_port = args.listen_port
    if args.namesrv_port is not None:
        broker_config.namesrv_listen_port = args.namesrv_port
    if args.http_port is not None:
        broker_config.http_listen_port = args.http_port
    if args.grpc_port is not None:
        broker_config.grpc_listen_port = args.grpc_port
    if args.host:
        broker_config.listen_host = args.host
    apply_broker_startup_rules(broker_config, store_config)  # brokerId by role, haListenPort: once the port is known
    return broker_config, store_config


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        broker_config, store_config = build_configs(args)
        from rocketstore.broker.auth.auth_config import AuthConfig

        auth_config = AuthConfig.from_properties(load_broker_conf(args.config)[1]) if args.config else AuthConfig()
    except (ConfigError, OSError, ValueError) as exc:
        print(f"rocketstore broker: error: {exc}", file=sys.stderr)
        return 2
    from rocketstore.broker.broker import BrokerController
    from rocketstore.broker.server import event_loop_factory

    loop_factory, loop_choice = event_loop_factory()
    log.info("event loop: %s", loop_choice)
    elector: MasterElector | None = None
    if broker_config.enable_controller_mode and not (broker_config.controller_addr
                                                     or broker_config.controller_lease_enable):
        # nothing would ever make this broker master (Apache's broker starts, then retries its empty
        # controller list every 5 s for ever): a misconfiguration, said at once (docs/failover.md)
        print("rocketstore broker: error: enableControllerMode=true needs a source of truth for mastership: "
              "controllerAddr (Apache RocketMQ's controller) or controllerLeaseEnable=true (the Kubernetes "
              "Lease)", file=sys.stderr)
        return 2
    if broker_config.enable_controller_mode and broker_config.controller_addr:
        try:
            elector = _controller_elector(broker_config, store_config)
        except ValueError as exc:  # a brokerIdentity of another group
            print(f"rocketstore broker: error: {exc}", file=sys.stderr)
            return 2
    elif broker_config.enable_controller_mode and broker_config.controller_lease_enable:
        try:
            elector = _lease_elector(broker_config, store_config)
        except Exception as exc:  # no namespace, an unreadable kubeconfig or service account
            print(f"rocketstore broker: error: controllerLeaseEnable: {exc}", file=sys.stderr)
            return 2
    try:
        broker = BrokerController(broker_config, store_config, auth_config, elector)
    except ConfigError as exc:  # a combination the auth config refuses (aclEnable, the gRPC port)
        print(f"rocketstore broker: error: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_serve(broker))


def _controller_elector(broker_config: BrokerConfig, store_config: StoreConfig) -> ControllerElector:
    """Apache's controller as the group's source of truth: its leader grants this broker's id
    (kept in the store root's brokerIdentity) before the broker is built, retried every second
    while no controller answers, as Apache's broker retries its registration."""
    from pathlib import Path

    from rocketstore.broker.controller_elector import ControllerElector, ControllerUnavailable
    from rocketstore.client.remoting_client import RemotingClientError, local_ip
    from rocketstore.remoting.command import ProtocolError

    addr = f"{broker_config.broker_ip1 or local_ip()}:{broker_config.listen_port}"
    elector = ControllerElector(broker_config, addr)
    while True:
        try:
            broker_config.broker_id = asyncio.run(elector.allocate_broker_id(Path(store_config.root_dir())))
            break
        except (RemotingClientError, ProtocolError, ControllerUnavailable) as exc:
            log.warning("no broker id from the controllers %s yet (retrying): %s", broker_config.controller_addr, exc)
            time.sleep(1)
    log.info("controller mode: broker id %d, controllers %s", broker_config.broker_id, broker_config.controller_addr)
    return elector


def _lease_elector(broker_config: BrokerConfig, store_config: StoreConfig) -> LeaseElector:
    """The group's Lease on Kubernetes as its source of truth. The replica id is brokerId (> 0,
    checked by apply_broker_startup_rules); the addresses are the ones the broker registers with
    name servers (brokerIP1:listenPort, brokerIP2:haListenPort), known before it serves because
    listenPort is fixed."""
    from rocketstore.broker.lease_elector import lease_elector
    from rocketstore.client.remoting_client import local_ip

    address = f"{broker_config.broker_ip1 or local_ip()}:{broker_config.listen_port}"
    ha_address = f"{broker_config.broker_ip2}:{store_config.ha_listen_port}"
    elector = lease_elector(broker_config, address=address, ha_address=ha_address)
    log.info("controller mode: replica id %d on the Lease %s/%s", broker_config.broker_id, elector.namespace,
             elector.name)
    return elector


async def _serve(broker: BrokerController) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except (ConfigError, ConfigFileError, StoreLockedError, OSError) as exc:
        print(f"rocketstore broker: error: cannot start: {exc}", file=sys.stderr)
        return 2
    cfg = broker.broker_config
    host = cfg.listen_host
    print(f"store {broker.store_config.root_dir()}")
    print(f"remoting {host}:{broker.remoting.port} (published as {broker.broker_addr})")
    if broker.namesrv is not None:
        print(f"namesrv {host}:{broker.namesrv.port}")
    if broker.http is not None:
        print(f"http {host}:{broker.http.port}")
    if broker.grpc is not None:
        print(f"grpc {host}:{broker.grpc.port}")
    if broker.store.ha_service.listen_port:
        print(f"ha 0.0.0.0:{broker.store.ha_service.listen_port} (published as {broker.ha_server_addr})")
    print("ready", flush=True)
    await stop.wait()
    log.info("signal received: stopping")
    await broker.stop(SHUTDOWN_GRACE_S)
    return 0
