"""The OpenAPI schema as a contract a generated client can trust (issue #11): nullable fields
declared, request bodies closed, PATCH bodies without defaults, the query bounds the server
enforces, descriptions for API users, and the response check (tests/api/contract.py) itself."""

import json

import pytest

from apps.api.schema import NO_NUL_PATTERN
from tests.api.contract import ContractViolation, check_response, schema_document

pytestmark = pytest.mark.django_db

JOB = {
    "name": "report",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "target": {"url": "https://example.com/hook"},
}


def component(name: str) -> dict:
    return schema_document()["components"]["schemas"][name]


def operations():
    for path, item in schema_document()["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def resolve(node: dict) -> dict:
    return component(node["$ref"].rsplit("/", 1)[1]) if "$ref" in node else node


def test_the_run_fields_the_server_sends_as_null_are_nullable():
    run = component("Run")["properties"]
    for name in ("finished_at", "status_reason", "coalesced"):
        assert run[name].get("nullable") is True, name
    assert component("Attempt")["properties"]["finished_at"].get("nullable") is True


def test_the_response_check_refuses_what_the_schema_does_not_allow(api):
    job = api.post("/api/v1/jobs", JOB, format="json").json()
    response = api.post(f"/api/v1/jobs/{job['id']}/trigger")
    assert response.status_code == 201 and response.json()["finished_at"] is None  # checked, and allowed
    body = response.json()
    response.content = json.dumps({**body, "attempt_count": "many"}).encode()
    with pytest.raises(ContractViolation, match="attempt_count"):
        check_response(response)
    response.content = json.dumps(body).encode()
    response.status_code = 418
    with pytest.raises(ContractViolation):
        check_response(response)


def test_every_request_body_is_closed():
    """The server refuses unknown fields (StrictSerializer); the schema says so, nested objects too."""
    seen = set()

    def walk(schema: dict, where: str):
        if "$ref" in schema:
            if schema["$ref"] in seen:
                return
            seen.add(schema["$ref"])
            schema = resolve(schema)
        for part in schema.get("allOf", []):
            walk(part, where)
        if schema.get("type") == "object" and "properties" in schema:
            assert schema.get("additionalProperties") is False, where
            for name, prop in schema["properties"].items():
                walk(prop, f"{where}.{name}")

    bodies = 0
    for path, method, operation in operations():
        for media in operation.get("requestBody", {}).get("content", {}).values():
            walk(media["schema"], f"{method.upper()} {path}")
            bodies += 1
    assert bodies >= 6  # jobs create and patch, backfill, api-keys, runs/replay, preview


def test_the_patch_body_has_no_defaults_and_requires_nothing():
    patch = schema_document()["paths"]["/api/v1/jobs/{id}"]["patch"]
    ref = patch["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/PatchedJobInputRequest"
    patched = component("PatchedJobInputRequest")
    assert not patched.get("required")
    assert {name for name, prop in patched["properties"].items() if "default" in prop} == set()
    assert component("JobInputRequest")["properties"]["priority"]["default"] == "default"  # create keeps them


def test_a_patch_of_the_name_alone_leaves_every_other_field_as_it_was(api):
    created = api.post(
        "/api/v1/jobs",
        {
            **JOB,
            "priority": "high",
            "timeout_seconds": 120,
            "misfire_policy": "skip",
            "enabled": False,
            "retry": {"max_attempts": 3, "initial_backoff_seconds": 30, "max_backoff_seconds": 600},
            "jitter_seconds": 7,
        },
        format="json",
    ).json()
    response = api.patch(f"/api/v1/jobs/{created['id']}", {"name": "renamed"}, format="json")
    assert response.status_code == 200
    after = response.json()
    assert after["name"] == "renamed"
    unchanged = ("priority", "timeout_seconds", "misfire_policy", "enabled", "status", "retry", "jitter_seconds")
    assert {k: after[k] for k in unchanged} == {k: created[k] for k in unchanged}
    assert after["status"] == "paused"


def test_list_operations_declare_the_limit_bounds_the_server_enforces(api):
    lists = []
    for path, _method, operation in operations():
        params = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
        if "limit" in params:
            assert (params["limit"]["schema"]["minimum"], params["limit"]["schema"]["maximum"]) == (1, 200), path
            lists.append(path)
    assert set(lists) == {
        *("/api/v1/jobs", "/api/v1/runs", "/api/v1/jobs/{id}/runs", "/api/v1/api-keys", "/api/v1/stats"),
        "/api/v1/archives",
        "/api/v1/operations",
    }
    for path in ("/api/v1/jobs", "/api/v1/runs", "/api/v1/api-keys", "/api/v1/archives"):
        assert [api.get(path, {"limit": n}).status_code for n in (0, 1, 200, 201)] == [400, 200, 200, 400], path


def test_run_filters_declare_their_formats():
    params = {p["name"]: p["schema"] for p in schema_document()["paths"]["/api/v1/runs"]["get"]["parameters"]}
    assert params["job"]["format"] == "uuid"
    assert params["scheduled_after"]["format"] == params["scheduled_before"]["format"] == "date-time"


DEVELOPER_WORDS = ("queryset", "Subclasses", "selector", "self.", "serializer", "apps/", "context[")


def test_every_operation_has_a_summary_and_a_description_for_api_users():
    described = 0
    for path, method, operation in operations():
        where = f"{method.upper()} {path}"
        assert operation.get("summary"), where
        text = operation.get("description", "")
        assert len(text) > 30, where
        assert not [word for word in DEVELOPER_WORDS if word in text], (where, text)
        described += 1
    assert described == 31


def test_the_schema_is_valid_openapi():
    from openapi_spec_validator import validate

    validate(schema_document())  # raises on any violation of the OpenAPI 3.0 specification


def test_the_idempotency_key_header_declares_the_length_the_server_enforces(api):
    params = schema_document()["paths"]["/api/v1/jobs"]["post"]["parameters"]
    (header,) = [p for p in params if p["name"] == "Idempotency-Key"]
    assert (header["schema"]["minLength"], header["schema"]["maxLength"]) == (1, 255)
    too_long = api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k" * 256)
    assert too_long.status_code == 400 and "Idempotency-Key" in too_long.json()["error"]["fields"]


def test_string_inputs_declare_that_nul_is_refused(api):
    """PostgreSQL cannot store U+0000 and the server refuses it (a 400): the schema says so."""
    assert component("ApiKeyInputRequest")["properties"]["name"]["pattern"] == NO_NUL_PATTERN
    (q,) = [p for p in schema_document()["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "q"]
    assert q["schema"]["pattern"] == NO_NUL_PATTERN
    assert api.get("/api/v1/jobs", {"q": "a\x00b"}).status_code == 400
    assert api.post("/api/v1/api-keys", {"name": "a\x00b"}, format="json").status_code == 400


def test_component_descriptions_are_for_api_users_too():
    for name, schema in schema_document()["components"]["schemas"].items():
        text = schema.get("description", "")
        assert not [word for word in (*DEVELOPER_WORDS, "Output only", "Rejects fields") if word in text], (name, text)
