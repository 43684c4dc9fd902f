"""Partition ownership through lease rows with an expiry and a fencing epoch.

Not advisory locks: those belong to one database session, which a pooler or a reconnect can
silently drop. A lease row survives that, expires by itself when its owner dies, and its epoch
fences a process that wakes up late (see SchedulerLease).

Times come from the database clock (`Now()`), so schedulers on hosts with skewed clocks agree.
"""

import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from apps.core.ids import uuid7

from .models import SchedulerLease, SchedulerNode

logger = logging.getLogger("apps.scheduler")


# The lease rows this process still holds at the epochs it acquired them, changed in one statement.
FENCED_SQL = """
UPDATE scheduler_schedulerlease AS l
   SET {assignments}
  FROM unnest(%(partitions)s::int[], %(epochs)s::bigint[]) AS h(partition, epoch)
 WHERE l.partition = h.partition AND l.epoch = h.epoch AND l.owner = %(owner)s AND l.expires_at > now()
RETURNING l.partition
"""


def new_owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid7().hex[-8:]}"


def ensure_lease_rows() -> None:
    SchedulerLease.objects.bulk_create(
        [
            SchedulerLease(partition=p, owner="", epoch=0, expires_at=timezone.now() - timedelta(days=1))
            for p in range(settings.CHIME_PARTITIONS)
        ],
        ignore_conflicts=True,
    )


@dataclass
class LeaseKeeper:
    """The partitions one scheduler process holds, kept fresh by `refresh()` every few seconds.

    Pinned (`--shard i --shards n`): take every partition of the slice that is free. Unpinned:
    take free partitions up to a fair share (partitions / live schedulers), and give back extras
    when more schedulers join, so load spreads without a coordinator.
    """

    candidates: list[int]
    pinned: bool
    owner: str = field(default_factory=new_owner_id)
    ttl: timedelta = field(default_factory=lambda: timedelta(seconds=settings.CHIME_LEASE_TTL_SECONDS))
    held: dict[int, int] = field(default_factory=dict)  # partition -> epoch
    resting_until: float = 0.0  # time.monotonic(): standing down (see stand_down) until then

    @property
    def partitions(self) -> list[int]:
        return sorted(self.held)

    def fence(self) -> Q:
        """Matches the lease rows this process still owns, at the epoch it acquired them (the
        portable form: on PostgreSQL the renewal and the release join `unnest` arrays instead,
        FENCED_SQL, since one Q per held partition cost ~3 ms of query building per refresh)."""
        fence = Q(pk__in=[])
        for partition, epoch in self.held.items():
            fence |= Q(partition=partition, epoch=epoch)
        return fence & Q(owner=self.owner, expires_at__gt=Now())

    @property
    def resting(self) -> bool:
        return time.monotonic() < self.resting_until

    def refresh(self, *, lag_ms: int = 0) -> None:
        if self.resting:
            if self._another_scheduler_alive():
                return  # no heartbeat either: others count this process out of the fair share
            # Nobody to hand over to: resting would only stall every partition. Try again.
            self.resting_until = 0.0
        ensure_lease_rows()  # idempotent; also heals a table someone emptied
        SchedulerNode.objects.update_or_create(
            owner=self.owner,
            defaults={"heartbeat_at": Now(), "lag_ms": lag_ms, "pinned_slice": "pinned" if self.pinned else ""},
            create_defaults={"heartbeat_at": Now(), "started_at": Now(), "lag_ms": lag_ms},
        )
        self._renew()
        self._acquire_or_release()

    def _fenced(self, assignments: str, params: dict) -> set[int]:
        """One UPDATE of the lease rows still held at their epoch (PostgreSQL); returns their partitions."""
        held = sorted(self.held.items())
        with connection.cursor() as cursor:
            cursor.execute(
                FENCED_SQL.format(assignments=assignments),
                {
                    **params,
                    "partitions": [p for p, _ in held],
                    "epochs": [e for _, e in held],
                    "owner": self.owner,
                },
            )
            return {row[0] for row in cursor.fetchall()}

    def _renew(self) -> None:
        if not self.held:
            return
        if connection.vendor == "postgresql":
            # The UPDATE locks each row and rechecks the fence on it: the same as locking the
            # fenced rows, then extending them, in one statement.
            kept = self._fenced("expires_at = now() + %(ttl)s", {"ttl": self.ttl})
            self.held = {p: e for p, e in self.held.items() if p in kept}
            return
        with transaction.atomic():
            kept = set(
                SchedulerLease.objects.select_for_update().filter(self.fence()).values_list("partition", flat=True)
            )
            SchedulerLease.objects.filter(partition__in=kept, owner=self.owner).update(expires_at=Now() + self.ttl)
        self.held = {p: e for p, e in self.held.items() if p in kept}

    def _another_scheduler_alive(self) -> bool:
        return SchedulerNode.objects.filter(heartbeat_at__gt=Now() - self.ttl).exclude(owner=self.owner).exists()

    def _fair_share(self) -> int:
        if self.pinned:
            return len(self.candidates)
        live = (
            SchedulerNode.objects.filter(heartbeat_at__gt=Now() - self.ttl, pinned_slice="")
            .exclude(owner=self.owner)
            .count()
            + 1
        )
        return math.ceil(len(self.candidates) / live)

    def _acquire_or_release(self) -> None:
        share = self._fair_share()
        if len(self.held) > share:
            extra = sorted(self.held)[share:]
            SchedulerLease.objects.filter(partition__in=extra, owner=self.owner).update(
                owner="", expires_at=Now() - timedelta(seconds=1)
            )
            for partition in extra:
                del self.held[partition]
            return
        want = share - len(self.held)
        if want <= 0:
            return
        with transaction.atomic():
            free = list(
                SchedulerLease.objects.select_for_update(skip_locked=True)
                .filter(partition__in=self.candidates, expires_at__lte=Now())
                .exclude(partition__in=list(self.held))
                .order_by("partition")
                .values_list("partition", flat=True)[:want]
            )
            if free:
                SchedulerLease.objects.filter(partition__in=free, expires_at__lte=Now()).update(
                    owner=self.owner, epoch=F("epoch") + 1, expires_at=Now() + self.ttl, acquired_at=Now()
                )
                for partition, epoch in SchedulerLease.objects.filter(partition__in=free, owner=self.owner).values_list(
                    "partition", "epoch"
                ):
                    self.held[partition] = epoch

    def stand_down(self, *, seconds: float) -> None:
        """Give every partition back now and take none for `seconds` (or until no other scheduler
        is alive): a scheduler whose steps keep failing would otherwise renew its leases while doing
        no work, and its partitions would never fire. Raises if the database cannot be reached
        (then the leases expire by themselves)."""
        self.release_all()
        self.resting_until = time.monotonic() + seconds

    def release_all(self) -> None:
        """On clean shutdown: hand partitions over at once instead of waiting for expiry."""
        if connection.vendor == "postgresql":
            if self.held:
                self._fenced("owner = '', expires_at = now() - interval '1 second'", {})
        else:
            SchedulerLease.objects.filter(self.fence()).update(owner="", expires_at=Now() - timedelta(seconds=1))
        SchedulerNode.objects.filter(owner=self.owner).delete()
        self.held = {}


@dataclass
class StepFailures:
    """Failed scheduler steps in a row, and what to do about them.

    After `limit` failures in a row the scheduler stands down (LeaseKeeper.stand_down) for
    `rest_seconds`, doubled on each stand-down without a working step in between (up to
    `max_rest_seconds`), so a healthy scheduler takes its partitions over and a broken one does
    not take them back every few seconds. If the release itself fails (the database is away),
    nothing changes: leases expire on their own and no other scheduler could do better.
    """

    limit: int
    rest_seconds: float
    max_rest_seconds: float
    in_a_row: int = 0
    stand_downs: int = 0

    @classmethod
    def from_settings(cls) -> "StepFailures":
        return cls(
            limit=settings.CHIME_SCHEDULER_MAX_FAILED_STEPS,
            rest_seconds=settings.CHIME_SCHEDULER_STAND_DOWN_SECONDS,
            max_rest_seconds=settings.CHIME_SCHEDULER_MAX_STAND_DOWN_SECONDS,
        )

    def succeeded(self, *, worked: bool) -> None:
        """A step went through; `worked`: it materialized or released something."""
        self.in_a_row = 0
        if worked:
            self.stand_downs = 0

    def failed(self, leases: LeaseKeeper) -> float | None:
        """Count a failed step; returns the rest in seconds if the scheduler stood down."""
        self.in_a_row += 1
        if self.limit <= 0 or self.in_a_row < self.limit or not leases.held:
            return None
        rest = min(self.rest_seconds * 2**self.stand_downs, self.max_rest_seconds)
        partitions = len(leases.held)
        try:
            leases.stand_down(seconds=rest)
        except Exception:
            logger.warning("could not release partitions after %d failed steps", self.in_a_row, exc_info=True)
            return None
        logger.error(
            "%d scheduler steps failed in a row: released %d partitions for another scheduler to take; "
            "taking none for %.0f s",
            self.in_a_row,
            partitions,
            rest,
        )
        self.in_a_row = 0
        self.stand_downs += 1
        return rest
