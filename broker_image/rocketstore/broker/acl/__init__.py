"""RocketMQ 4.9's plain ACL: ``plain_acl.yml`` accounts checked against every request (``aclEnable``).

The signature itself (``AclClientRPCHook``'s HMAC-SHA1 over the sorted ext field values and the body)
is :mod:`rocketstore.remoting.acl_signer`: the client signs with the same function the broker checks with.

permission.py               the PUB/SUB/DENY/ANY bits, the admin-only request codes, ``checkPermission``
remote_address_strategy.py  ``whiteRemoteAddress`` forms (``*``, ``a.b.c.*``, ``a.b.c.1-5``, ``{1,2}``, lists)
plain_access_resource.py    what a request needs (``PlainAccessValidator.parse``) and what an account owns
plain_permission_manager.py the pure decision (``validate``), the files' parsing, and their hot reload
plain_access_validator.py   the hook the RemotingServer runs before each request's handler
mqv2_signature.py           gRPC calls' ``MQv2-HMAC-SHA1`` header and date, made into the same decision's input
"""
