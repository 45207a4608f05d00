"""``rocketstore admin``: mqadmin's main verbs over the remoting protocol, with mqadmin's spellings.

    rocketstore admin -n NAMESRV_ADDR VERB [options] [--json]

    updateTopic            -t TOPIC (-b BROKER_ADDR | -c CLUSTER) [-r 8] [-w 8] [-p 6] [-o]
    topicList
    topicStatus            -t TOPIC
    consumerProgress       -g GROUP [-t TOPIC]
    queryMsgByKey          -t TOPIC -k KEY
    queryMsgById           -i MSG_ID [-t TOPIC]   (offset msg id; with -t, a client UNIQ_KEY)
    queryMsgByOffset       -t TOPIC -b BROKER_NAME -i QUEUE_ID -o OFFSET
    getBrokerConfig        (-b BROKER_ADDR | -c CLUSTER)
    updateBrokerConfig     (-b BROKER_ADDR | -c CLUSTER) -k KEY -v VALUE
    deleteExpiredCommitLog (-b BROKER_ADDR | -c CLUSTER)
    brokerStatus           -b BROKER_ADDR
    clusterList
    haStatus               [-c CLUSTER]   (each broker group's members, roles and replication lag)
    topicRoute             -t TOPIC
    deleteTopic            -t TOPIC -c CLUSTER
    updateSubGroup         -g GROUP (-b BROKER_ADDR | -c CLUSTER) [-s true] [-m true] [-d true]
                           [-o false] [-q 1] [-r 16] [-i 0] [-w 1] [-a true]
    deleteSubGroup         -g GROUP (-b BROKER_ADDR | -c CLUSTER) [-r false]   (-r: remove its offsets)
    consumerConnection     -g GROUP
    producerConnection     -g GROUP -t TOPIC
    resetOffsetByTime      -g GROUP -t TOPIC -s (now | MILLIS | yyyy-MM-dd#HH:mm:ss:SSS) [-f true]
    brokerConsumeStats     -b BROKER_ADDR [-o false]   (-o: order topics only)
    handOverMaster         -b MASTER_ADDR [-i BROKER_ID]   (a Lease-mode master hands over to an in-sync
                           slave, to replica BROKER_ID with -i, and stays up as a slave: before a drain)

Security (before or after the verb): ``--access-key AK`` with ``--secret-key-file FILE`` (or
``$ROCKETSTORE_ACCESS_KEY`` / ``$ROCKETSTORE_SECRET_KEY``; ``--secret-key SK`` works but warns, as
``ps`` shows a command line to every local user) signs every request as RocketMQ's
``AclClientRPCHook`` does, for brokers with ``aclEnable``; ``--tls`` speaks TLS without verifying
the broker (RocketMQ's client default), ``--tls-ca FILE`` speaks TLS and verifies the broker's
certificate chain against FILE; ``--tls-cert FILE --tls-key FILE`` present a client certificate.

``-n`` defaults to ``$NAMESRV_ADDR`` (as mqadmin's does); verbs given ``-b BROKER_ADDR`` need no
name server. ``--json`` prints one JSON document. Exit codes: 0 success; 1 the broker answered
with an error or the query found nothing; 2 usage errors and unreachable or silent peers. An
error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rocketstore.cli.store_cmd import format_ms, message_to_json, print_message
from rocketstore.client import (
    AclClientRPCHook,
    BrokerAdmin,
    MQAdmin,
    RemotingClient,
    RemotingClientError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
    SessionCredentials,
    client_ssl_context,
)
from rocketstore.client.acl_hook import SECRET_KEY_ENV
from rocketstore.client.admin import ClientConnection
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.message import StoredMessage
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig

TIMEOUT_S = 5.0


class AdminError(Exception):
    """A problem found while running (exit 1); ``usage`` marks one that kept it from running (2)."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


Action = Callable[[argparse.Namespace, "Context"], Any]


class Context:
    """The connections one command uses."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client = RemotingClient(timeout=args.timeout, connect_timeout=args.timeout,
                                     ssl_context=_ssl_context(args), rpc_hook=_rpc_hook(args))
        self._admin: MQAdmin | None = None

    @property
    def admin(self) -> MQAdmin:
        if self._admin is None:
            addr = self.args.namesrv or os.environ.get("NAMESRV_ADDR")
            if not addr:
                raise AdminError("no name server address: give -n host:port or set NAMESRV_ADDR", usage=True)
            try:
                self._admin = MQAdmin(addr, client=self.client, timeout=self.args.timeout)
            except ValueError as exc:
                raise AdminError(str(exc), usage=True) from None
        return self._admin

    def broker(self, addr: str) -> BrokerAdmin:
        return BrokerAdmin(addr, client=self.client, timeout=self.args.timeout)

    def brokers(self) -> list[str]:
        """The -b address, or every master of the -c cluster."""
        if getattr(self.args, "broker_addr", None):
            return [self.args.broker_addr]
        if getattr(self.args, "cluster", None):
            addrs = self.admin.master_addrs(self.args.cluster)
            if not addrs:
                raise AdminError(f"cluster {self.args.cluster} has no master broker")
            return addrs
        raise AdminError("give -b BROKER_ADDR or -c CLUSTER", usage=True)

    def close(self) -> None:
        self.client.close()


#: printed when the secret comes from the command line: ``ps`` and /proc show it to every local user
SECRET_ON_COMMAND_LINE = ("rocketstore admin: warning: --secret-key puts the secret on the command line, where "
                          f"`ps` shows it to every user of this host; use ${SECRET_KEY_ENV} or --secret-key-file")


def _secret(args: argparse.Namespace) -> str | None:
    """The secret key of --secret-key-file (first line), else of --secret-key (with a warning)."""
    path, given = getattr(args, "secret_key_file", None), getattr(args, "secret_key", None)
    if path is not None and given is not None:
        raise AdminError("give --secret-key or --secret-key-file, not both", usage=True)
    if path is None:
        if given is not None:
            print(SECRET_ON_COMMAND_LINE, file=sys.stderr)
        return given
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise AdminError(f"--secret-key-file {path}: {exc.strerror or exc}", usage=True) from None
    if not lines or not lines[0].strip():
        raise AdminError(f"--secret-key-file {path}: the file is empty", usage=True)
    return lines[0].strip()


def _rpc_hook(args: argparse.Namespace) -> AclClientRPCHook | None:
    """ACL signing from --access-key and --secret-key-file / --secret-key, else the environment;
    none without either."""
    access, secret = getattr(args, "access_key", None), _secret(args)
    try:
        if access is None and secret is None:
            credentials = SessionCredentials.from_env()
        else:
            credentials = SessionCredentials(access or "", secret or "")
    except ValueError as exc:
        raise AdminError(f"{exc} (--access-key and --secret-key go together)", usage=True) from None
    return None if credentials is None else AclClientRPCHook(credentials)


def _ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    ca, cert, key = (getattr(args, n, None) for n in ("tls_ca", "tls_cert", "tls_key"))
    if not (getattr(args, "tls", False) or ca or cert or key):
        return None
    try:
        return client_ssl_context(trust_cert=ca, cert=cert, key=key)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: a file that is not PEM
        raise AdminError(f"TLS settings: {exc}", usage=True) from None


def java_boolean(text: str) -> bool:
    """mqadmin's ``true``/``false`` option values; anything else is refused, not read as false."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value == "true"


def reset_timestamp(text: str) -> int:
    """resetOffsetByTime's -s: ``now``, epoch milliseconds, or ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time."""
    value = text.strip()
    if value == "now":
        return int(time.time() * 1000)
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        when = datetime.datetime.strptime(value, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS, got {text!r}") from None
    return int(when.timestamp() * 1000)


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``admin`` and its verbs to the top-level parser."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: given after the verb they override, otherwise the admin-level value stands
    common.add_argument("-n", "--namesrvAddr", dest="namesrv", default=argparse.SUPPRESS, metavar="ADDR",
                        help="name server address(es), host:port;host:port (default $NAMESRV_ADDR)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, metavar="SECONDS",
                        help=f"per-request timeout (default {TIMEOUT_S:g})")
    _security_options(common, argparse.SUPPRESS)

    admin = groups.add_parser("admin", help="administer brokers over the remoting protocol (mqadmin verbs)",
                              description="mqadmin's main verbs against RocketStore (or RocketMQ) brokers.")
    admin.add_argument("-n", "--namesrvAddr", dest="namesrv", metavar="ADDR",
                       help="name server address(es), host:port;host:port (default $NAMESRV_ADDR)")
    admin.add_argument("--json", action="store_true", help="machine-readable output")
    admin.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                       help=f"per-request timeout (default {TIMEOUT_S:g})")
    _security_options(admin, None)
    verbs = admin.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, action: Action, help_text: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=_handler(action))
        return p

    def broker_or_cluster(p: argparse.ArgumentParser) -> None:
        g = p.add_mutually_exclusive_group(required=True)
        g.add_argument("-b", "--brokerAddr", dest="broker_addr", metavar="HOST:PORT", help="one broker")
        g.add_argument("-c", "--clusterName", dest="cluster", metavar="CLUSTER", help="every master of a cluster")

    p = verb("updateTopic", _update_topic, "create or update a topic")
    p.add_argument("-t", "--topic", required=True)
    broker_or_cluster(p)
    p.add_argument("-r", "--readQueueNums", dest="read_queues", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", dest="write_queues", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 read+write (default 6)")
    p.add_argument("-o", "--order", type=java_boolean, default=False, metavar="true|false",
                   help="an ordered topic (mqadmin: -o true)")

    verb("topicList", _topic_list, "every topic the name server knows")

    p = verb("topicStatus", _topic_status, "min/max offset of every queue of a topic")
    p.add_argument("-t", "--topic", required=True)

    p = verb("consumerProgress", _consumer_progress, "a consumer group's offsets against the brokers'")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    p.add_argument("-t", "--topic", help="only this topic")

    p = verb("queryMsgByKey", _query_by_key, "messages by KEYS")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", dest="key", required=True)

    p = verb("queryMsgById", _query_by_id, "a message by its offset msg id (or, with -t, its client UNIQ_KEY)")
    p.add_argument("-i", "--msgId", dest="msg_id", required=True)
    p.add_argument("-t", "--topic", help="topic, to look the id up as a client message id (UNIQ_KEY)")

    p = verb("queryMsgByOffset", _query_by_offset, "the message at a queue offset")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-i", "--queueId", dest="queue_id", type=int, required=True)
    p.add_argument("-o", "--offset", type=int, required=True)

    p = verb("getBrokerConfig", _get_broker_config, "a broker's configuration")
    broker_or_cluster(p)

    p = verb("updateBrokerConfig", _update_broker_config, "change one broker config key live")
    broker_or_cluster(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    p = verb("deleteExpiredCommitLog", _delete_expired, "run the broker's expired CommitLog cleanup now")
    broker_or_cluster(p)

    p = verb("brokerStatus", _broker_status, "a broker's runtime info")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", required=True, metavar="HOST:PORT")

    verb("clusterList", _cluster_list, "clusters, brokers and their addresses")

    p = verb("haStatus", _ha_status, "each broker group's master and slaves, and how far each slave lags")
    p.add_argument("-c", "--clusterName", dest="cluster", metavar="CLUSTER", help="only this cluster")

    p = verb("topicRoute", _topic_route, "a topic's route as the name server gives it")
    p.add_argument("-t", "--topic", required=True)

    p = verb("deleteTopic", _delete_topic, "delete a topic from a cluster's brokers and the name server")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", dest="cluster", required=True)

    p = verb("updateSubGroup", _update_sub_group, "create or update a subscription group")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    broker_or_cluster(p)
    for short, long_name, dest in (("-s", "--consumeEnable", "consume_enable"),
                                   ("-m", "--consumeFromMinEnable", "consume_from_min_enable"),
                                   ("-d", "--consumeBroadcastEnable", "consume_broadcast_enable"),
                                   ("-a", "--notifyConsumerIdsChanged", "notify_consumer_ids_changed_enable")):
        p.add_argument(short, long_name, dest=dest, type=java_boolean, default=True, metavar="true|false")
    p.add_argument("-o", "--consumeMessageOrderly", dest="consume_message_orderly", type=java_boolean,
                   default=False, metavar="true|false", help="FIFO over gRPC (RocketMQ 5.x's key)")
    p.add_argument("-q", "--retryQueueNums", dest="retry_queue_nums", type=int, default=1)
    p.add_argument("-r", "--retryMaxTimes", dest="retry_max_times", type=int, default=16)
    p.add_argument("-i", "--brokerId", dest="broker_id", type=int, default=0)
    p.add_argument("-w", "--whichBrokerWhenConsumeSlowly", dest="which_broker_when_consume_slowly", type=int,
                   default=1)

    p = verb("deleteSubGroup", _delete_sub_group, "delete a subscription group (and, with -r true, its offsets)")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    broker_or_cluster(p)
    p.add_argument("-r", "--removeOffset", dest="remove_offset", type=java_boolean, default=False,
                   metavar="true|false")

    p = verb("consumerConnection", _consumer_connection, "a consumer group's clients and subscriptions")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)

    p = verb("producerConnection", _producer_connection, "a producer group's clients")
    p.add_argument("-g", "--producerGroup", dest="group", required=True)
    p.add_argument("-t", "--topic", required=True, help="a topic the producers send to (decides the brokers)")

    p = verb("resetOffsetByTime", _reset_offset_by_time,
             "move a group's offsets to a time; live consumers are told by the broker")
    p.add_argument("-g", "--group", dest="group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, type=reset_timestamp,
                   help="now, milliseconds since the epoch, or yyyy-MM-dd#HH:mm:ss:SSS (local time)")
    p.add_argument("-f", "--force", type=java_boolean, default=True, metavar="true|false",
                   help="also move offsets forward (default true)")

    p = verb("brokerConsumeStats", _broker_consume_stats, "every group's progress on one broker")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", required=True, metavar="HOST:PORT")
    p.add_argument("-o", "--order", type=java_boolean, default=False, metavar="true|false",
                   help="order topics only")

    p = verb("handOverMaster", _hand_over_master,
             "make a master elected by the Kubernetes Lease hand over to an in-sync slave and stay up as a slave")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", required=True, metavar="HOST:PORT",
                   help="the group's master")
    p.add_argument("-i", "--brokerId", dest="broker_id", type=int, metavar="ID",
                   help="the replica id of the slave to hand over to (default: any in-sync slave holding the log)")


def _security_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--access-key", dest="access_key", default=default, metavar="AK",
                        help="ACL access key to sign requests with (default $ROCKETSTORE_ACCESS_KEY)")
    parser.add_argument("--secret-key", dest="secret_key", default=default, metavar="SK",
                        help="ACL secret key (default $ROCKETSTORE_SECRET_KEY); visible in `ps`: prefer the "
                             "environment or --secret-key-file")
    parser.add_argument("--secret-key-file", dest="secret_key_file", default=default, metavar="FILE",
                        help="read the ACL secret key from the first line of FILE")
    parser.add_argument("--tls", action="store_true", default=argparse.SUPPRESS if default is not None else False,
                        help="speak TLS to brokers and name servers, not verifying their certificates")
    parser.add_argument("--tls-ca", dest="tls_ca", default=default, metavar="FILE",
                        help="speak TLS and verify certificates against these PEM CA certificates")
    parser.add_argument("--tls-cert", dest="tls_cert", default=default, metavar="FILE",
                        help="PEM client certificate to present (with --tls-key)")
    parser.add_argument("--tls-key", dest="tls_key", default=default, metavar="FILE",
                        help="PEM private key of --tls-cert")


def _handler(action: Action) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            ctx = Context(args)
        except AdminError as exc:  # bad credentials or TLS files: nothing was sent
            return _fail(str(exc), 2)
        try:
            result = action(args, ctx)
        except AdminError as exc:
            return _fail(str(exc), 2 if exc.usage else 1)
        except RemotingError as exc:
            return _fail(str(exc), 1)
        except (RemotingConnectError, RemotingTimeout) as exc:
            return _fail(str(exc), 2)
        except RemotingClientError as exc:
            return _fail(str(exc), 2)
        finally:
            ctx.close()
        if args.json:
            json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
            sys.stdout.write("\n")
        return 0

    return run


def _fail(message: str, code: int) -> int:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"rocketstore admin: {first}", file=sys.stderr)
    return code


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


# -- verbs -------------------------------------------------------------------------------------


def _update_topic(args: argparse.Namespace, ctx: Context) -> Any:
    addrs = ctx.brokers()
    for addr in addrs:
        ctx.broker(addr).create_topic(args.topic, args.read_queues, args.write_queues, args.perm, order=args.order)
    if not args.json:
        for addr in addrs:
            print(f"create topic to {addr} success.")
        print(f"TopicConfig [topicName={args.topic}, readQueueNums={args.read_queues}, "
              f"writeQueueNums={args.write_queues}, perm={args.perm}, order={str(args.order).lower()}]")
    return {"topic": args.topic, "brokers": addrs, "readQueueNums": args.read_queues,
            "writeQueueNums": args.write_queues, "perm": args.perm, "order": args.order}


def _topic_list(args: argparse.Namespace, ctx: Context) -> Any:
    topics = sorted(ctx.admin.topic_list())
    if not args.json:
        for topic in topics:
            print(topic)
    return {"topicList": topics}


def _topic_status(args: argparse.Namespace, ctx: Context) -> Any:
    stats = ctx.admin.topic_status(args.topic)
    rows: list[dict[str, Any]] = [
        {"brokerName": s.queue.broker_name, "queueId": s.queue.queue_id, "minOffset": s.min_offset,
         "maxOffset": s.max_offset, "lastUpdateTimestamp": s.last_update_timestamp} for s in stats]
    if not args.json:
        _table(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
               [(r["brokerName"], r["queueId"], r["minOffset"], r["maxOffset"],
                 format_ms(r["lastUpdateTimestamp"]) if r["lastUpdateTimestamp"] else "") for r in rows])
    return {"topic": args.topic, "queues": rows}


def _consumer_progress(args: argparse.Namespace, ctx: Context) -> Any:
    stats = ctx.admin.consumer_progress(args.group, args.topic)
    rows: list[dict[str, Any]] = [
        {"topic": o.queue.topic, "brokerName": o.queue.broker_name, "queueId": o.queue.queue_id,
         "brokerOffset": o.broker_offset, "consumerOffset": o.consumer_offset, "diff": o.diff,
         "lastTimestamp": o.last_timestamp} for o in stats.offsets]
    if not args.json:
        _table(["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"],
               [(r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"], r["diff"],
                 format_ms(r["lastTimestamp"]) if r["lastTimestamp"] else "N/A") for r in rows])
        print()
        print(f"Consume TPS: {stats.consume_tps:.2f}")
        print(f"Diff Total: {stats.diff_total}")
    return {"group": args.group, "consumeTps": stats.consume_tps, "diffTotal": stats.diff_total, "queues": rows}


def _messages(args: argparse.Namespace, messages: list[StoredMessage], what: str) -> Any:
    if not messages:
        raise AdminError(f"no message found for {what}")
    if not args.json:
        for msg in messages:
            print_message(msg, sys.stdout, 200)
    return [message_to_json(m) for m in messages]


def _query_by_key(args: argparse.Namespace, ctx: Context) -> Any:
    return _messages(args, ctx.admin.query_msg_by_key(args.topic, args.key), f"key {args.key} in topic {args.topic}")


def _query_by_id(args: argparse.Namespace, ctx: Context) -> Any:
    if args.topic:
        found = ctx.admin.query_msg_by_unique_key(args.topic, args.msg_id)
        if found:
            return _messages(args, found[:1], f"id {args.msg_id}")
    try:
        message = ctx.admin.query_msg_by_id(args.msg_id)
    except RemotingError as exc:
        if args.topic:
            raise AdminError(f"no message found for id {args.msg_id} in topic {args.topic}") from None
        raise exc
    return _messages(args, [message], f"id {args.msg_id}")


def _query_by_offset(args: argparse.Namespace, ctx: Context) -> Any:
    msg = ctx.admin.query_msg_by_offset(args.topic, args.broker_name, args.queue_id, args.offset)
    where = f"{args.topic}@{args.broker_name}#{args.queue_id} offset {args.offset}"
    return _messages(args, [msg] if msg is not None else [], where)


def _get_broker_config(args: argparse.Namespace, ctx: Context) -> Any:
    out: dict[str, dict[str, str]] = {}
    for addr in ctx.brokers():
        config = ctx.broker(addr).get_broker_config()
        out[addr] = config
        if not args.json:
            print(f"============{addr}============")
            width = max((len(k) for k in config), default=0)
            for key in sorted(config):
                print(f"{key.ljust(width)}  =  {config[key]}")
    return out


def _update_broker_config(args: argparse.Namespace, ctx: Context) -> Any:
    addrs = ctx.brokers()
    for addr in addrs:
        ctx.broker(addr).update_broker_config({args.key: args.value})
        if not args.json:
            print(f"update broker config success, {addr}")
    return {"brokers": addrs, "key": args.key, "value": args.value}


def _delete_expired(args: argparse.Namespace, ctx: Context) -> Any:
    addrs = ctx.brokers()
    for addr in addrs:
        ctx.broker(addr).delete_expired_commit_log()
    if not args.json:
        print("success")
    return {"brokers": addrs, "success": True}


def _broker_status(args: argparse.Namespace, ctx: Context) -> Any:
    info = ctx.broker(args.broker_addr).get_runtime_info()
    if not args.json:
        width = max((len(k) for k in info), default=0)
        for key in sorted(info):
            print(f"{key.ljust(width)}  : {info[key]}")
    return info


def _cluster_list(args: argparse.Namespace, ctx: Context) -> Any:
    info = ctx.admin.cluster_list()
    rows: list[dict[str, Any]] = []
    for cluster in sorted(info.cluster_addr_table):
        for name in sorted(info.cluster_addr_table[cluster]):
            data = info.broker_addr_table.get(name)
            for broker_id, addr in sorted((data.broker_addrs if data else {}).items()):
                version = ""
                try:
                    version = ctx.broker(addr).get_runtime_info().get("brokerVersionDesc", "")
                except RemotingClientError:
                    version = "(unreachable)"
                rows.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id, "addr": addr,
                             "version": version})
    if not args.json:
        _table(["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version"],
               [(r["cluster"], r["brokerName"], r["brokerId"], r["addr"], r["version"]) for r in rows])
    return {"brokers": rows}


def _ha_status(args: argparse.Namespace, ctx: Context) -> Any:
    """Every group (brokerName) of the name server's clusters: each member's role, CommitLog max
    offset and, for a slave, its lag behind the master in bytes (master max minus slave max) and
    whether its HA client is connected; the master's count of slaves in sync."""
    info = ctx.admin.cluster_list()
    clusters = [args.cluster] if args.cluster else sorted(info.cluster_addr_table)
    rows: list[dict[str, Any]] = []
    for cluster in clusters:
        for name in sorted(info.cluster_addr_table.get(cluster, ())):
            data = info.broker_addr_table.get(name)
            members = sorted((data.broker_addrs if data else {}).items())
            statuses = {}
            for broker_id, addr in members:
                try:
                    statuses[broker_id] = ctx.broker(addr).ha_status()
                except RemotingClientError as exc:
                    rows.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id, "addr": addr,
                                 "role": "(unreachable)", "maxOffset": None, "lagBytes": None, "inSync": None,
                                 "error": str(exc)})
            master = statuses.get(0)
            master_max = master.master_commit_log_max_offset if master is not None else None
            for broker_id, status in sorted(statuses.items()):
                addr = dict(members)[broker_id]
                if status.master:
                    rows.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id, "addr": addr,
                                 "role": "MASTER", "maxOffset": status.master_commit_log_max_offset,
                                 "lagBytes": None, "inSync": status.in_sync_slave_nums})
                else:
                    client = status.ha_client_runtime_info
                    rows.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id, "addr": addr,
                                 "role": "SLAVE", "maxOffset": client.max_offset,
                                 "lagBytes": None if master_max is None else max(master_max - client.max_offset, 0),
                                 "inSync": client.activated, "masterHaAddr": client.master_addr})
    if not args.json:
        _table(["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Role", "#MaxOffset", "#LagBytes",
                "#InSync"],
               [(r["cluster"], r["brokerName"], r["brokerId"], r["addr"], r["role"],
                 "" if r["maxOffset"] is None else r["maxOffset"], "" if r["lagBytes"] is None else r["lagBytes"],
                 "" if r["inSync"] is None else r["inSync"]) for r in rows])
    return {"members": rows}


def _topic_route(args: argparse.Namespace, ctx: Context) -> Any:
    # fastjson's text (bare integer keys of brokerAddrs) as plain JSON
    route = parse_fastjson(ctx.admin.route(args.topic).to_json())
    if not args.json:
        print(json.dumps(route, indent=2, ensure_ascii=False))
    return route


def _delete_topic(args: argparse.Namespace, ctx: Context) -> Any:
    addrs = ctx.admin.delete_topic(args.topic, args.cluster)
    if not args.json:
        print(f"delete topic [{args.topic}] from cluster [{args.cluster}] success.")
        print(f"delete topic [{args.topic}] from NameServer success.")
    return {"topic": args.topic, "cluster": args.cluster, "brokers": addrs}


def _update_sub_group(args: argparse.Namespace, ctx: Context) -> Any:
    config = SubscriptionGroupConfig(
        group_name=args.group, consume_enable=args.consume_enable, consume_from_min_enable=args.consume_from_min_enable,
        consume_broadcast_enable=args.consume_broadcast_enable, retry_queue_nums=args.retry_queue_nums,
        retry_max_times=args.retry_max_times, broker_id=args.broker_id,
        which_broker_when_consume_slowly=args.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=args.notify_consumer_ids_changed_enable,
        consume_message_orderly=args.consume_message_orderly)
    addrs = ctx.brokers()
    for addr in addrs:
        ctx.broker(addr).create_subscription_group(config)
        if not args.json:
            print(f"create subscription group to {addr} success.")
    return {"brokers": addrs, "subscriptionGroupConfig": config.to_dict()}


def _delete_sub_group(args: argparse.Namespace, ctx: Context) -> Any:
    addrs = ctx.brokers()
    for addr in addrs:
        ctx.broker(addr).delete_subscription_group(args.group, args.remove_offset)
        if not args.json:
            print(f"delete subscription group [{args.group}] from broker [{addr}] success.")
    return {"group": args.group, "brokers": addrs, "removeOffset": args.remove_offset}


def _connection_rows(connections: Sequence[ClientConnection]) -> list[dict[str, Any]]:
    return [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language, "version": c.version}
            for c in connections]


def _consumer_connection(args: argparse.Namespace, ctx: Context) -> Any:
    found = ctx.admin.consumer_connection(args.group)
    rows = _connection_rows(found.connections)
    if not args.json:
        _table(["#ClientId", "#ClientAddr", "#Language", "#Version"],
               [(r["clientId"], r["clientAddr"], r["language"], r["version"]) for r in rows])
        print()
        print("Below is subscription:")
        _table(["#Topic", "#SubExpression"], sorted(found.subscriptions.items()))
        print()
        print(f"ConsumeType: {found.consume_type}")
        print(f"MessageModel: {found.message_model}")
        print(f"ConsumeFromWhere: {found.consume_from_where}")
    return {"group": args.group, "connections": rows, "subscriptions": found.subscriptions,
            "consumeType": found.consume_type, "messageModel": found.message_model,
            "consumeFromWhere": found.consume_from_where}


def _producer_connection(args: argparse.Namespace, ctx: Context) -> Any:
    rows = _connection_rows(ctx.admin.producer_connection(args.group, args.topic))
    if not args.json:
        _table(["#ClientId", "#ClientAddr", "#Language", "#Version"],
               [(r["clientId"], r["clientAddr"], r["language"], r["version"]) for r in rows])
    return {"group": args.group, "connections": rows}


def _reset_offset_by_time(args: argparse.Namespace, ctx: Context) -> Any:
    offsets = ctx.admin.reset_offset_by_time(args.group, args.topic, args.timestamp, args.force)
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset} for mq, offset in offsets.items()]
    if not args.json:
        print(f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], "
              f"force[{str(args.force).lower()}], timestamp[{args.timestamp}]")
        _table(["#brokerName", "#queueId", "#offset"], [(r["brokerName"], r["queueId"], r["offset"]) for r in rows])
    return {"group": args.group, "topic": args.topic, "timestamp": args.timestamp, "force": args.force,
            "queues": rows}


def _broker_consume_stats(args: argparse.Namespace, ctx: Context) -> Any:
    stats, total_diff = ctx.broker(args.broker_addr).broker_consume_stats(args.order)
    rows: list[dict[str, Any]] = [
        {"topic": o.queue.topic, "group": g.group, "brokerName": o.queue.broker_name, "queueId": o.queue.queue_id,
         "brokerOffset": o.broker_offset, "consumerOffset": o.consumer_offset, "diff": o.diff,
         "lastTimestamp": o.last_timestamp}
        for g in stats for o in g.stats.offsets]
    if not args.json:
        _table(["#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff",
                "#LastTime"],
               [(r["topic"], r["group"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"],
                 r["diff"], format_ms(r["lastTimestamp"]) if r["lastTimestamp"] else "N/A") for r in rows])
        print()
        print(f"Diff Total: {total_diff}")
    return {"brokerAddr": args.broker_addr, "diffTotal": total_diff, "queues": rows}


def _hand_over_master(args: argparse.Namespace, ctx: Context) -> Any:
    """The broker answers once its Lease is released (or refuses, with why): the request's own
    timeout must cover its wait for a slave to catch up, so it is at least 30 s."""
    remark = ctx.broker(args.broker_addr).hand_over_master(args.broker_id, timeout=max(args.timeout, 30.0))
    if not args.json:
        print(remark)
    return {"broker": args.broker_addr, "remark": remark}
