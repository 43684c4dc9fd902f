"""Property-based fuzzing of the whole API against its own OpenAPI schema (schemathesis 4).

What `schemathesis run --checks all` does (every phase: examples, coverage, fuzzing, stateful), run
in-process through schemathesis' engine against a real HTTP server (pytest-django's live_server on
the test database), and the run must report nothing: no 5xx, every status code documented, every
body conforming, invalid data refused, valid data accepted, undeclared methods refused with
`Allow`, deleted resources gone, auth not ignored. Bounded for CI (10 examples per operation and
phase; a minute or two on a busy machine).

One check is loosened, on seven operations only, and on purpose: `positive_data_acceptance` expects
every schema-valid request to be accepted, but a schema cannot say which strings are valid cron
expressions or time zones, which URLs are public, that `run_at` belongs to `once` schedules, or
that a range's end comes after its start and a backfill's job is one of the tenant's cron jobs.
There a schema-valid body can rightly get a 400 (with a field-level message); everywhere else the
check is as strict as schemathesis makes it.
"""

import collections

import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from apps.tenants.services import api_key_create, tenant_create

EXAMPLES = 10
PHASES = ["examples", "coverage", "fuzzing", "stateful"]
SEMANTIC_BODIES = [
    "POST /api/v1/jobs",
    "POST /api/v1/jobs/batch",
    "PATCH /api/v1/jobs/{id}",
    "POST /api/v1/schedules/preview",
    "POST /api/v1/operations/replay",
    "POST /api/v1/operations/backfill",
    "POST /api/v1/operations/export",
]
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]


def fuzz_config(raw_key: str) -> SchemathesisConfig:
    config = SchemathesisConfig.from_dict(
        {
            "operations": [
                {
                    "include-name": SEMANTIC_BODIES,
                    "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
                }
            ]
        }
    )
    config.update(max_failures=None, seed=11)
    project = config.projects.override
    project.update(headers={"Authorization": f"Bearer {raw_key}"}, workers=1)
    project.phases.update(phases=PHASES)
    project.checks.update(included_check_names=["all"])
    project.generation.update(max_examples=EXAMPLES)
    return config


def describe(recorder, case_id: str, check) -> str:
    interaction = recorder.interactions.get(case_id)
    failure = check.failure_info.failure if check.failure_info else None
    sent = (
        f"{interaction.request.method} {interaction.request.uri} {interaction.request.body!r:.600}"
        if interaction
        else ""
    )
    got = (
        f"{interaction.response.status_code} {interaction.response.content[:400]!r}"
        if interaction and interaction.response
        else ""
    )
    title = f"{failure.title}: {failure.message}" if failure else check.name
    return f"[{check.name}] {title}\n  sent: {sent}\n  got:  {got}"


@pytest.mark.timeout(600)
def test_the_api_conforms_to_its_schema_under_every_check_and_the_stateful_phase(live_server, settings):
    # The fuzzer sends thousands of requests; the tenant's rates would answer 429 to most of them.
    settings.CHIME_API_RATE_LIMIT = "1000000/min"
    settings.CHIME_QUOTA_TRIGGERS_PER_MINUTE = 1000000
    key = api_key_create(tenant=tenant_create(slug="fuzz")).raw_key
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema", config=fuzz_config(key))

    problems, phases, statuses = [], {}, collections.Counter()
    for event in from_schema(schema).execute():
        if isinstance(event, (events.ScenarioFinished, events.FuzzScenarioFinished)):
            recorder = event.recorder
            statuses.update(i.response.status_code for i in recorder.interactions.values() if i.response)
            for case_id, checks in recorder.checks.items():
                problems += [describe(recorder, case_id, c) for c in checks if c.status.name != "SUCCESS"]
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            problems.append(f"[{type(event).__name__}] {getattr(event, 'label', '')}: {getattr(event, 'info', event)}")
        elif isinstance(event, events.PhaseFinished):
            phases[event.phase.name] = event.status.name

    assert not problems, "\n".join(dict.fromkeys(problems))  # each distinct report once
    assert phases.get("stateful") == "SUCCESS" and phases.get("fuzzing") == "SUCCESS", phases
    assert statuses[201] > 0 and statuses[200] > 0, statuses  # it got past validation, not only 400s
