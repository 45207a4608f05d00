"""The ``rocketstore`` data source against a REAL secured broker process (``aclEnable`` and
``tls.server.mode=enforcing``): the sink writes and the batch read reads back with the TLS and ACL
options, the secret key coming from the environment the way ``spark.executorEnv`` delivers it;
without TLS, without credentials or with a wrong secret the query fails, and no message carries
the secret."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker, plain_acl_broker
from polling import wait_until
from pyspark.sql import SparkSession
from tls_certs import Certs, enforcing_tls_conf, make_certs

from rocketstore.client import AclClientRPCHook, BrokerAdmin, SessionCredentials, client_ssl_context
from rocketstore.client.acl_hook import ACCESS_KEY_ENV, SECRET_KEY_ENV
from rocketstore.client.remoting_client import NameServerClient, RemotingClient, RemotingError
from rocketstore.pipeline.broker_options import BrokerOptions
from rocketstore.pipeline.options import OptionError
from rocketstore.pipeline.source import RocketStoreDataSource

pytestmark = pytest.mark.integration

AK, SK = "sparkUser", "spark-user-secret-4711"
ADMIN_AK, ADMIN_SK = "opsAdmin", "ops-admin-secret"
TOPIC = "SecuredSparkTopic"
ACL = f"""accounts:
- accessKey: {AK}
  secretKey: {SK}
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - {TOPIC}=PUB|SUB
- accessKey: {ADMIN_AK}
  secretKey: {ADMIN_SK}
  admin: true
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Broker]:
    broker = plain_acl_broker(tmp_path_factory.mktemp("secure-broker"), ACL, enforcing_tls_conf(certs))
    broker.start()
    try:
        with BrokerAdmin(broker.addr, timeout=10, ssl_context=client_ssl_context(trust_cert=certs.ca),
                         rpc_hook=AclClientRPCHook(SessionCredentials(ADMIN_AK, ADMIN_SK))) as admin:
            admin.create_topic(TOPIC, 4, 4)
        with RemotingClient(ssl_context=client_ssl_context(trust_cert=certs.ca)) as client:
            names = NameServerClient(broker.namesrv, client)
            wait_until("the topic's route in the name server", lambda: routed(names), 30)
        yield broker
    finally:
        broker.stop()


def routed(names: NameServerClient) -> bool:
    try:
        return bool(names.get_route(TOPIC).queue_datas)
    except RemotingError:
        return False


@pytest.fixture
def secret_in_executor_env(spark: SparkSession) -> Iterator[None]:
    """ROCKETSTORE_SECRET_KEY in the environment of the source's Python workers (planner and tasks).

    ``spark.executorEnv.X`` puts X into ``SparkContext.environment``, which a data source takes
    when it is registered; the session here already runs, so the test sets the entry and registers
    the source again (and undoes both afterwards)."""
    sc = spark.sparkContext
    sc.environment[SECRET_KEY_ENV] = SK
    spark.dataSource.register(RocketStoreDataSource)
    try:
        yield
    finally:
        del sc.environment[SECRET_KEY_ENV]
        spark.dataSource.register(RocketStoreDataSource)


def secured(certs: Certs, **extra: str) -> dict[str, str]:
    return {"tls.enable": "true", "tls.client.trustCertPath": str(certs.ca), "accessKey": AK, **extra}


def test_write_and_read_back_through_a_secured_broker(spark: SparkSession, secure_broker: Broker, certs: Certs,
                                                      secret_in_executor_env: None) -> None:
    rows = [(f"secured-{i}", f"key-{i}") for i in range(30)]
    (spark.createDataFrame(rows, "body STRING, keys STRING").repartition(2).write.format("rocketstore")
     .option("nameServer", secure_broker.namesrv).option("topic", TOPIC).options(**secured(certs))
     .mode("append").save())
    df = (spark.read.format("rocketstore").option("nameServer", secure_broker.namesrv).option("topic", TOPIC)
          .options(**secured(certs)).load())
    assert sorted((bytes(r.body).decode(), r.keys) for r in df.select("body", "keys").collect()) == sorted(rows)
    # brokerAddress (no name server asked) goes through the same TLS and signing
    direct = (spark.read.format("rocketstore").option("brokerAddress", secure_broker.addr).option("topic", TOPIC)
              .options(**secured(certs)).load())
    assert direct.count() == len(rows)


def read_error(spark: SparkSession, broker: Broker, options: dict[str, str]) -> str:
    with pytest.raises(Exception) as caught:  # Spark wraps the source's error in its own types
        (spark.read.format("rocketstore").option("nameServer", broker.namesrv).option("topic", TOPIC)
         .options(**options).load().collect())
    return str(caught.value)


def test_refused_without_tls_or_credentials_and_the_secret_never_shows(
        spark: SparkSession, secure_broker: Broker, certs: Certs) -> None:
    # no secret in the workers' environment (this test does not use secret_in_executor_env)
    message = read_error(spark, secure_broker, secured(certs))
    assert f"access key '{AK}' has no secret here" in message and SECRET_KEY_ENV in message
    # plain TCP to an enforcing broker: the connection is closed
    message = read_error(spark, secure_broker, {})
    assert "closed" in message or "Connection" in message, message
    # TLS but unsigned: the broker's ACL refuses it
    message = read_error(spark, secure_broker, {"tls.enable": "true"})
    assert "AclException" in message or "accessKey" in message.lower() or "No accessKey" in message, message


def test_a_wrong_secret_is_refused_and_not_echoed(spark: SparkSession, secure_broker: Broker, certs: Certs) -> None:
    wrong = "not-the-secret-0815"
    sc = spark.sparkContext
    sc.environment[SECRET_KEY_ENV] = wrong
    spark.dataSource.register(RocketStoreDataSource)
    try:
        message = read_error(spark, secure_broker, secured(certs))
    finally:
        del sc.environment[SECRET_KEY_ENV]
        spark.dataSource.register(RocketStoreDataSource)
    assert "signature" in message.lower(), message
    assert wrong not in message and SK not in message


# -- option validation, without Spark ---------------------------------------------------------------

BASE = {"nameServer": "127.0.0.1:9876", "topic": "T"}


def test_security_option_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptionError, match=f"secretKey is not taken.*{SECRET_KEY_ENV}"):
        BrokerOptions.parse({**BASE, "accessKey": AK, "secretKey": SK})
    with pytest.raises(OptionError, match=re.escape("tls.enable=false contradicts tls.client.trustCertPath")):
        BrokerOptions.parse({**BASE, "tls.enable": "false", "tls.client.trustCertPath": "/ca.pem"})
    with pytest.raises(OptionError, match=re.escape("tls.client.certPath and tls.client.keyPath go together")):
        BrokerOptions.parse({**BASE, "tls.client.certPath": "/c.pem"})
    with pytest.raises(OptionError, match=re.escape("option tls.enable: 'yes', expected true or false")):
        BrokerOptions.parse({**BASE, "tls.enable": "yes"})
    # a path turns TLS on; a missing file is named when the connection is prepared
    options = BrokerOptions.parse({**BASE, "tls.client.trustCertPath": str(tmp_path / "ca.pem")})
    assert options.security.tls
    missing = re.escape(f"option tls.client.trustCertPath: {tmp_path / 'ca.pem'} is not a file")
    with pytest.raises(OptionError, match=missing):
        options.security.ssl_context()
    assert BrokerOptions.parse(BASE).security.ssl_context() is None


def test_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ACCESS_KEY_ENV, raising=False)
    monkeypatch.delenv(SECRET_KEY_ENV, raising=False)
    assert BrokerOptions.parse(BASE).security.rpc_hook() is None
    monkeypatch.setenv(SECRET_KEY_ENV, SK)
    with pytest.raises(OptionError, match="no access key"):
        BrokerOptions.parse(BASE).security.rpc_hook()
    hook = BrokerOptions.parse({**BASE, "accessKey": AK}).security.rpc_hook()
    assert hook is not None and hook.credentials.access_key == AK and hook.credentials.secret_key == SK
    monkeypatch.setenv(ACCESS_KEY_ENV, "fromEnv")
    hook = BrokerOptions.parse(BASE).security.rpc_hook()
    assert hook is not None and hook.credentials.access_key == "fromEnv"
    # nothing printable carries the secret: the options hold none, the credentials hide it
    options = BrokerOptions.parse({**BASE, "accessKey": AK})
    assert SK not in repr(options) and SK not in repr(hook) and SK not in repr(hook.credentials)
