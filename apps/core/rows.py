"""Model instances from the rows of a hand-written statement, as the ORM would build them.

The worker's claim is one `UPDATE ... RETURNING` joined to the runs' jobs (apps/jobs/transitions.py):
the ORM cannot write that statement, and building it as a queryset (a `SELECT ... FOR UPDATE`
with `select_related`, then an `UPDATE`) cost two round trips and two compilations per claim,
~6 ms of Python per claim of ~30 runs at a spike (bench/delivery_stages.py --hosts 1). A
`RowLoader` gives such a statement the model's column list and turns each returned row into an
instance through `Model.from_db` with every field's database converters applied (JSON decoding,
the target headers' decryption), so the instance is the one a queryset would have returned.
"""

from django.db import connection
from django.db.models import Model


class RowLoader:
    def __init__(self, model: type[Model]):
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        self.attnames = [field.attname for field in self.fields]
        self._converters = None

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
        values = list(values)
        for position, converters, expression in self._field_converters():
            value = values[position]
            for converter in converters:
                value = converter(value, expression, connection)
            values[position] = value
        return self.model.from_db(connection.alias, self.attnames, values)
