"""RocketMQ's ``PlainPermissionManager``: plain_acl.yml parsed into a table, the decision, hot reload.

The decision (:func:`validate`) is a pure function of the table and the request's needs and
returns RocketMQ's AclException message, or None when the request may proceed. Its order is
RocketMQ 4.9.8's:

1. a ``globalWhiteRemoteAddresses`` pattern matching the client's address allows everything;
2. no ``AccessKey`` field: "No accessKey is configured"; an unknown one: "No acl config for AK";
3. the account's ``whiteRemoteAddress`` matching the client allows everything (RocketMQ skips the
   signature and the permissions then, and so does this);
4. the signature must match: "Check signature failed for accessKey=AK";
5. a send to ``RMQ_SYS_TRACE_TOPIC`` (message traces) is allowed;
6. admin-only codes need ``admin: true``; then every needed resource is checked against the
   account's topicPerms/groupPerms, else its defaultTopicPerm/defaultGroupPerm ("No default
   permission for topic:T" / "group:G" in both cases, RocketMQ's wording). An admin account
   with neither list owns every resource.

Files. Like RocketMQ, every ``*.yml``/``*.yaml`` under ``HOME/conf/acl`` and the default file
``HOME/conf/plain_acl.yml`` (the ``rocketmq.acl.plain.file`` key, relative to HOME unless absolute,
moves it) are read; the first file defining an access key owns it (others are ignored with a
warning), and global white addresses add up. :class:`PlainPermissionManager` re-reads them all
when any file's size or modification time changes, or a file appears or disappears (polled every
:data:`WATCH_INTERVAL_S`); a file that does not parse leaves the previous table in force and is
logged.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from rocketstore.broker.acl.permission import DENY, PUB, check_permission, need_admin_perm, parse_perm
from rocketstore.broker.acl.plain_access_resource import NeededAccess, PlainAccount, is_retry_topic, print_resource
from rocketstore.broker.acl.remote_address_strategy import AclConfigError, RemoteAddressStrategy, parse_strategy
from rocketstore.common.data_version import DataVersion
from rocketstore.common.mix_all import retry_topic
from rocketstore.common.topic_validator import RMQ_SYS_TRACE_TOPIC
from rocketstore.remoting.acl_signer import cal_signature

log = logging.getLogger(__name__)

#: How often the ACL files are looked at for changes.
WATCH_INTERVAL_S: Final = 1.0
#: RocketMQ's AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: keys must be longer.
KEY_MIN_LENGTH: Final = 6
DEFAULT_ACL_FILE: Final = "conf/plain_acl.yml"
ACL_DIR: Final = "conf/acl"


@dataclass(frozen=True, slots=True)
class AclTable:
    """Everything the decision reads: global white patterns and accounts by access key."""

    global_white: tuple[RemoteAddressStrategy, ...] = ()
    accounts: Mapping[str, PlainAccount] = field(default_factory=dict)
    #: access key -> the file that defines it (where an update of the account is written)
    files: Mapping[str, str] = field(default_factory=dict)
    #: file -> its ``dataVersion`` (RocketMQ writes one into a file it edits)
    versions: Mapping[str, DataVersion] = field(default_factory=dict)


def validate(table: AclTable, needed: NeededAccess) -> str | None:
    """RocketMQ's reason to refuse ``needed`` (the AclException message), or None to allow it."""
    verdict = authenticate(table, needed)
    if verdict is None or isinstance(verdict, str):
        return verdict
    return authorize(needed, verdict)


def authenticate(table: AclTable, needed: NeededAccess) -> PlainAccount | str | None:
    """Steps 1-4 (who is asking): None when a white address lets the request through unchecked,
    the refusal reason when the key is missing or unknown or the signature wrong, else the
    account whose permissions :func:`authorize` checks next. Separate from them because the gRPC
    endpoint answers the two kinds of refusal with different status codes."""
    if any(strategy.match(needed.remote_address) for strategy in table.global_white):
        return None
    if needed.access_key is None:
        return "No accessKey is configured"
    account = table.accounts.get(needed.access_key)
    if account is None:
        return f"No acl config for {needed.access_key}"
    if account.white_remote_address.match(needed.remote_address):
        return None
    expected = cal_signature(needed.content, account.secret_key).encode()
    if needed.signature is None or not hmac.compare_digest(expected, needed.signature.encode("utf-8")):
        return f"Check signature failed for accessKey={needed.access_key}"
    return account


def authorize(needed: NeededAccess, account: PlainAccount) -> str | None:
    """Steps 5-6 (what the authenticated ``account`` may do): the refusal reason, or None."""
    if needed.resources.get(RMQ_SYS_TRACE_TOPIC) == PUB:
        return None
    return check_perm(needed, account)


def check_perm(needed: NeededAccess, account: PlainAccount) -> str | None:
    """The admin flag and each resource's permission (PlainPermissionManager.checkPerm)."""
    if need_admin_perm(needed.request_code) and not account.admin:
        return (f"Need admin permission for request code={needed.request_code}, "
                f"but accessKey={account.access_key} is not")
    if not needed.resources or (account.resources is None and account.admin):
        return None
    owned = account.resources or {}
    for resource, perm in needed.resources.items():
        is_group = is_retry_topic(resource)
        if resource in owned:
            granted = owned[resource]
        else:
            granted = account.default_group_perm if is_group else account.default_topic_perm
        if not check_permission(perm, granted):
            return f"No default permission for {print_resource(resource)}"
    return None


# -- parsing -------------------------------------------------------------------------------------


def parse_account(entry: Any, source: str) -> PlainAccount:
    """One ``accounts`` item; raises AclConfigError (naming ``source``) where RocketMQ throws."""
    if not isinstance(entry, Mapping):
        raise AclConfigError(f"{source}: an accounts entry is not a mapping: {entry!r}")
    access_key = _text(entry.get("accessKey"))
    secret_key = _text(entry.get("secretKey"))
    if access_key is None or secret_key is None or len(access_key) <= KEY_MIN_LENGTH \
            or len(secret_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"{source}: The accessKey={access_key} and secretKey={'***' if secret_key else None} "
                             f"cannot be null and length should longer than {KEY_MIN_LENGTH}")
    resources: dict[str, int] = {}
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        items = entry.get(key) or []
        if not isinstance(items, list):
            raise AclConfigError(f"{source}: {key} of {access_key} is not a list")
        for item in items:
            parts = [part for part in str(item).split("=") if part]
            if len(parts) != 2:
                kind = "topic" if is_topic else "group"
                raise AclConfigError(f"{source}: Parse resource permission failed for {kind}:{item}")
            name = parts[0].strip()
            resources[name if is_topic else retry_topic(name)] = parse_perm(parts[1])
    admin = entry.get("admin", False)
    return PlainAccount(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=parse_strategy(_text(entry.get("whiteRemoteAddress"))),
        admin=admin if isinstance(admin, bool) else str(admin).strip().lower() == "true",
        default_topic_perm=parse_perm(_text(entry.get("defaultTopicPerm"))),
        default_group_perm=parse_perm(_text(entry.get("defaultGroupPerm"))),
        resources=resources or None,
    )


def build_table(documents: Sequence[tuple[str, Any]]) -> AclTable:
    """The table of several parsed files (name, YAML document), first definition of a key winning."""
    global_white: list[RemoteAddressStrategy] = []
    accounts: dict[str, PlainAccount] = {}
    files: dict[str, str] = {}
    versions: dict[str, DataVersion] = {}
    for source, document in documents:
        versions[source] = document_version(document)
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise AclConfigError(f"{source}: the top level is not a mapping")
        patterns = document.get("globalWhiteRemoteAddresses") or []
        if not isinstance(patterns, list):
            raise AclConfigError(f"{source}: globalWhiteRemoteAddresses is not a list")
        global_white.extend(parse_strategy(_text(pattern)) for pattern in patterns)
        entries = document.get("accounts") or []
        if not isinstance(entries, list):
            raise AclConfigError(f"{source}: accounts is not a list")
        for entry in entries:
            account = parse_account(entry, source)
            if account.access_key in accounts:
                log.warning("%s: accessKey %s is already defined in another ACL file; ignored", source,
                            account.access_key)
                continue
            accounts[account.access_key] = account
            files[account.access_key] = source
    return AclTable(global_white=tuple(global_white), accounts=accounts, files=files, versions=versions)


def document_version(document: Any) -> DataVersion:
    """The file's ``dataVersion`` (its first element), counter 0 when it has none."""
    if isinstance(document, Mapping):
        versions = document.get("dataVersion")
        if isinstance(versions, list) and versions and isinstance(versions[0], Mapping):
            try:
                return DataVersion.from_dict(dict(versions[0]))
            except ValueError:
                pass
    return DataVersion(0)


# -- edits (mqadmin's ACL verbs), as pure functions on a file's document ------------------------------


def check_resource_perms(items: Sequence[str]) -> None:
    """RocketMQ's Permission.checkResourcePerms for an update: ``NAME=PERM``, PERM a known one."""
    for item in items:
        parts = [part for part in item.split("=") if part]
        if len(parts) != 2:
            raise AclConfigError(f"Parse Resource format error for {item}.\n"
                                 "The expected resource format is 'Res=Perm'. For example: topicA=SUB")
        if parts[1].strip() != "DENY" and parse_perm(parts[1]) == DENY:
            raise AclConfigError(f"Parse resource permission error for {item}.\n"
                                 "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'.")


def updated_account(existing: Mapping[str, Any] | None, change: Mapping[str, Any]) -> dict[str, Any]:
    """An ``accounts`` entry with ``change`` applied (RocketMQ's createAclAccessConfigMap): keys
    absent from ``change`` (or empty, for the secret and default permissions) keep their value."""
    entry = dict(existing or {})
    access_key = change.get("accessKey")
    if not access_key or len(access_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"The accessKey={access_key} cannot be null and length should longer than 6")
    entry["accessKey"] = access_key
    secret = change.get("secretKey")
    if secret:
        if len(secret) <= KEY_MIN_LENGTH:
            raise AclConfigError("The secretKey=*** value length should longer than 6")
        entry["secretKey"] = secret
    if change.get("whiteRemoteAddress") is not None:
        entry["whiteRemoteAddress"] = change["whiteRemoteAddress"]
    entry["admin"] = bool(change.get("admin", False))
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        if change.get(key):
            entry[key] = change[key]
    for key in ("topicPerms", "groupPerms"):
        if change.get(key) is not None:
            entry[key] = list(change[key])
    return entry


def with_next_version(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with its ``dataVersion`` counted up (RocketMQ's updateAclConfigFileVersion)."""
    following = document_version(document).next()
    return {**document, "dataVersion": [{"counter": following.counter, "timestamp": following.timestamp}]}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# -- files ---------------------------------------------------------------------------------------


def acl_files(home: Path, default_file: Path) -> list[Path]:
    """Every ACL file RocketMQ reads under ``home``: ``conf/acl/**/*.yml|yaml``, then the default file.

    Hidden entries are skipped: a Kubernetes Secret volume keeps each version of its files in a
    ``..<timestamp>`` directory next to the visible links, which would define every account twice.
    """
    found: list[Path] = []
    acl_dir = home / ACL_DIR
    if acl_dir.is_dir():
        found = sorted(p for p in acl_dir.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml")
                       and not any(part.startswith(".") for part in p.relative_to(acl_dir).parts))
    if default_file.is_file() and default_file not in found:
        found.append(default_file)
    return found


def read_yaml(path: Path) -> Any:
    """One ACL file's document; raises AclConfigError naming the file when it is not YAML."""
    with open(path, encoding="utf-8") as f:
        try:
            return yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise AclConfigError(f"{path}: not YAML: {exc}") from exc


def default_acl_file(home: Path, configured: str | None) -> Path:
    """``rocketmq.acl.plain.file`` (absolute, or relative to home), else ``home/conf/plain_acl.yml``."""
    path = Path(configured or DEFAULT_ACL_FILE)
    return path if path.is_absolute() else home / path


class PlainPermissionManager:
    """Holds the current :class:`AclTable` of the files under ``home`` and reloads it when they change."""

    def __init__(self, home: Path, default_file: Path) -> None:
        self.home = home
        self.default_file = default_file
        self.table = AclTable()
        self.reloads = 0
        self.reload_failures = 0
        self._stamp: tuple[tuple[str, int, int], ...] | None = None
        #: one reader or editor of the files at a time (the watcher's thread, mqadmin's edits)
        self._lock = threading.RLock()

    def _current_stamp(self) -> tuple[tuple[str, int, int], ...]:
        stamp = []
        for path in acl_files(self.home, self.default_file):
            try:
                st = path.stat()
            except OSError:
                continue
            stamp.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(stamp)

    def load(self) -> None:
        """Read every file now; raises AclConfigError (or OSError) and keeps the old table if one is bad."""
        with self._lock:
            self._load()

    def _load(self) -> None:
        stamp = self._current_stamp()
        documents = [(path_text, read_yaml(Path(path_text))) for path_text, _, _ in stamp]
        self.table = build_table(documents)
        self._stamp = stamp
        log.info("ACL loaded from %s: %d accounts, %d global white address patterns",
                 ", ".join(p for p, _, _ in stamp) or "no file", len(self.table.accounts),
                 len(self.table.global_white))

    def reload_if_changed(self) -> bool:
        """Reload when a file changed since the last load; True if a new table is in force."""
        with self._lock:
            return self._reload_if_changed()

    def _reload_if_changed(self) -> bool:
        stamp = self._current_stamp()
        if stamp == self._stamp:
            return False
        try:
            self._load()
        except (AclConfigError, OSError) as exc:
            self.reload_failures += 1
            self._stamp = stamp  # logged once per change, not every poll
            log.error("ACL files changed but were not reloaded, the previous ACL stays in force: %s", exc)
            return False
        self.reloads += 1
        return True

    # -- mqadmin's ACL verbs: the files edited, then read again ----------------------------------

    def update_access_config(self, change: Mapping[str, Any]) -> None:
        """Create or update one account (UPDATE_AND_CREATE_ACL_CONFIG) in the file defining it, else
        in the default file. Raises AclConfigError (bad values) or OSError (the file is read-only)."""
        with self._lock:
            config = dict(change)
            if not config.get("secretKey") or len(str(config["secretKey"])) <= KEY_MIN_LENGTH \
                    or not config.get("accessKey") or len(str(config["accessKey"])) <= KEY_MIN_LENGTH:
                raise AclConfigError(f"The accessKey={config.get('accessKey')} and secretKey=*** cannot be null and "
                                     f"length should longer than {KEY_MIN_LENGTH}")
            check_resource_perms(config.get("topicPerms") or [])
            check_resource_perms(config.get("groupPerms") or [])
            path = Path(self.table.files.get(config["accessKey"], str(self.default_file)))
            document = self._read(path)
            accounts = [a for a in (document.get("accounts") or []) if isinstance(a, Mapping)]
            existing = next((a for a in accounts if str(a.get("accessKey")) == config["accessKey"]), None)
            entry = updated_account(existing, config)
            accounts = [a for a in accounts if a is not existing] + [entry]
            self._write(path, with_next_version({**document, "accounts": accounts}))

    def delete_access_config(self, access_key: str) -> bool:
        """Remove one account from its file (DELETE_ACL_CONFIG); False when no file defines it."""
        with self._lock:
            source = self.table.files.get(access_key)
            if not access_key or source is None:
                return False
            path = Path(source)
            document = self._read(path)
            accounts = [a for a in (document.get("accounts") or []) if isinstance(a, Mapping)]
            kept = [a for a in accounts if str(a.get("accessKey")) != access_key]
            if len(kept) == len(accounts):
                return False
            self._write(path, with_next_version({**document, "accounts": kept}))
            return True

    def update_global_white_addrs(self, patterns: Sequence[str], file_name: str | None) -> bool:
        """Replace a file's globalWhiteRemoteAddresses (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG); as in
        RocketMQ the file must exist under the ACL home; empty names the default file."""
        with self._lock:
            path = Path(file_name) if file_name else self.default_file
            if not path.is_file() or not path.resolve().is_relative_to(self.home.resolve()):
                log.error("%s is not an existing ACL file under %s", path, self.home)
                return False
            for pattern in patterns:
                parse_strategy(pattern)
            document = self._read(path)
            self._write(path, with_next_version({**document, "globalWhiteRemoteAddresses": list(patterns)}))
            return True

    def _read(self, path: Path) -> dict[str, Any]:
        if not path.exists():
            return {}
        document = read_yaml(path)
        if document is None:
            return {}
        if not isinstance(document, Mapping):
            raise AclConfigError(f"{path}: the top level is not a mapping")
        return dict(document)

    def _write(self, path: Path, document: Mapping[str, Any]) -> None:
        """Check the edited file parses with the others, write it whole (a temporary file renamed
        over it, so the watcher never reads half a file), and load the table from the files.
        Callers hold the lock from their read to here."""
        others = [(p, d) for p, d in self._documents() if p != str(path)]
        build_table([*others, (str(path), document)])
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                yaml.safe_dump(dict(document), f, default_flow_style=False, sort_keys=False, allow_unicode=True)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self._load()

    def _documents(self) -> list[tuple[str, Any]]:
        return [(str(path), read_yaml(path)) for path in acl_files(self.home, self.default_file)]
