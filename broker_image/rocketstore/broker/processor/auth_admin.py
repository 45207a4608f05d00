"""mqadmin's user and ACL verbs of RocketMQ 5.3 (AdminBrokerProcessor, request codes 3001-3010).

=====================  ====  ================================================================
AUTH_CREATE_USER       3001  header ``username``, body UserInfo; a Super user only by a Super one
AUTH_UPDATE_USER       3002  the same; only the fields the body names change
AUTH_DELETE_USER       3003  header ``username``; its ACL goes too; a missing user is success
AUTH_GET_USER          3004  header ``username``; body UserInfo, none when there is no such user
AUTH_LIST_USER         3005  header ``filter`` (substring of the name); body [UserInfo]
AUTH_CREATE_ACL        3006  header ``subject`` (``User:name``), body AclInfo; merged into an existing ACL
AUTH_UPDATE_ACL        3007  the same
AUTH_DELETE_ACL        3008  header ``subject``, ``policyType``, ``resource``: an entry, or the whole ACL
AUTH_GET_ACL           3009  header ``subject``; body AclInfo
AUTH_LIST_ACL          3010  header ``subjectFilter``, ``resourceFilter``; body [AclInfo]
=====================  ====  ================================================================

Failures are answered as Apache's handleAuthException does: NO_PERMISSION with the message of an
authentication or authorization error (an unknown user, a validation failure), SYSTEM_ERROR with
"An system error occurred, please try again later." otherwise (a file that could not be written).
Who may send these is authorization's business (Cluster resource, Update or Get), not this
processor's. The verbs are served whether or not authentication is enabled, as in Apache.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from rocketstore.broker.auth.acl import AuthError, PolicyType, acl_from_info
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.resource import Resource
from rocketstore.broker.auth.user import User, UserType, member_by_name
from rocketstore.broker.server import Connection, Handler
from rocketstore.remoting.acl_signer import ACCESS_KEY
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

SYSTEM_ERROR_REMARK: Final = "An system error occurred, please try again later."
T = TypeVar("T")


class AuthAdminProcessor:
    """Answers request codes 3001-3010 from the broker's AuthMetadataManager."""

    def __init__(self, manager: AuthMetadataManager) -> None:
        self.manager = manager

    def handlers(self) -> Mapping[int, Handler]:
        return {
            RequestCode.AUTH_CREATE_USER: self.create_user,
            RequestCode.AUTH_UPDATE_USER: self.update_user,
            RequestCode.AUTH_DELETE_USER: self.delete_user,
            RequestCode.AUTH_GET_USER: self.get_user,
            RequestCode.AUTH_LIST_USER: self.list_users,
            RequestCode.AUTH_CREATE_ACL: self.create_acl,
            RequestCode.AUTH_UPDATE_ACL: self.create_acl,
            RequestCode.AUTH_DELETE_ACL: self.delete_acl,
            RequestCode.AUTH_GET_ACL: self.get_acl,
            RequestCode.AUTH_LIST_ACL: self.list_acls,
        }

    async def _run(self, request: RemotingCommand, work: Callable[[], T]) -> tuple[T | None, RemotingCommand | None]:
        """``work`` in a worker thread (an edit fsyncs); the failure response, if it failed."""
        try:
            return await asyncio.to_thread(work), None
        except AuthError as exc:
            return None, request.response(ResponseCode.NO_PERMISSION, str(exc))
        except Exception:
            log.exception("auth admin request %d failed", request.code)
            return None, request.response(ResponseCode.SYSTEM_ERROR, SYSTEM_ERROR_REMARK)

    def _not_super_caller(self, request: RemotingCommand) -> bool:
        """isNotSuperUserLogin: an unsigned request (authentication off) counts as a Super caller."""
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not access_key:
            return False
        caller = self.manager.get_user(access_key)
        return caller is None or not caller.is_super

    async def create_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return await self._write_user(request, create=True)

    async def update_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return await self._write_user(request, create=False)

    async def _write_user(self, request: RemotingCommand, *, create: bool) -> RemotingCommand:
        username = request.ext_fields.get("username")
        if not username:
            return request.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        info = _body(request)
        user = User.from_info({**(info if isinstance(info, dict) else {}), "username": username})
        verb = "create" if create else "update"
        if user.user_type is UserType.SUPER and self._not_super_caller(request):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The super user can only be {verb} by super user")

        def work() -> None:
            if create:
                self.manager.create_user(user)
                return
            old = self.manager.get_user(username)
            if old is None:
                raise AuthError("The user is not exist")
            if old.is_super and self._not_super_caller(request):
                raise AuthError("The super user can only be update by super user")
            self.manager.update_user(user)

        _, failed = await self._run(request, work)
        return failed or request.response(ResponseCode.SUCCESS)

    async def delete_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        username = request.ext_fields.get("username") or ""

        def work() -> None:
            user = self.manager.get_user(username)
            if user is None:
                return
            if user.is_super and self._not_super_caller(request):
                raise AuthError("The super user can only be update by super user")
            self.manager.delete_user(username)

        _, failed = await self._run(request, work)
        return failed or request.response(ResponseCode.SUCCESS)

    def get_user(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        username = request.ext_fields.get("username")
        if not username or not username.strip():
            return request.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        user = self.manager.get_user(username)
        return request.response(ResponseCode.SUCCESS, body=_json(user.to_info()) if user else b"")

    def list_users(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        users = self.manager.list_users(request.ext_fields.get("filter"))
        return request.response(ResponseCode.SUCCESS, body=_json([u.to_info() for u in users]) if users else b"")

    async def create_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        info = _body(request)
        if not isinstance(info, dict) or not info.get("policies"):
            return request.response(ResponseCode.SYSTEM_ERROR, "The body of acl is null")

        def work() -> None:
            self.manager.create_acl(acl_from_info(info, request.ext_fields.get("subject")))

        _, failed = await self._run(request, work)
        return failed or request.response(ResponseCode.SUCCESS)

    async def delete_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        resource = Resource.parse(ext.get("resource"))

        def work() -> None:
            policy_type = member_by_name(PolicyType, ext.get("policyType"))
            self.manager.delete_acl(ext.get("subject") or "", policy_type, resource)

        _, failed = await self._run(request, work)
        return failed or request.response(ResponseCode.SUCCESS)

    async def get_acl(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        subject = request.ext_fields.get("subject") or ""
        acl, failed = await self._run(request, lambda: self.manager.get_acl_checked(subject))
        if failed is not None:
            return failed
        return request.response(ResponseCode.SUCCESS, body=_json(acl.to_info()) if acl else b"")

    def list_acls(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        acls = self.manager.list_acls(ext.get("subjectFilter"), ext.get("resourceFilter"))
        return request.response(ResponseCode.SUCCESS, body=_json([a.to_info() for a in acls]) if acls else b"")


def _body(request: RemotingCommand) -> Any:
    try:
        return json.loads(request.body.decode("utf-8")) if request.body else None
    except ValueError:
        return None


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
