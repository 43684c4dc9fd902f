"""Reading `timestamptz` at C speed.

Django's psycopg 3 backend loads every `timestamptz` value through its own `BaseTzLoader`, a
Python subclass of psycopg's *pure-Python* `TimestamptzLoader` (django/db/backends/postgresql/
psycopg_any.py) whose `load()` parses the text in Python and then sets the tzinfo again. psycopg's
binary package has the same loader in C; Django's subclass bypasses it. Measured on the bench
machine (issue #12): ~11 µs per value against ~1 µs, i.e. a run row read with its job (13
timestamps) cost ~140 µs of worker CPU before any of Chime's own code ran, and every API list, page
and scheduler query paid the same per timestamp.

The C loader gives the same value: it converts to the session's `TimeZone` (Django sets that to
its connection timezone, UTC here) and, for UTC, returns `datetime.timezone.utc` as its tzinfo,
which is what Django's loader sets. Django checks `loader.timezone` on every cursor to decide
whether to register its own loader again, so the loader registered here (a thin Python loader
around the C one, which cannot be subclassed) carries that attribute.
"""

from datetime import UTC

from django.db.backends.signals import connection_created
from psycopg.adapt import Loader
from psycopg.pq import Format

try:  # psycopg's C implementation (psycopg[binary]); without it Django's loader stays
    from psycopg_binary._psycopg import TimestamptzLoader as _CTimestamptzLoader
except ImportError:  # pragma: no cover - the pinned requirements install psycopg-binary
    _CTimestamptzLoader = None


if _CTimestamptzLoader is not None:

    class UtcTimestamptzLoader(Loader):
        """psycopg's C `timestamptz` loader behind the attribute Django's backend reads (the C
        class cannot be subclassed: a Python call per value, ~0.3 µs, is the price)."""

        timezone = UTC

        def __init__(self, oid, context=None):
            super().__init__(oid, context)
            self.load = _CTimestamptzLoader(oid, context).load

        def load(self, data):  # abstract in Loader; each instance's is the C loader's (above)  # pragma: no cover
            raise NotImplementedError

else:  # pragma: no cover
    UtcTimestamptzLoader = None


def use_c_timestamptz_loader(sender, connection, **kwargs) -> None:
    """connection_created: on a PostgreSQL connection whose timezone is UTC, load `timestamptz`
    with the C loader. Another timezone keeps Django's loader (Chime runs with UTC: config/settings)."""
    if connection.vendor != "postgresql" or UtcTimestamptzLoader is None or connection.timezone != UTC:
        return
    adapters = connection.connection.adapters
    if adapters.get_loader(adapters.types["timestamptz"].oid, Format.TEXT) is not UtcTimestamptzLoader:
        adapters.register_loader("timestamptz", UtcTimestamptzLoader)


def install() -> None:
    connection_created.connect(use_c_timestamptz_loader, dispatch_uid="chime-c-timestamptz-loader")
