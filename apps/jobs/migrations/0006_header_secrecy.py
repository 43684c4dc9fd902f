"""Header secrecy (apps/jobs/secrets.py): target header values encrypted at rest, the names a tenant
marks secret, and the secret values already stored in attempts redacted."""

import json
import re

from django.db import migrations, models

import apps.jobs.secrets
from apps.jobs.secrets import CHIME_SET_HEADERS, REDACTED, SECRET_HEADER_NAMES, SECRET_NAME_PARTS, is_secret_header


def encrypt_existing_headers(apps, schema_editor):
    """Rows read through the new field come back as stored (clear text has no prefix); writing
    them back through it encrypts every value."""
    JobDefinition = apps.get_model("jobs", "JobDefinition")
    for job_id, headers in (
        JobDefinition.objects.exclude(target_headers={}).values_list("id", "target_headers").iterator()
    ):
        JobDefinition.objects.filter(id=job_id).update(target_headers=headers)


def decrypt_headers(apps, schema_editor):
    JobDefinition = apps.get_model("jobs", "JobDefinition")
    table = schema_editor.quote_name(JobDefinition._meta.db_table)
    for job_id, headers in JobDefinition.objects.values_list("id", "target_headers").iterator():
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET target_headers = %s WHERE id = %s", [json.dumps(headers), job_id])


def redact_stored_attempts(apps, schema_editor):
    """Attempts recorded before this change hold the headers as sent, credentials included."""
    RunAttempt = apps.get_model("jobs", "RunAttempt")
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        names = "|".join(re.escape(name) for name in SECRET_HEADER_NAMES)
        parts = "|".join(re.escape(part) for part in SECRET_NAME_PARTS)
        pattern = f"^({names})$|{parts}"
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE jobs_runattempt SET request_headers = (
                    SELECT jsonb_object_agg(key, CASE WHEN lower(key) ~ %(pattern)s AND lower(key) <> ALL(%(chime)s)
                                                      THEN to_jsonb(%(redacted)s::text)
                                                      ELSE value END)
                    FROM jsonb_each(request_headers))
                WHERE jsonb_typeof(request_headers) = 'object' AND EXISTS (
                    SELECT 1 FROM jsonb_each(request_headers) AS h(key, value)
                    WHERE lower(key) ~ %(pattern)s AND lower(key) <> ALL(%(chime)s)
                      AND value <> to_jsonb(%(redacted)s::text))
                """,
                {"pattern": pattern, "redacted": REDACTED, "chime": sorted(CHIME_SET_HEADERS)},
            )
        return
    for attempt in RunAttempt.objects.exclude(request_headers={}).iterator():
        headers = attempt.request_headers
        if isinstance(headers, dict) and any(is_secret_header(name) for name in headers):
            attempt.request_headers = {n: REDACTED if is_secret_header(n) else v for n, v in headers.items()}
            attempt.save(update_fields=["request_headers"])


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_release_index_by_priority")]

    operations = [
        migrations.AddField(
            model_name="jobdefinition",
            name="secret_header_names",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AlterField(
            model_name="jobdefinition",
            name="target_headers",
            field=apps.jobs.secrets.EncryptedHeadersField(blank=True, default=dict),
        ),
        migrations.RunPython(encrypt_existing_headers, decrypt_headers),
        migrations.RunPython(redact_stored_attempts, migrations.RunPython.noop),
    ]
