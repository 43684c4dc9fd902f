"""Which due runs to release next: fair across tenants, bounded by what the queues already hold.

Two rules (docs/operations.md#fairness-between-tenants):

1. Backpressure per priority tier: a tier's queue holds at most CHIME_MAX_QUEUED_RUNS runs in
   `queued` (that the broker can still deliver); the rest of a burst waits in PostgreSQL.
   Counting is cheap because it is bounded.
   A tier is topped up once CHIME_RELEASE_MIN_ROOM (a fraction, a quarter by default) of its
   budget is free, or once CHIME_RELEASE_MAX_WAIT_SECONDS (1 s) passed since its last top-up with
   any room at all: each release pays fixed costs (the counts, the tenant scan, the candidates
   query: ~50-90 ms of database time per tick at a 100,000 backlog on the bench machine), and
   during a spike a tier topped up on every tick took 100-300 runs a time, ~0.3-0.45 ms of
   database CPU per run released. The wait bounds what a queue that drains slowly (a tenant's
   flood parked behind a slow endpoint) costs the other tenants' runs waiting for room: a second.
2. Round-robin across tenants: tier by tier (high first), a release batch takes an equal share
   from every tenant with due runs, then the first run of every tenant, the second, ...

So a tenant's 100 runs due at the same minute as another tenant's 50,000 go out in the first
batch, and then wait behind at most CHIME_MAX_QUEUED_RUNS runs in the queue.
"""

import math
import time
from collections import Counter
from datetime import datetime

from django.conf import settings
from django.db import connection

from apps.jobs.models import JobRun, Priority, RunStatus

RELEASABLE = (RunStatus.SCHEDULED, RunStatus.RETRYING)


def queue_budgets(now: datetime) -> dict[str, int]:
    """How many more runs each priority tier's queue may take now.

    Counts only runs the broker can still deliver: a run `queued` for longer than
    CHIME_REQUEUE_AFTER is presumed lost with its message (the requeue sweep publishes it again,
    and then it counts again), so runs stranded by a lost broker or a crashed publisher cannot
    hold the tier's budget and starve every other tenant. (A broker that came back empty is
    noticed sooner, by its epoch: apps/delivery/enqueue.py.)
    """
    limit = settings.CHIME_MAX_QUEUED_RUNS
    deliverable_since = now - settings.CHIME_REQUEUE_AFTER
    budgets = {}
    for priority in Priority.values:
        queued = JobRun.objects.filter(
            status=RunStatus.QUEUED, priority=priority, queued_at__gte=deliverable_since
        ).values("id")[:limit]
        budgets[priority] = limit - queued.count()
    return budgets


def fair_selection(partitions: list[int], *, now: datetime, batch_size: int) -> list[tuple]:
    """(id, priority) of up to `batch_size` runs to release: tier by tier (high first), each
    within its queue budget, round-robin across tenants inside a tier."""
    budgets = queue_budgets(now)
    chosen: list[tuple] = []
    tenants_by_tier = None  # read once, and only if some tier is worth topping up
    for priority in Priority.values:  # high, default, low
        room = min(budgets[priority], batch_size - len(chosen))
        if room <= 0 or not _worth_topping_up(priority, budgets[priority]):
            continue
        if connection.vendor == "postgresql":
            if tenants_by_tier is None:
                tenants_by_tier = _releasable_tenants_by_tier()
            tenants = tenants_by_tier.get(priority)
            if not tenants:
                continue  # nothing releasable in this tier: no candidates query
            candidates = _candidates_postgresql(partitions, tenants, priority=priority, now=now, batch_size=room)
        else:
            candidates = _candidates_portable(partitions, priority=priority, now=now, batch_size=room)
        if candidates:
            _topped_up[priority] = time.monotonic()
        chosen.extend((run_id, priority) for run_id, _tenant, _rank in candidates[:room])
    return chosen


# When this process last topped each tier up (time.monotonic()).
_topped_up: dict[str, float] = {}


def _worth_topping_up(priority: str, free: int) -> bool:
    """A quarter of the tier's budget free, or a second since its last top-up (rule 1 above)."""
    if free >= max(int(settings.CHIME_MAX_QUEUED_RUNS * settings.CHIME_RELEASE_MIN_ROOM), 1):
        return True
    last = _topped_up.setdefault(priority, time.monotonic())
    return time.monotonic() - last >= settings.CHIME_RELEASE_MAX_WAIT_SECONDS


# Distinct (tenant, tier) pairs with releasable runs, by a skip scan over
# jobrun_tenant_releasable_idx (tenant, priority, available_at): one index probe per pair instead
# of reading every due row. One scan serves every tier of a release: it used to be one scan of
# tenants per tier, and the tiers a spike leaves empty (high, low) each paid the whole scan again.
TENANTS_SQL = """
WITH RECURSIVE pairs(tenant_id, priority) AS (
    (SELECT tenant_id, priority FROM jobs_jobrun WHERE status IN ('scheduled', 'retrying')
      ORDER BY tenant_id, priority LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.priority
      FROM pairs p CROSS JOIN LATERAL (
          SELECT r.tenant_id, r.priority FROM jobs_jobrun r
           WHERE r.status IN ('scheduled', 'retrying') AND (r.tenant_id, r.priority) > (p.tenant_id, p.priority)
           ORDER BY r.tenant_id, r.priority LIMIT 1
      ) AS n
)
SELECT tenant_id, priority FROM pairs
"""


def _releasable_tenants_by_tier() -> dict[str, list]:
    """{priority: [tenant_id, ...]} of the tenants with releasable runs in each tier (due or not)."""
    by_tier: dict[str, list] = {}
    with connection.cursor() as cursor:
        cursor.execute(TENANTS_SQL)
        for tenant_id, priority in cursor.fetchall():
            by_tier.setdefault(priority, []).append(tenant_id)
    return by_tier


# Each tenant's oldest due runs of one tier: an index range scan of jobrun_tenant_releasable_idx
# (tenant, priority, available_at) per tenant that stops after LIMIT rows, however deep the
# backlog. No window function here: row_number() OVER (ORDER BY available_at) must read every
# peer of a tie before it returns, and a spike is one big tie (all of a tenant's runs due at the
# same instant), so it read the whole backlog (EXPLAIN ANALYZE, 2,000 rows at a 100,000 backlog:
# 71 ms with it, 1.4 ms without). The rank is the row's place in its tenant's list, counted in Python.
CANDIDATES_SQL = """
SELECT x.id, x.tenant_id
  FROM unnest(%(tenants)s::uuid[]) AS t(tenant_id)
  CROSS JOIN LATERAL (
      SELECT r.id, r.tenant_id
        FROM jobs_jobrun r
       WHERE r.tenant_id = t.tenant_id AND r.priority = %(priority)s AND r.status IN ('scheduled', 'retrying')
         AND r.available_at <= %(now)s AND r.partition = ANY(%(partitions)s)
       ORDER BY r.available_at
       OFFSET %(skip)s LIMIT %(per_tenant)s
  ) AS x
"""


def _candidates_postgresql(
    partitions: list[int], tenants: list, *, priority: str, now: datetime, batch_size: int
) -> list[tuple]:
    """An equal share from every tenant of the tier; if some have fewer due runs than their
    share, one more round takes the rest of the batch from the tenants that filled theirs.
    Returns (id, tenant_id, rank within the tenant), the 1st of every tenant first, then the 2nd, ..."""
    sql = CANDIDATES_SQL
    with connection.cursor() as cursor:
        share = max(math.ceil(batch_size / len(tenants)), 1)
        params = {"now": now, "partitions": partitions, "priority": priority}
        cursor.execute(sql, {**params, "tenants": tenants, "per_tenant": share, "skip": 0})
        candidates = _ranked(cursor.fetchall(), skip=0)
        per_tenant = Counter(row[1] for row in candidates)
        full = [tenant for tenant, n in per_tenant.items() if n == share]
        missing = batch_size - len(candidates)
        if missing > 0 and full:
            more = math.ceil(missing / len(full))
            cursor.execute(sql, {**params, "tenants": full, "per_tenant": more, "skip": share})
            candidates += _ranked(cursor.fetchall(), skip=share)
        candidates.sort(key=lambda row: (row[2], str(row[1])))  # 1st of every tenant, then 2nd, ...
        return candidates


def _ranked(rows: list[tuple], *, skip: int) -> list[tuple]:
    """(id, tenant_id) -> (id, tenant_id, rank), rank counted from skip + 1 in the order the rows
    come: a LATERAL subquery is run once per tenant (a parameterized nested loop, whatever the
    plan), so each tenant's rows arrive in its ORDER BY."""
    rank: Counter = Counter()
    out = []
    for run_id, tenant_id in rows:
        rank[tenant_id] += 1
        out.append((run_id, tenant_id, skip + rank[tenant_id]))
    return out


def _candidates_portable(partitions: list[int], *, priority: str, now: datetime, batch_size: int) -> list[tuple]:
    """Embedded mode (SQLite): the same order, computed in Python over a bounded scan."""
    rows = (
        JobRun.objects.filter(status__in=RELEASABLE, priority=priority, available_at__lte=now, partition__in=partitions)
        .order_by("available_at")
        .values_list("id", "tenant_id")[: batch_size * 10]
    )
    rank: Counter = Counter()
    ranked = []
    for run_id, tenant_id in rows:
        rank[tenant_id] += 1
        ranked.append((run_id, tenant_id, rank[tenant_id]))
    ranked.sort(key=lambda row: row[2])
    return ranked
