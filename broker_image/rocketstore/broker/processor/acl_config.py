"""mqadmin's plain-ACL verbs (RocketMQ's AdminBrokerProcessor, request codes 50-53).

UPDATE_AND_CREATE_ACL_CONFIG (50, ``updateAclConfig``) creates or updates one account in the file
that defines it (else the default file); DELETE_ACL_CONFIG (51, ``deleteAccessConfig``) removes
one; UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53, ``updateGlobalWhiteAddr``) replaces a file's global white
addresses; each counts the file's ``dataVersion`` up and the broker reads the files again at once.
GET_BROKER_CLUSTER_ACL_INFO (52, ``clusterAclConfigVersion``) answers the default file's data
version, every file's, and the broker's name, address and cluster.

As in RocketMQ 4.9.8, these codes are not admin-only (any account whose signature checks may send
them) and a failure answers the code's ``*_FAILED`` response with the reason as remark. Without
``aclEnable`` there is nothing to edit: the same failure codes say so (RocketMQ fails on a null
validator). The files are written whole through a temporary file; a read-only mount (a Kubernetes
Secret) makes the edit fail with the OSError as remark.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping

from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.acl.remote_address_strategy import AclConfigError
from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.server import Connection, Handler
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)

_NOT_ENABLED = "ACL is not enabled on this broker (aclEnable=false)"


def _split(text: str | None) -> list[str] | None:
    """RocketMQ's UtilAll.split(text, ","): None stays None, empty items are dropped."""
    return None if text is None else [item.strip() for item in text.split(",") if item.strip()]


class AclConfigProcessor:
    """Answers request codes 50-53 from the broker's PlainAccessValidator (None: ACL disabled)."""

    def __init__(self, broker: BrokerContext, validator: Callable[[], PlainAccessValidator | None]) -> None:
        self.broker = broker
        self.validator = validator

    def handlers(self) -> Mapping[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_and_create,
            RequestCode.DELETE_ACL_CONFIG: self.delete,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.version_info,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white_addrs,
        }

    async def update_and_create(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = CreateAccessConfigRequestHeader.from_ext_fields(request.ext_fields)
        failed = ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
        validator = self.validator()
        if validator is None:
            return request.response(failed, _NOT_ENABLED)
        change = {"accessKey": header.access_key, "secretKey": header.secret_key,
                  "whiteRemoteAddress": header.white_remote_address, "admin": header.admin,
                  "defaultTopicPerm": header.default_topic_perm, "defaultGroupPerm": header.default_group_perm,
                  "topicPerms": _split(header.topic_perms), "groupPerms": _split(header.group_perms)}
        try:
            await asyncio.to_thread(validator.manager.update_access_config, change)
        except (AclConfigError, OSError) as exc:
            return request.response(failed, str(exc))
        return request.response(ResponseCode.SUCCESS)

    async def delete(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteAccessConfigRequestHeader.from_ext_fields(request.ext_fields)
        failed = ResponseCode.DELETE_ACL_CONFIG_FAILED
        validator = self.validator()
        if validator is None:
            return request.response(failed, _NOT_ENABLED)
        try:
            deleted = await asyncio.to_thread(validator.manager.delete_access_config, header.access_key)
        except (AclConfigError, OSError) as exc:
            return request.response(failed, str(exc))
        if not deleted:
            return request.response(failed, f"The accesskey[{header.access_key}] corresponding to accessConfig "
                                            "has been deleted failed.")
        return request.response(ResponseCode.SUCCESS)

    async def update_global_white_addrs(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UpdateGlobalWhiteAddrsConfigRequestHeader.from_ext_fields(request.ext_fields)
        failed = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
        validator = self.validator()
        if validator is None:
            return request.response(failed, _NOT_ENABLED)
        patterns = _split(header.global_white_addrs) or []
        try:
            updated = await asyncio.to_thread(validator.manager.update_global_white_addrs, patterns,
                                              header.acl_file_full_path or None)
        except (AclConfigError, OSError) as exc:
            return request.response(failed, str(exc))
        if not updated:
            return request.response(failed, f"The globalWhiteAddresses[{header.global_white_addrs}] has been "
                                            "updated failed.")
        return request.response(ResponseCode.SUCCESS)

    def version_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        validator = self.validator()
        if validator is None:
            return request.response(ResponseCode.SYSTEM_ERROR, _NOT_ENABLED)
        table = validator.manager.table
        default = table.versions.get(str(validator.manager.default_file))
        versions = {path: version.to_dict() for path, version in table.versions.items()}
        config = self.broker.broker_config
        header = GetBrokerAclConfigResponseHeader(
            version=json.dumps((default.to_dict() if default else {"counter": 0, "timestamp": 0}),
                               separators=(",", ":")),
            all_acl_file_version=json.dumps(versions, separators=(",", ":")),
            broker_name=config.broker_name, broker_addr=self.broker.broker_addr,
            cluster_name=config.broker_cluster_name)
        return request.response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields())
