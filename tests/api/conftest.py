import pytest

from tests.api import contract


@pytest.fixture(autouse=True)
def _responses_follow_the_schema(monkeypatch):
    """Every response an API test gets is checked against the OpenAPI schema (tests/api/contract.py)."""
    contract.install(monkeypatch)
