"""A Python client generated from Chime's OpenAPI schema by openapi-python-client, as an API user
would generate one, and a checked way to call it.

The generated models are strict where the schema is: a field declared required and non-null that
the server sends as `null` makes the generated parser raise, and a PATCH model whose fields carry
schema defaults sends those defaults. So driving the API through such a client tests the schema as
a contract, which validating responses against the schema alone does not (it cannot see defaults).
"""

import importlib
import json
import subprocess
import sys
import types
import typing
from contextlib import contextmanager
from pathlib import Path

import attrs
import httpx

VENV_BIN = Path(sys.executable).parent  # openapi-python-client, and the ruff it runs on its output
PACKAGE = "chime_openapi"  # not chime_client: that is the SDK (clients/python), on the same path


def generate(schema: bytes, into: Path, package: str = PACKAGE) -> Path:
    """Write the client package for `schema` (JSON or YAML bytes) to into/package; offline, a few
    seconds. --fail-on-warning: a part of the schema the generator cannot read (and would silently
    leave out of the client) fails the test instead."""
    (into / "openapi.json").write_bytes(schema)
    (into / "config.yml").write_text(f"package_name_override: {package}\nproject_name_override: {package}\n")
    result = subprocess.run(
        [
            *(VENV_BIN / "openapi-python-client", "generate", "--meta", "none", "--fail-on-warning"),
            *("--path", into / "openapi.json", "--config", into / "config.yml", "--output-path", into / package),
        ],
        env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(into)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"openapi-python-client failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return into / package


@contextmanager
def imported(package_dir: Path):
    """Import the generated package (and only for the block: it leaves sys.path and sys.modules
    as they were, so a second generation in the same session imports its own code)."""
    name = package_dir.name
    sys.path.insert(0, str(package_dir.parent))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(package_dir.parent))
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


def body_model(endpoint: types.ModuleType) -> type:
    """The generated model an operation takes as its body, read from its signature (so the test
    does not depend on the name drf-spectacular gives the serializer's component)."""
    hint = typing.get_type_hints(endpoint.sync_detailed)["body"]
    options = [t for t in typing.get_args(hint) or (hint,) if t.__name__ != "Unset"]
    assert len(options) == 1, f"{endpoint.__name__} takes one of several bodies: {options}"
    return options[0]


def undeclared(value, path: str = "$") -> list[str]:
    """Paths of fields the server sent that the schema does not declare: the generated models keep
    them in `additional_properties`, where no user of the client looks. Free-form objects (header
    maps, a job's body) are models with no declared field; their keys are data, not fields."""
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in undeclared(item, f"{path}[{i}]")]
    if not attrs.has(type(value)):
        return []
    declared = [f.name for f in attrs.fields(type(value)) if f.name != "additional_properties"]
    sent = getattr(value, "additional_properties", {})  # absent from a model the schema closes
    found = [f"{path}.{name}" for name in sent] if declared else []
    for name in declared:
        found += undeclared(getattr(value, name), f"{path}.{name}")
    return found


class ParseError(AssertionError):
    """A response the generated client could not parse: the schema does not describe it."""


class CheckedClient:
    """The generated AuthenticatedClient with every exchange recorded. `call` and `refused` check
    the status, that the body parsed into the generated model the schema gives that status (a
    success model, or Error), and that the model holds every field the server sent."""

    def __init__(self, package: types.ModuleType, base_url: str, token: str, headers: dict[str, str]):
        self.package = package
        self.last_request: httpx.Request | None = None
        self.last_response: httpx.Response | None = None
        self.client = package.AuthenticatedClient(
            base_url=base_url,
            token=token,
            headers=headers,
            raise_on_unexpected_status=True,  # a status the schema does not list is an error too
            timeout=httpx.Timeout(30),
            httpx_args={"event_hooks": {"request": [self._request], "response": [self._response]}},
        )

    def _request(self, request: httpx.Request) -> None:
        self.last_request = request

    def _response(self, response: httpx.Response) -> None:
        response.read()
        self.last_response = response

    def endpoint(self, operation: str) -> types.ModuleType:
        """The generated module of an operation, e.g. "jobs.jobs_partial_update"."""
        return importlib.import_module(f"{self.package.__name__}.api.{operation}")

    def sent_json(self):
        return json.loads(self.last_request.content) if self.last_request and self.last_request.content else None

    def call(self, operation: str, status: int, **kwargs):
        """The parsed body of `operation`, which must answer `status` with its success model."""
        parsed = self._send(operation, status, kwargs)
        assert not isinstance(parsed, self.package.models.Error), f"{self._exchange()}: parsed as an error"
        return parsed

    def refused(self, operation: str, status: int, **kwargs):
        """The parsed error body of `operation`, which must refuse with `status`."""
        parsed = self._send(operation, status, kwargs)
        assert isinstance(parsed, self.package.models.Error), f"{self._exchange()}: not parsed as an error"
        return parsed.error

    def _send(self, operation: str, status: int, kwargs: dict):
        try:
            response = self.endpoint(operation).sync_detailed(client=self.client, **kwargs)
        except (KeyError, TypeError, ValueError, AttributeError) as error:  # raised by the generated parser
            raise ParseError(f"{self._exchange()}: the generated client cannot parse this body: {error!r}") from error
        assert response.status_code == status, f"{self._exchange()}: expected {status}"
        extra = undeclared(response.parsed)
        assert not extra, f"{self._exchange()}: fields the schema does not declare: {extra}"
        return response.parsed

    def _exchange(self) -> str:
        request, response = self.last_request, self.last_response
        if request is None or response is None:
            return "no response"
        return f"{request.method} {request.url.path} -> {response.status_code} {response.text[:1500]}"
