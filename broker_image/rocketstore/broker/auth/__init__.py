"""RocketMQ 5.3's authentication and authorization ("ACL 2.0", RIP-68): users, ACLs, and the check of
every request against them (``authenticationEnabled`` / ``authorizationEnabled``).

resource.py                       Resource (type, name, LITERAL/PREFIXED/ANY) and Action
user.py                           User: Super or Normal, enabled or disabled, UserInfo JSON
acl.py                            Acl, Policy (CUSTOM/DEFAULT), PolicyEntry, Decision, source IPs, AclInfo JSON
authentication_context_builder.py who signed a remoting or gRPC request (DefaultAuthenticationContextBuilder)
authentication_provider.py        the pure authentication decision (DefaultAuthenticationProvider)
authorization_provider.py         the pure authorization decision (DefaultAuthorizationProvider)
authorization_context_builder.py  what a remoting or gRPC request touches (DefaultAuthorizationContextBuilder)
auth_metadata_manager.py          users and ACLs: edits, persistence (JSON files), the first users
auth_config.py                    AuthConfig: the broker.conf keys
auth_migrator.py                  plain_acl.yml accounts made users and ACLs (migrateAuthFromV1Enabled)
auth_pipeline.py                  the decision the remoting server and the gRPC port (grpc_v2/auth_check.py)
                                  run before each request's handler
"""
