"""The RocketMQ version this broker speaks as (RocketMQ's MQVersion), for runtime info and admin tools."""

from __future__ import annotations

from typing import Final

#: MQVersion.CURRENT_VERSION of RocketMQ 4.9.8 (Version.V4_9_8.ordinal()) and its name.
BROKER_VERSION: Final = 409
BROKER_VERSION_DESC: Final = "V4_9_8"
