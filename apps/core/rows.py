"""Model instances from the rows of a hand-written statement, as the ORM would build them.

The worker's claim is one `UPDATE ... RETURNING` joined to the runs' jobs (apps/jobs/transitions.py):
the ORM cannot write that statement, and building it as a queryset (a `SELECT ... FOR UPDATE`
with `select_related`, then an `UPDATE`) cost two round trips and two compilations per claim,
~6 ms of Python per claim of ~30 runs at a spike (bench/delivery_stages.py --hosts 1). A
`RowLoader` gives such a statement the model's column list and turns each returned row into an
instance through `Model.from_db` with every field's database converters applied (JSON decoding,
the target headers' decryption), so the instance is the one a queryset would have returned.

A loader may load some of the fields only (`fields`), as `.only()` would: the others are deferred
(not in the instance's `__dict__`; Django's descriptor reads one on first access, with a query).

`load` builds the instance the way `Model.__init__` would for a full row from the database, minus
its per-field loop: the values go into the instance's `__dict__` under their attnames (what each
field's descriptor would store) and `_state` says "loaded from this database". `Model.__init__`
was ~4 % of a worker process's CPU in a spike (py-spy --gil, issue #12, seventh session), two
instances per claimed run. Only where nothing could tell the difference: the model does not
override `__init__` or `from_db`, and no `pre_init` / `post_init` receiver listens to it (checked
at each load: a receiver may connect later); otherwise `Model.from_db`, as before.
"""

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init


class RowLoader:
    def __init__(self, model: type[Model], fields: tuple[str, ...] | None = None):
        """`fields`: the attnames to load (in any order; columns() gives them in the model's),
        the others left deferred, as `.only()` leaves them: reading one later costs a query."""
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        if fields is not None:
            unknown = set(fields) - {field.attname for field in self.fields}
            if unknown:
                raise ValueError(f"{model.__name__} has no field {', '.join(sorted(unknown))}")
            self.fields = [field for field in self.fields if field.attname in fields]
        self.attnames = [field.attname for field in self.fields]
        self._converters = None
        self._plain = model.__init__ is Model.__init__ and model.from_db.__func__ is Model.from_db.__func__

    def columns(self, alias: str) -> str:
        """The model's columns, in `from_db` order, qualified by `alias`: for a SELECT or RETURNING list."""
        return ", ".join(f'{alias}."{field.column}"' for field in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def _field_converters(self) -> list[tuple[int, list, object]]:
        """(position, converters, expression) for the fields that have converters on this backend,
        as SQLCompiler.get_converters finds them; computed once (the connection's vendor is fixed)."""
        if self._converters is None:
            found = []
            for position, field in enumerate(self.fields):
                expression = field.get_col(self.model._meta.db_table)
                converters = connection.ops.get_db_converters(expression) + expression.get_db_converters(connection)
                if converters:
                    found.append((position, converters, expression))
            self._converters = found
        return self._converters

    def load(self, values) -> Model:
        """An instance from the model's columns in `columns()` order (a slice of a returned row)."""
        return self.load_many([values])[0]

    def load_many(self, rows, start: int = 0) -> list[Model]:
        """An instance per row, from the model's columns at `start` of each row (in `columns()`
        order). What does not change from row to row (the connection behind Django's proxy, the
        converters, whether a signal listens) is looked up once per call, not per row: per row
        those lookups were ~3 % of a worker process's CPU in a spike (py-spy --gil, issue #12)."""
        conn = connections[DEFAULT_DB_ALIAS]
        model, attnames, stop = self.model, self.attnames, start + len(self.attnames)
        converters = self._field_converters()
        plain = self._plain and not pre_init.has_listeners(model) and not post_init.has_listeners(model)
        instances = []
        for row in rows:
            values = list(row[start:stop])
            for position, field_converters, expression in converters:
                value = values[position]
                for converter in field_converters:
                    value = converter(value, expression, conn)
                values[position] = value
            if not plain:
                instances.append(model.from_db(conn.alias, attnames, values))
                continue
            instance = model.__new__(model)
            instance.__dict__.update(zip(attnames, values, strict=True))
            state = instance._state = ModelState()
            state.adding, state.db = False, conn.alias
            instances.append(instance)
        return instances
