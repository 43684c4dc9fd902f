"""The SDK cannot drift from the API: its types are regenerated from the schema a live server serves
and compared with the committed models.py, and every operation in the schema has its method."""

import difflib
import inspect
from pathlib import Path

import httpx
import pytest

import chime_client
from chime_client import AsyncClient, Client, _codegen
from chime_client.resources import OPERATIONS

MODELS = Path(chime_client.__file__).with_name("models.py")


@pytest.fixture(scope="module")
def schema(web):
    """The schema as the live server serves it (what a user would generate from)."""
    answer = httpx.get(f"{web.url}/api/v1/schema", params={"format": "json"}, timeout=30)
    assert answer.status_code == 200, answer.text[:300]
    return answer.json()


def test_models_py_is_what_the_served_schema_generates(schema):
    expected = _codegen.generate(schema)
    committed = MODELS.read_text()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), expected.splitlines(True), "models.py", "schema"))
    assert not diff, (
        "models.py is out of date with the API; regenerate it:\n"
        "  curl -s $CHIME_URL/api/v1/schema?format=json | python -m chime_client._codegen "
        f"> {MODELS}\n{diff}"
    )


def test_every_schema_operation_has_a_method_on_both_clients(schema):
    served = {op["operationId"] for ops in schema["paths"].values() for op in ops.values() if "operationId" in op}
    assert served == set(OPERATIONS), f"missing: {served - set(OPERATIONS)}, stale: {set(OPERATIONS) - served}"
    sync, asynchronous = Client("http://x", "k"), AsyncClient("http://x", "k")
    for dotted in OPERATIONS.values():
        resource, method = dotted.split(".")
        for client in (sync, asynchronous):
            assert callable(getattr(getattr(client, resource), method)), dotted


def test_the_methods_take_the_query_parameters_the_schema_lists(schema):
    """A list filter the API gains shows up here until the method takes it too."""
    sync = Client("http://x", "k")
    for path, ops in schema["paths"].items():
        for verb, op in ops.items():
            resource, method = OPERATIONS[op["operationId"]].split(".")
            taken = set(inspect.signature(getattr(getattr(sync, resource), method)).parameters)
            query = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"} - {"cursor"}
            assert query <= taken, f"{verb.upper()} {path}: {query - taken} not taken by {resource}.{method}"
