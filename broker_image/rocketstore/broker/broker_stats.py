"""BrokerStats: the message counts at the start of today and of yesterday.

RocketMQ records the broker's running put and get totals at every local midnight;
``clusterList -m`` prints today's counts (now minus this morning) and yesterday's (this morning
minus yesterday morning). Before the first midnight both mornings are 0, as in RocketMQ.
"""

from __future__ import annotations

import dataclasses
import datetime


@dataclasses.dataclass(slots=True)
class BrokerStats:
    put_total_yesterday_morning: int = 0
    put_total_today_morning: int = 0
    get_total_yesterday_morning: int = 0
    get_total_today_morning: int = 0
    #: the local date of the last midnight recorded (None: none yet)
    _day: datetime.date | None = None

    def maybe_record(self, today: datetime.date, put_total: int, get_total: int) -> bool:
        """At the first call of a new local day, shift today's mornings to yesterday's and take
        the running totals as this morning's; True when it did. The first call only notes the day."""
        if self._day is None:
            self._day = today
            return False
        if today == self._day:
            return False
        self._day = today
        self.put_total_yesterday_morning = self.put_total_today_morning
        self.put_total_today_morning = put_total
        self.get_total_yesterday_morning = self.get_total_today_morning
        self.get_total_today_morning = get_total
        return True

    def runtime_info(self, put_total: int, get_total: int) -> dict[str, str]:
        """The msgPutTotal* / msgGetTotal* keys of GET_BROKER_RUNTIME_INFO."""
        return {
            "msgPutTotalYesterdayMorning": str(self.put_total_yesterday_morning),
            "msgPutTotalTodayMorning": str(self.put_total_today_morning),
            "msgPutTotalTodayNow": str(put_total),
            "msgGetTotalYesterdayMorning": str(self.get_total_yesterday_morning),
            "msgGetTotalTodayMorning": str(self.get_total_today_morning),
            "msgGetTotalTodayNow": str(get_total),
        }
