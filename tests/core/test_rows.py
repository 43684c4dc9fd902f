"""RowLoader: an instance built from a hand-written statement's row is the one the ORM returns.

The worker's claim (apps/jobs/transitions.py claim_free) builds its runs and jobs this way, and
every later step (the request, the attempt, the outcome) reads them; `load` skips
`Model.__init__` when nothing could tell (apps/core/rows.py), so these tests compare it with a
queryset field by field, through the converters (JSON, the encrypted headers), and check that a
`post_init` receiver still sees every instance."""

import pytest
from django.db import connection
from django.db.models.signals import post_init

from apps.core.rows import RowLoader
from apps.jobs.models import JobDefinition, JobRun
from apps.tenants.services import tenant_create
from tests.factories import JobFactory, queued_runs

pytestmark = pytest.mark.django_db


def _loaded(loader: RowLoader, table: str, pk):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {loader.columns('t')} FROM {table} t WHERE t.id = %s", [pk])  # noqa: S608 (model names)
        return loader.load(cursor.fetchone())


@pytest.fixture
def job():
    tenant = tenant_create(slug="rows")
    return JobFactory(
        tenant=tenant,
        target_headers={"Authorization": "Bearer s3cret", "X-Env": "prod"},
        secret_header_names=["Authorization"],
        target_body={"hello": ["world", 1]},
    )


def _fields(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields}


def test_a_loaded_job_equals_the_querysets_in_every_field(job):
    loaded = _loaded(RowLoader(JobDefinition), JobDefinition._meta.db_table, job.id)
    expected = JobDefinition.objects.get(id=job.id)
    assert _fields(loaded) == _fields(expected)
    assert loaded.target_headers == {"Authorization": "Bearer s3cret", "X-Env": "prod"}  # decrypted
    assert loaded.target_body == {"hello": ["world", 1]}  # decoded JSON, not text
    assert loaded._state.adding is False and loaded._state.db == "default"
    assert loaded.tenant == job.tenant  # relations resolve from the attnames


def test_a_loaded_run_saves_as_an_update_and_refreshes(job):
    run = queued_runs(job, 1)[0]
    loaded = _loaded(RowLoader(JobRun), JobRun._meta.db_table, run.id)
    assert _fields(loaded) == _fields(JobRun.objects.get(id=run.id))
    loaded.status_reason = "changed through a loaded instance"
    loaded.save(update_fields=["status_reason"])  # adding=False: an UPDATE of this row
    assert JobRun.objects.get(id=run.id).status_reason == "changed through a loaded instance"
    assert JobRun.objects.count() == 1
    assert loaded.definition == job


def test_post_init_receivers_still_see_every_loaded_instance(job):
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.target_url)

    post_init.connect(receiver, sender=JobDefinition)
    try:
        loaded = _loaded(RowLoader(JobDefinition), JobDefinition._meta.db_table, job.id)
    finally:
        post_init.disconnect(receiver, sender=JobDefinition)
    assert seen == [job.target_url]
    assert _fields(loaded) == _fields(JobDefinition.objects.get(id=job.id))


def test_load_many_reads_each_model_from_its_place_in_a_joined_row(job, django_assert_num_queries):
    """The claim's rows are a run's columns then its job's: `load_many(rows, start=...)` builds
    each from its own slice, and a run given its job that way reads it without a query."""
    runs = queued_runs(job, 3)
    run_loader, job_loader = RowLoader(JobRun), RowLoader(JobDefinition)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {run_loader.columns('r')}, {job_loader.columns('d')} FROM jobs_jobrun r"  # noqa: S608 (model names)
            " JOIN jobs_jobdefinition d ON d.id = r.definition_id ORDER BY r.id"
        )
        rows = cursor.fetchall()
    loaded_runs = run_loader.load_many(rows)
    loaded_jobs = job_loader.load_many(rows, start=len(run_loader))
    assert [_fields(r) for r in loaded_runs] == [_fields(r) for r in JobRun.objects.order_by("id")]
    assert sorted(r.id for r in loaded_runs) == sorted(r.id for r in runs)
    assert all(_fields(j) == _fields(JobDefinition.objects.get(id=job.id)) for j in loaded_jobs)
    for run, loaded_job in zip(loaded_runs, loaded_jobs, strict=True):
        JobRun.definition.field.set_cached_value(run, loaded_job)
    with django_assert_num_queries(0):
        assert [r.definition.target_headers for r in loaded_runs] == [job.target_headers] * 3


def test_a_loader_of_some_fields_leaves_the_others_deferred(job):
    loader = RowLoader(JobDefinition, ("id", "target_headers", "name"))
    assert [field.attname for field in loader.fields] == ["id", "name", "target_headers"]  # the model's order
    loaded = _loaded(loader, JobDefinition._meta.db_table, job.id)
    assert loaded.get_deferred_fields() == {f.attname for f in JobDefinition._meta.concrete_fields} - {
        "id",
        "name",
        "target_headers",
    }
    assert loaded.target_headers == {"Authorization": "Bearer s3cret", "X-Env": "prod"}  # converted
    assert loaded.created_at == job.created_at  # deferred: read with a query, still right


def test_a_loader_refuses_a_field_the_model_lacks():
    with pytest.raises(ValueError, match="JobRun has no field nope"):
        RowLoader(JobRun, ("id", "nope"))
