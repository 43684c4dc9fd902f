"""Gauges read from PostgreSQL at scrape time: what the whole system looks like now.

These are the signals an operator scales and alerts on (the seeds: "scale workers using the age
of the oldest ready run rather than queue depth"; "alert on scheduling lag"). Kept out of the
processes' own counters because they are global: computed by one query per family when
Prometheus scrapes the web process's /metrics, each bounded by a statement timeout so a slow
database makes a scrape fail fast rather than pile up.
"""

import logging

from django.db import connection, transaction
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from apps.jobs.models import RELEASABLE_DUE_SQL

logger = logging.getLogger(__name__)

PRIORITIES = ("high", "default", "low")
QUARANTINE_PREFIX = "Paused by Chime:"  # apps/scheduler/quarantine.py: every reason starts so
STATEMENT_TIMEOUT_MS = 5000

# statement_timestamp(), not now(): a scrape inside a longer transaction still measures its own instant.
# Ready = due and not yet being delivered: waiting in PostgreSQL for release (scheduled or
# retrying, available now) or on the broker (queued). Its age is now minus when it became
# available: the delay a new worker would take away.
READY_SQL = f"""
SELECT priority, count(*), EXTRACT(EPOCH FROM (statement_timestamp() - min(available_at)))
  FROM jobs_jobrun
 WHERE ({RELEASABLE_DUE_SQL.format(now="statement_timestamp()")}) OR status = 'queued'
 GROUP BY priority
"""  # noqa: S608 (fixed text, no input)
# Per partition: how overdue its most overdue active definition is (0 when nothing is due).
LAG_SQL = """
SELECT partition, EXTRACT(EPOCH FROM (statement_timestamp() - min(next_fire_at)))
  FROM jobs_jobdefinition
 WHERE status = 'active' AND next_fire_at <= statement_timestamp()
 GROUP BY partition
"""
LEASES_SQL = """
SELECT owner, count(*) FROM scheduler_schedulerlease
 WHERE owner <> '' AND expires_at > statement_timestamp() GROUP BY owner
"""
QUARANTINED_SQL = "SELECT count(*) FROM jobs_jobdefinition WHERE status = 'paused' AND status_reason LIKE %s"
LIVE_SCHEDULERS_SQL = """
SELECT count(*) FROM scheduler_schedulernode WHERE heartbeat_at > statement_timestamp() - make_interval(secs => %s)
"""


class DatabaseCollector(Collector):
    def collect(self):
        from django.conf import settings

        ready = GaugeMetricFamily(
            "chime_ready_runs", "Runs due and not yet being delivered, by priority queue.", labels=["priority"]
        )
        oldest = GaugeMetricFamily(
            "chime_oldest_ready_run_age_seconds",
            "Age of the oldest ready run, by priority queue (0 when none): the autoscaling signal.",
            labels=["priority"],
        )
        lag = GaugeMetricFamily(
            "chime_scheduler_lag_seconds",
            "How overdue the most overdue active definition of a partition is (0 when none is due).",
            labels=["partition"],
        )
        leases = GaugeMetricFamily(
            "chime_scheduler_leases_held", "Partitions leased, by scheduler.", labels=["scheduler"]
        )
        quarantined = GaugeMetricFamily(
            "chime_quarantined_jobs", "Jobs Chime paused because it could not plan or record them."
        )
        live = GaugeMetricFamily(
            "chime_live_schedulers", "Schedulers whose heartbeat is younger than CHIME_LEASE_TTL_SECONDS."
        )
        if connection.vendor != "postgresql":
            return  # embedded mode (SQLite): the processes' own metrics only
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
            rows = {p: (0, 0.0) for p in PRIORITIES}
            cursor.execute(READY_SQL)
            for priority, count, age in cursor.fetchall():
                rows[priority] = (count, max(0.0, float(age or 0)))
            for priority, (count, age) in rows.items():
                ready.add_metric([priority], count)
                oldest.add_metric([priority], age)
            partitions = {p: 0.0 for p in range(settings.CHIME_PARTITIONS)}
            cursor.execute(LAG_SQL)
            partitions.update({p: max(0.0, float(age or 0)) for p, age in cursor.fetchall()})
            for partition, age in partitions.items():
                lag.add_metric([str(partition)], age)
            cursor.execute(LEASES_SQL)
            for owner, count in cursor.fetchall():
                leases.add_metric([owner], count)
            cursor.execute(QUARANTINED_SQL, [QUARANTINE_PREFIX + "%"])
            quarantined.add_metric([], cursor.fetchone()[0])
            cursor.execute(LIVE_SCHEDULERS_SQL, [settings.CHIME_LEASE_TTL_SECONDS])
            live.add_metric([], cursor.fetchone()[0])
        yield from (ready, oldest, lag, leases, quarantined, live)
