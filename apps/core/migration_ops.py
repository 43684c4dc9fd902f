"""Index operations that are CONCURRENTLY on PostgreSQL and plain elsewhere.

django.contrib.postgres' AddIndexConcurrently / RemoveIndexConcurrently call PostgreSQL-only
schema editor arguments, so on SQLite (embedded mode, `./chime run` on a fresh machine) the
migration failed: `add_index() got an unexpected keyword argument 'concurrently'`. SQLite has no
concurrent writers to spare from a lock, so there the plain operation is the same thing.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations


def _postgres(schema_editor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


class AddIndexConcurrentlyOnPostgres(AddIndexConcurrently):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if _postgres(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if _postgres(schema_editor):
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class RemoveIndexConcurrentlyOnPostgres(RemoveIndexConcurrently):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if _postgres(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if _postgres(schema_editor):
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
