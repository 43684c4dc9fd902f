"""apps/api/serializers/shared.py: one serializer instance serves every request and thread, and
answers exactly as a serializer built for the call would, whatever was validated before."""

import json
import threading

import pytest
from rest_framework.exceptions import ValidationError

from apps.api.errors import flatten_errors
from apps.api.serializers.jobs import JobInputSerializer, JobSerializer, job_model_fields
from apps.api.serializers.runs import RunSerializer
from apps.api.serializers.shared import shared, validated
from apps.jobs.services import job_create

CRON = {
    "name": "nightly",
    "schedule": {"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Paris"},
    "target": {"url": "https://example.com/hook", "headers": {"X-Token": "s3cret"}, "secret_headers": ["X-Token"]},
    "retry": {"max_attempts": 3},
}
ONCE = {
    "name": "once",
    "schedule": {"type": "once", "run_at": "2030-01-01T00:00:00Z"},
    "target": {"url": "https://example.org/x", "method": "PUT", "body": {"a": 1}},
    "priority": "high",
}
BAD = [
    {"name": 7, "schedule": {"type": "cron"}, "target": {}},
    {**CRON, "surprise": True},
    {**CRON, "retry": {"max_attempts": 0}},
    {**CRON, "schedule": {"type": "cron", "expression": "61 * * * *", "timezone": "Mars/Base"}},
    [CRON],
    "a string",
    {},
    None,  # a body of JSON null: "No data provided", as is_valid words it
]


def _fresh(data):
    serializer = JobInputSerializer(data=data)
    if serializer.is_valid():
        return "valid", job_model_fields(serializer.validated_data)
    return "invalid", json.loads(json.dumps(serializer.errors))


def _shared(data):
    try:
        return "valid", job_model_fields(validated(JobInputSerializer, data))
    except ValidationError as error:
        return "invalid", json.loads(json.dumps(error.detail))


def test_one_instance_with_its_fields_built_once():
    first = shared(JobInputSerializer)
    assert shared(JobInputSerializer) is first
    assert shared(JobInputSerializer).fields is first.fields
    assert shared(JobSerializer) is not first


def test_validation_answers_as_a_fresh_serializer_in_any_order():
    # Valid and invalid bodies interleaved: nothing one call leaves behind shows in the next.
    bodies = [CRON, *BAD[:3], ONCE, *BAD[3:], CRON, BAD[0], ONCE]
    for body in bodies:
        assert _shared(body) == _fresh(body), body
    assert _shared(CRON)[0] == "valid" and _shared(BAD[0])[0] == "invalid"


def test_output_matches_a_fresh_serializer(tenant, other_tenant):
    jobs = [
        job_create(tenant=tenant, **job_model_fields(shared(JobInputSerializer).run_validation(CRON))),
        job_create(tenant=other_tenant, **job_model_fields(shared(JobInputSerializer).run_validation(ONCE))),
    ]
    for job in jobs:
        shown = shared(JobSerializer).to_representation(job)
        assert shown == JobSerializer(job).data
        assert shown["target"]["headers"].get("X-Token") in (None, "<redacted>")


def test_threads_at_once_each_get_their_own_answer():
    """Many threads validating different bodies through the one instance: each gets the answer
    for its own body (a web process serves requests on several threads)."""
    expected = {}
    for n in range(8):
        body = {**CRON, "name": f"job-{n}"} if n % 2 else {**BAD[0], "name": n}
        expected[n] = _fresh(body)
    wrong, start = [], threading.Barrier(8)

    def work(n):
        body = {**CRON, "name": f"job-{n}"} if n % 2 else {**BAD[0], "name": n}
        start.wait()
        for _ in range(300):
            got = _shared(body)
            if got != expected[n]:
                wrong.append((n, got))
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    assert expected[1][1]["name"] == "job-1" and expected[3][1]["name"] == "job-3"


def test_a_null_body_is_no_data_provided():
    assert _shared(None) == ("invalid", {"non_field_errors": ["No data provided"]}) == _fresh(None)


def test_creates_build_no_serializer(api, monkeypatch):
    """After the first create, the endpoint builds no JobInputSerializer and no JobSerializer:
    it validates and answers through the shared instances."""
    assert api.post("/api/v1/jobs", CRON, format="json").status_code == 201
    built = []
    for cls in (JobInputSerializer, JobSerializer):
        original = cls.__init__

        def counted(self, *args, _original=original, **kwargs):
            built.append(type(self))
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counted)
    for n in range(3):
        assert api.post("/api/v1/jobs", {**CRON, "name": f"again-{n}"}, format="json").status_code == 201
    assert built == []


@pytest.mark.parametrize("body", [CRON, BAD[0], BAD[1], BAD[4], None])
def test_create_over_http_answers_as_before(api, body):
    """The endpoint's status and field errors are those of a fresh serializer's verdict."""
    response = api.post("/api/v1/jobs", json.dumps(body), content_type="application/json")
    verdict, detail = _fresh(body)
    if verdict == "valid":
        assert response.status_code == 201
        assert response.json()["name"] == body["name"]
    else:
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == flatten_errors(detail)


def test_runs_answer_as_a_fresh_serializer(api, tenant):
    """A run's trigger, cancel and the run list show it as RunSerializer(run).data did."""
    from apps.jobs.models import JobRun

    job = api.post("/api/v1/jobs", CRON, format="json").json()
    triggered = api.post(f"/api/v1/jobs/{job['id']}/trigger")
    assert triggered.status_code == 201
    run = JobRun.objects.get(id=triggered.json()["id"])
    assert triggered.json() == as_json(RunSerializer(run).data)
    cancelled = api.post(f"/api/v1/runs/{run.id}/cancel")
    assert cancelled.status_code == 200
    run.refresh_from_db()
    assert cancelled.json() == as_json(RunSerializer(run).data) and cancelled.json()["status"] == "cancelled"
    listed = api.get(f"/api/v1/jobs/{job['id']}/runs").json()["results"]
    assert listed == [as_json(RunSerializer(run).data)]


def as_json(data):
    return json.loads(json.dumps(data))
