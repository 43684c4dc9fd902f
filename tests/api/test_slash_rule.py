"""One slash rule for every /api/v1/ path: no trailing slash. With one, any method gets the API's JSON
404, and its message names the path without the slash. The URL conf is walked, so a route added
later is held to the rule too."""

import uuid

import pytest
from django.urls import resolve

from tests.api.test_isolation import api_routes, path_for

pytestmark = pytest.mark.django_db

IDS = {"job": str(uuid.uuid4()), "run": str(uuid.uuid4()), "api-key": str(uuid.uuid4()), "archive": str(uuid.uuid4()),
       "operation": str(uuid.uuid4())}  # fmt: skip


def routes():
    """(route name, concrete path, methods) for every route but the catch-all."""
    return [
        (name, path_for(template, name, IDS), methods)
        for name, template, methods in api_routes()
        if name != "api:not-found"
    ]


def test_every_route_is_walked():
    names = {name for name, _, _ in routes()}
    assert {"api:job-list", "api:run-replay", "api:signing-secret-rotate", "api:schema", "api:docs"} <= names
    assert len(names) >= 19


def test_no_route_has_a_trailing_slash():
    for name, path, _ in routes():
        assert not path.endswith("/"), path
        assert resolve(path).view_name == name, path


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_a_trailing_slash_is_a_json_404_that_names_the_right_path(api, method):
    for _, path, _ in routes():
        response = api.generic(method, path + "/", "{}", content_type="application/json")
        assert response.status_code == 404, (method, path, response.status_code)
        error = response.json()["error"]
        assert error["code"] == "not_found"
        assert error["message"].endswith(f"use {path}"), (method, path, error)


def test_schema_and_docs_answer_without_the_slash(client):
    schema = client.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert "/api/v1/jobs" in schema.json()["paths"]
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200
    assert b'"/api/v1/schema"' in docs.content or b"/api/v1/schema'" in docs.content  # what Swagger UI loads


def test_an_unknown_path_is_still_a_plain_json_404(api):
    for path in ("/api/v1/nothing-here", "/api/v1/nothing-here/", "/api/v1/jobs/x/y/z/"):
        response = api.get(path)
        assert response.status_code == 404
        assert response.json()["error"] == {"code": "not_found", "message": "No such API endpoint."}
