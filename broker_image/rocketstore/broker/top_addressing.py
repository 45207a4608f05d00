"""The name-server address server (RocketMQ's TopAddressing and MixAll.getWSAddr).

With ``fetchNamesrvAddrByAddressServer=true`` and no ``namesrvAddr``, a RocketMQ broker asks an
HTTP "address server" for the name-server list, ``host:port;host:port`` as the whole response body,
10 s after start and then every 2 minutes, and registers with whatever it last got. The URL is
``http://<domain>:8080/rocketmq/<subgroup>``, or ``http://<domain>/rocketmq/<subgroup>`` when the
domain carries its own port; RocketMQ reads the domain and subgroup from the JVM system properties
``rocketmq.namesrv.domain`` (default ``jmenv.tbsite.net``) and ``rocketmq.namesrv.domain.subgroup``
(default ``nsaddr``), RocketStore from the broker.conf keys of the same names. Only a 200 answer
counts; its body is trimmed and cut at the first line break. A failed fetch keeps the list in use.

The fetch is a blocking ``urllib`` GET (run in a worker thread by the broker): one small request
every two minutes needs no HTTP client library.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from typing import Final

from rocketstore.broker.mq_version import BROKER_VERSION_DESC

log = logging.getLogger(__name__)

DEFAULT_DOMAIN: Final = "jmenv.tbsite.net"  # MixAll.DEFAULT_NAMESRV_ADDR_LOOKUP
DEFAULT_SUBGROUP: Final = "nsaddr"
#: TopAddressing.fetchNSAddr()'s timeout
FETCH_TIMEOUT_S: Final = 3.0


def ws_addr(domain: str = DEFAULT_DOMAIN, subgroup: str = DEFAULT_SUBGROUP) -> str:
    """MixAll.getWSAddr: the address server's URL."""
    if domain.find(":") > 0:
        return f"http://{domain}/rocketmq/{subgroup}"
    return f"http://{domain}:8080/rocketmq/{subgroup}"


def clear_new_line(text: str) -> str:
    """TopAddressing.clearNewLine: trimmed, up to the first CR (or else the first LF)."""
    text = text.strip()
    for mark in ("\r", "\n"):
        index = text.find(mark)
        if index != -1:
            return text[:index]
    return text


def fetch_ns_addr(url: str, timeout_s: float = FETCH_TIMEOUT_S) -> str | None:
    """The name-server list the address server at ``url`` answers, or None (logged) when it
    cannot be reached or does not answer 200."""
    request = urllib.request.Request(url, headers={"Client-Version": BROKER_VERSION_DESC})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if response.status == 200:
                return clear_new_line(response.read().decode("utf-8", "replace"))
            log.error("fetch nameserver address failed. statusCode=%s", response.status)
    except urllib.error.HTTPError as exc:
        log.error("fetch nameserver address failed. statusCode=%s", exc.code)
    except (OSError, ValueError) as exc:
        log.error("connect to %s failed, maybe the domain name %s not bind in /etc/hosts: %s", url, url, exc)
    return None
