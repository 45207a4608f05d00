"""The plain ACL (``conf/plain_acl.yml``) of the 4.x remoting ACL scenarios with the Java 4.9.8 client.

One file for both brokers: tests/compat/apache_broker/test_acl_against_rocketmq.py runs the
scenarios on Apache RocketMQ's broker and ours with it, which shows how RocketMQ 4.9 answers each;
tests/compat/java4/test_java_acl.py then expects those answers of our broker in detail.
"""

from __future__ import annotations

AK, SK = "RocketMQ", "12345678"
ADMIN_AK, ADMIN_SK = "rocketmqAdmin", "87654321"
#: an account whose secret is not checked for clients from 127.0.0.*
WHITE_AK, WHITE_SK = "whiteListed", "whitesecret"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses:
- 10.10.103.*
accounts:
- accessKey: {AK}
  secretKey: "{SK}"
  whiteRemoteAddress:
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - AclTopicA=PUB|SUB
  - AclTopicB=SUB
  groupPerms:
  - AclDeniedGroup=DENY
- accessKey: {ADMIN_AK}
  secretKey: "{ADMIN_SK}"
  admin: true
- accessKey: {WHITE_AK}
  secretKey: "{WHITE_SK}"
  whiteRemoteAddress: 127.0.0.*
  defaultTopicPerm: DENY
"""
