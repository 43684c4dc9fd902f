"""Header secrecy (apps/jobs/secrets.py): which headers are secret, values encrypted at rest with
rotation, the <redacted> placeholder, and the 0006 data migration on real PostgreSQL."""

import json
import logging
from types import SimpleNamespace

import pytest
from cryptography.fernet import Fernet
from django.apps import apps as global_apps
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from apps.jobs import secrets
from apps.jobs.models import JobDefinition, RunAttempt
from apps.jobs.secrets import REDACTED, SecretHeaderError, is_secret_header, restore_redacted
from tests.dashboard.conftest import make_run
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

HEADERS = {"Authorization": "Bearer s3cr3t-abcd", "X-Team": "billing", "X-Custom": "hush"}


@pytest.mark.parametrize(
    "name",
    ["Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "X-Auth-Token", "X-Hub-Secret",
     "X-Password", "X-Session-Id", "Private-Token", "X-Shopify-Access-Token", "apikey"],
)  # fmt: skip
def test_credential_like_names_are_secret(name):
    assert is_secret_header(name)


@pytest.mark.parametrize("name", ["X-Team", "Content-Type", "Accept", "Idempotency-Key", "Chime-Run-Id", "webhook-id"])
def test_other_names_and_chimes_own_headers_are_not(name):
    assert not is_secret_header(name)


def test_a_name_the_tenant_marks_is_secret_whatever_its_case():
    assert is_secret_header("X-Custom", ["x-custom"])


def stored_headers(job) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT target_headers::text FROM jobs_jobdefinition WHERE id = %s", [job.id])
        return json.loads(cursor.fetchone()[0])


def test_every_value_is_encrypted_at_rest_and_clear_in_python(tenant):
    job = JobFactory(tenant=tenant, target_headers=HEADERS)
    raw = stored_headers(job)
    assert set(raw) == set(HEADERS)
    assert all(value.startswith("fernet:") for value in raw.values())
    assert not any(clear in json.dumps(raw) for clear in HEADERS.values())
    assert JobDefinition.objects.get(id=job.id).target_headers == HEADERS
    assert secrets.plain_headers(JobDefinition.objects.get(id=job.id)) == HEADERS


def test_keys_rotate_new_key_first_then_the_old_one_can_go(tenant, settings, caplog):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.CHIME_FIELD_ENCRYPTION_KEYS = [old]
    job = JobFactory(tenant=tenant, target_headers=HEADERS)
    settings.CHIME_FIELD_ENCRYPTION_KEYS = [new]
    with caplog.at_level(logging.ERROR, logger="apps.jobs.secrets"):
        unreadable = JobDefinition.objects.get(id=job.id).target_headers
    assert unreadable == stored_headers(job), "a value no key opens is kept as stored, not dropped"
    assert "cannot be decrypted" in caplog.text
    assert secrets.reencrypt_target_headers() == (0, 1), "and it is not encrypted twice"

    settings.CHIME_FIELD_ENCRYPTION_KEYS = [new, old]
    assert JobDefinition.objects.get(id=job.id).target_headers == HEADERS
    assert secrets.reencrypt_target_headers() == (1, 0)
    settings.CHIME_FIELD_ENCRYPTION_KEYS = [new]
    assert JobDefinition.objects.get(id=job.id).target_headers == HEADERS


def test_without_keys_the_key_is_derived_from_secret_key(tenant, settings):
    settings.CHIME_FIELD_ENCRYPTION_KEYS = []
    job = JobFactory(tenant=tenant, target_headers=HEADERS)
    assert JobDefinition.objects.get(id=job.id).target_headers == HEADERS
    settings.SECRET_KEY = "another-secret-key"
    assert JobDefinition.objects.get(id=job.id).target_headers != HEADERS


def test_a_malformed_key_is_a_configuration_error(settings):
    settings.CHIME_FIELD_ENCRYPTION_KEYS = ["not-a-fernet-key"]
    with pytest.raises(ImproperlyConfigured, match="key 1 is not a Fernet key"):
        secrets.encrypt_value("x")


def test_the_placeholder_keeps_the_stored_value(tenant):
    job = JobFactory(tenant=tenant, target_headers=HEADERS, target_url="https://example.com/a")
    sent = {"authorization": REDACTED, "X-Team": "ops"}
    assert restore_redacted(sent, job=job, url="https://example.com/b") == {
        "authorization": "Bearer s3cr3t-abcd",
        "X-Team": "ops",
    }


def test_the_placeholder_without_a_stored_value_is_refused(tenant):
    with pytest.raises(SecretHeaderError, match="no stored value"):
        restore_redacted({"Authorization": REDACTED}, job=None, url="https://example.com/")
    job = JobFactory(tenant=tenant, target_headers={})
    with pytest.raises(SecretHeaderError, match="no stored value"):
        restore_redacted({"Authorization": REDACTED}, job=job, url="https://example.com/")


def test_a_stored_credential_does_not_follow_the_url_to_another_host(tenant):
    job = JobFactory(tenant=tenant, target_headers=HEADERS, target_url="https://example.com/a")
    with pytest.raises(SecretHeaderError, match="host changed"):
        restore_redacted({"Authorization": REDACTED}, job=job, url="https://attacker.example/a")


def migration():
    return __import__("apps.jobs.migrations.0006_header_secrecy", fromlist=["*"])


def test_the_migration_encrypts_clear_values_stored_before_it(tenant):
    job = JobFactory(tenant=tenant, target_headers={})
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_jobdefinition SET target_headers = %s WHERE id = %s", [json.dumps(HEADERS), job.id])
    assert JobDefinition.objects.get(id=job.id).target_headers == HEADERS, "clear text reads as it is"
    migration().encrypt_existing_headers(global_apps, SimpleNamespace(connection=connection))
    assert all(value.startswith("fernet:") for value in stored_headers(job).values())
    assert JobDefinition.objects.get(id=job.id).target_headers == HEADERS


def test_the_migration_redacts_secret_values_in_stored_attempts(tenant):
    run = make_run(JobFactory(tenant=tenant))
    RunAttempt.objects.filter(run=run).update(
        request_headers={
            "Authorization": "Bearer s3cr3t",
            "X-Api-Key": "k",
            "X-Team": "billing",
            "Idempotency-Key": "1",
        }
    )
    migration().redact_stored_attempts(global_apps, SimpleNamespace(connection=connection))
    assert run.attempts.get().request_headers == {
        "Authorization": REDACTED,
        "X-Api-Key": REDACTED,
        "X-Team": "billing",
        "Idempotency-Key": "1",
    }
