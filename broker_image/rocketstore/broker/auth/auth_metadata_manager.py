"""RocketMQ 5.3's AuthenticationMetadataManager and AuthorizationMetadataManager: users and ACLs,
their edits (mqadmin's user and ACL verbs), and their persistence.

Persistence (a RocketStore decision). Apache's LocalAuthenticationMetadataProvider and
LocalAuthorizationMetadataProvider keep users and ACLs in two RocksDB databases under
``<storePathRootDir>/config`` (``users/`` and ``acls/``). RocketStore keeps them as two JSON files
there instead, ``users.json`` (``{"users": [UserInfo, ...]}``) and ``acls.json``
(``{"acls": [AclInfo, ...]}``), written like the other config tables
(:func:`rocketstore.store.config_manager.write_config_file`: a temporary file fsynced and renamed
over the old one, the previous version kept as ``.bak``), each edit written before it is answered.
A store directory moved between Apache RocketMQ and RocketStore therefore does not carry its
users and ACLs either way: recreate them with mqadmin (or ``initAuthenticationUser``).

Edits follow AuthenticationMetadataManagerImpl and AuthorizationMetadataManagerImpl, raising
:class:`~rocketstore.broker.auth.acl.AuthError` with their messages: a user is created Normal and
enabled unless said otherwise, and needs a password; an update changes only what it names;
deleting a user deletes its ACL; an ACL needs an existing user and merges into the existing ACL.
Lists are in key order (as RocksDB iterates), filtered by substring as Apache's.

At start (:meth:`AuthMetadataManager.init_users`), ``initAuthenticationUser`` (a UserInfo JSON,
made Super) and ``innerClientAuthenticationCredentials`` (``{"accessKey":..,"secretKey":..}``, a
Super user) are created unless a user of that name exists.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocketstore.broker.auth.acl import Acl, AuthError, PolicyType, acl_from_info
from rocketstore.broker.auth.resource import Resource
from rocketstore.broker.auth.user import User, UserStatus, UserType, subject_username
from rocketstore.store.config_manager import read_config_file, write_config_file

USERS_FILE = "users.json"
ACLS_FILE = "acls.json"

class AuthMetadataManager:
    """Users by name and ACLs by subject key, in memory and in ``config_dir``'s two files. Each
    method is called in a worker thread (a write fsyncs); one lock keeps edits whole."""

    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        self._users: dict[str, User] = {}
        self._acls: dict[str, Acl] = {}
        self._lock = threading.Lock()

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> None:
        """Read both files (or their backups); missing files are an empty table. Raises
        ConfigFileError when a file exists but neither it nor its backup parses."""
        def users(text: str) -> None:
            document = _document(text, "users")
            self._users = {u.username: u for u in (User.from_info(info) for info in document) if u.username}

        def acls(text: str) -> None:
            document = _document(text, "acls")
            try:
                loaded = [acl_from_info(info, None) for info in document]
            except AuthError as exc:
                raise ValueError(str(exc)) from exc
            self._acls = {acl.subject: acl for acl in loaded}

        with self._lock:
            read_config_file(self.config_dir / USERS_FILE, users)
            read_config_file(self.config_dir / ACLS_FILE, acls)

    def init_users(self, init_user: str | None, inner_credentials: str | None) -> None:
        """``initAuthenticationUser`` and ``innerClientAuthenticationCredentials`` (module docstring);
        raises AuthError naming the key whose JSON is unusable."""
        if init_user and init_user.strip():
            try:
                info = json.loads(init_user)
                user = User.from_info(info if isinstance(info, dict) else {})
            except ValueError as exc:
                raise AuthError(f"Init authentication user error: initAuthenticationUser is not JSON: {exc}") from exc
            if self.get_user(user.username) is None:
                self.create_user(replace(user, user_type=UserType.SUPER))
        if inner_credentials and inner_credentials.strip():
            try:
                credentials = json.loads(inner_credentials)
            except ValueError as exc:
                raise AuthError("Init inner client authentication credentials error: "
                                f"innerClientAuthenticationCredentials is not JSON: {exc}") from exc
            if not isinstance(credentials, dict):
                credentials = {}
            inner = User(str(credentials.get("accessKey") or ""), _text(credentials.get("secretKey")), UserType.SUPER)
            if self.get_user(inner.username) is None:
                self.create_user(inner)

    # -- users -------------------------------------------------------------------------------

    def get_user(self, username: str) -> User | None:
        return self._users.get(username)

    def is_super_user(self, username: str) -> bool:
        user = self._users.get(username)
        if user is None:
            raise AuthError(f"User:{username} is not found")
        return user.is_super

    def list_users(self, name_filter: str | None) -> list[User]:
        return [self._users[name] for name in sorted(self._users)
                if not (name_filter and name_filter.strip()) or name_filter in name]

    def create_user(self, user: User) -> None:
        _validate_user(user, create=True)
        with self._lock:
            if user.username in self._users:
                raise AuthError("The user is existed")
            created = replace(user, user_type=user.user_type or UserType.NORMAL,
                              user_status=user.user_status or UserStatus.ENABLE)
            self._write_users({**self._users, user.username: created})

    def update_user(self, user: User) -> None:
        _validate_user(user, create=False)
        with self._lock:
            old = self._users.get(user.username)
            if old is None:
                raise AuthError("The user is not exist")
            password = user.password if user.password and user.password.strip() else old.password
            updated = replace(old, password=password, user_type=user.user_type or old.user_type,
                              user_status=user.user_status or old.user_status)
            self._write_users({**self._users, user.username: updated})

    def delete_user(self, username: str) -> None:
        """The user and its ACL (a user that does not exist is no error)."""
        if not username or not username.strip():
            raise AuthError("username can not be blank")
        with self._lock:
            if username in self._users:
                self._write_users({k: v for k, v in self._users.items() if k != username})
            subject = User(username).subject_key
            if subject in self._acls:
                self._write_acls({k: v for k, v in self._acls.items() if k != subject})

    # -- ACLs --------------------------------------------------------------------------------

    def get_acl(self, subject: str) -> Acl | None:
        return self._acls.get(subject)

    def get_acl_checked(self, subject: str) -> Acl | None:
        """AuthorizationMetadataManager.getAcl: the subject must exist."""
        self._existing_subject(subject, "The subject is not exist.")
        return self._acls.get(subject)

    def list_acls(self, subject_filter: str | None, resource_filter: str | None) -> list[Acl]:
        """Apache's listAcl: subjects containing ``subject_filter``; with ``resource_filter`` (and
        a subject key not containing it), only entries whose resource key contains it, dropping
        policies and ACLs left empty."""
        result: list[Acl] = []
        for subject in sorted(self._acls):
            if subject_filter and subject_filter.strip() and subject_filter not in subject:
                continue
            acl = self._acls[subject]
            if resource_filter and resource_filter.strip() and resource_filter not in subject:
                policies = tuple(replace(p, entries=kept) for p in acl.policies
                                 if (kept := tuple(e for e in p.entries if resource_filter in e.resource.key)))
                acl = replace(acl, policies=policies)
            if acl.policies:
                result.append(acl)
        return result

    def create_acl(self, acl: Acl) -> None:
        """createAcl and updateAcl alike: merged into the subject's ACL, or stored as new."""
        with self._lock:
            self._existing_subject(acl.subject, f"The subject of {acl.subject} is not exist.")
            old = self._acls.get(acl.subject)
            self._write_acls({**self._acls, acl.subject: acl if old is None else old.updated(acl.policies)})

    update_acl = create_acl

    def delete_acl(self, subject: str, policy_type: PolicyType | None, resource: Resource | None) -> None:
        """The subject's whole ACL, or (with a resource) that resource's entry of the policy type
        (CUSTOM when none is given)."""
        if not subject or not subject.strip():
            raise AuthError("The subject is null.")
        with self._lock:
            self._existing_subject(subject, "The subject is not exist.")
            old = self._acls.get(subject)
            if old is None:
                raise AuthError("The acl is not exist.")
            remaining = None if resource is None else old.without(policy_type or PolicyType.CUSTOM, resource)
            acls = {k: v for k, v in self._acls.items() if k != subject}
            if remaining is not None and remaining.policies:
                acls[subject] = remaining
            self._write_acls(acls)

    def _existing_subject(self, subject: str, message: str) -> None:
        username = subject_username(subject)
        if username is None:
            raise AuthError("The subject type is null.")
        if username not in self._users:
            raise AuthError(message)

    # -- files -------------------------------------------------------------------------------

    def _write_users(self, users: dict[str, User]) -> None:
        self._write(USERS_FILE, "users", [users[name].to_info() for name in sorted(users)])
        self._users = users

    def _write_acls(self, acls: dict[str, Acl]) -> None:
        self._write(ACLS_FILE, "acls", [acls[subject].to_info() for subject in sorted(acls)])
        self._acls = acls

    def _write(self, name: str, key: str, items: list[dict[str, Any]]) -> None:
        write_config_file(self.config_dir / name, json.dumps({key: items}, indent=2, ensure_ascii=False))

def _validate_user(user: User, *, create: bool) -> None:
    if not user.username or not user.username.strip():
        raise AuthError("username can not be blank")
    if create and not (user.password and user.password.strip()):
        raise AuthError("password can not be blank")

def _document(text: str, key: str) -> list[Any]:
    document = json.loads(text)
    if not isinstance(document, dict) or not isinstance(document.get(key), list):
        raise ValueError(f"expected an object with a {key!r} list")
    return list(document[key])

def _text(value: Any) -> str | None:
    return None if value is None else str(value)
