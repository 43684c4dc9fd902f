"""What one bench database costs PostgreSQL on a shared server: its backends' CPU and its WAL.

The machine's PostgreSQL serves every session's tests and benches at once, so the CPU of all
`postgres` processes and `pg_current_wal_lsn()` differences measure everybody. These two count only
the bench database:

- **BackendCpu**: CPU seconds (utime + stime from /proc) of the backends connected to the
  database (pg_stat_activity.datname), polled every 0.1 s by a thread of its own; a backend first
  seen after start() counts from 0 (so its connection set-up is included). A backend that exits
  loses at most its last 0.1 s; one that lives less than that is missed (`sessions` in db_stats
  says how many connections were opened). PostgreSQL's shared helpers (WAL writer, checkpointer)
  are not included.
- **WalCounter**: the WAL records that touch the database's relations (their block references
  name its OID), plus the commit records of the transactions that wrote them, read with the
  pg_walinspect extension (PostgreSQL 15+, created in the bench database) at every poll, for the
  range since the previous poll: the other sessions write so much WAL that a segment is recycled
  within a minute, so the range of a whole run cannot be read at its end.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import psycopg

_TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid: int) -> float | None:
    """CPU seconds (utime + stime) a process has used, from /proc; None once it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    return None


class BackendCpu:
    """CPU of one database's backends between start() and stop(), polled by a thread."""

    def __init__(self, dsn: str, interval: float = 0.1):
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.interval = interval
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.poll()

    def stop(self) -> float:
        self._stopping.set()
        self._thread.join(5)
        self.poll()
        self.conn.close()
        return self.seconds

    def _pids(self) -> list[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return [r[0] for r in rows]

    def start(self) -> None:
        for pid in self._pids():
            cpu = own_cpu(pid)
            if cpu is not None:
                self.first[pid] = self.last[pid] = cpu
        self._thread.start()

    def poll(self) -> None:
        for pid in self._pids():
            cpu = own_cpu(pid)
            if cpu is not None:
                self.first.setdefault(pid, 0.0)
                self.last[pid] = cpu

    @property
    def seconds(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def current_lsn(conn) -> str:
    return conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]


WAL_SQL = """
WITH recs AS (
    SELECT xid, resource_manager, record_length, fpi_length, block_ref
    FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
), mine AS (
    SELECT * FROM recs WHERE block_ref LIKE %(pattern)s
), commits AS (
    SELECT * FROM recs WHERE resource_manager = 'Transaction'
    AND xid IN (SELECT DISTINCT xid FROM mine WHERE xid <> '0')
)
SELECT count(*), coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0)
FROM (SELECT * FROM mine UNION ALL SELECT * FROM commits) AS attributed
"""


def wal_bytes(conn, start: str, end: str) -> dict[str, int]:
    """{"records", "bytes", "fpi_bytes"} this database wrote between the LSNs `start` and `end`."""
    oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    pattern = f"%/{oid}/%"
    records, total, fpi = conn.execute(WAL_SQL, {"start": start, "end": end, "pattern": pattern}).fetchone()
    return {"records": int(records), "bytes": int(total), "fpi_bytes": int(fpi)}


class WalCounter:
    """This database's WAL between start() and the last poll(), read range by range."""

    def __init__(self, conn):
        self.conn = conn
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        self.totals = {"records": 0, "bytes": 0, "fpi_bytes": 0}
        self.server_bytes = 0
        self.lost_ranges = 0
        self.last: str | None = None

    def start(self) -> None:
        self.last = current_lsn(self.conn)

    def poll(self) -> None:
        end = current_lsn(self.conn)
        if end == self.last:
            return
        try:
            got = wal_bytes(self.conn, self.last, end)
        except psycopg.errors.UndefinedFile:  # a segment recycled under us: count the range as lost
            self.lost_ranges += 1
            got = {}
        except psycopg.errors.InternalError:  # no complete record in the range yet: next poll
            return
        for key, value in got.items():
            self.totals[key] += value
        self.server_bytes += int(self.conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", [end, self.last]).fetchone()[0])
        self.last = end


STAT_COLUMNS = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted", "blks_read", "blks_hit", "sessions")


def db_stats(conn) -> dict[str, int]:
    """pg_stat_database counters of this database (flushed by PostgreSQL about once a second)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        f"SELECT {', '.join(STAT_COLUMNS)} FROM pg_stat_database WHERE datname = current_database()"  # noqa: S608
    ).fetchone()
    return dict(zip(STAT_COLUMNS, (int(v) for v in row), strict=True))


def relation_bytes(conn, tables: tuple[str, ...]) -> int:
    """Heap + indexes + TOAST of the tables."""
    return sum(conn.execute("SELECT pg_total_relation_size(%s)", [t]).fetchone()[0] for t in tables)


AUX = ("walwriter", "checkpointer", "background writer")


def aux_pids() -> list[int]:
    """PostgreSQL's WAL writer, checkpointer and background writer (shared by every database: the
    bench attributes them by its share of the server's WAL)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if title.startswith("postgres: ") and any(name in title for name in AUX):
                    pids.append(int(entry.name))
    return pids
