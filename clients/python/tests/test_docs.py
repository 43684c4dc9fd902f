"""The examples in docs/api.md#python-sdk-chimectl-and-the-receiver-toolkit are run, so they stay
true: the SDK ones in order in one namespace against a live Chime (CHIME_URL, CHIME_API_KEY in
the environment, as the docs say), each receiver one with two deliveries of one run and a forgery."""

import re
import uuid
from pathlib import Path

import pytest
from django.test import RequestFactory
from fastapi.testclient import TestClient

from .signing import delivery, secret, tampered_signature

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"
BLOCK = re.compile(r"<!-- test: (\w+) -->\n```python\n(.*?)```", re.DOTALL)


def examples(kind: str) -> list[str]:
    found = [code for name, code in BLOCK.findall(API_MD.read_text()) if name == kind]
    assert found, f"no example marked <!-- test: {kind} --> in {API_MD}"
    return found


def test_the_sdk_examples_run_against_a_live_chime(web, api_key, monkeypatch, capsys):
    monkeypatch.setenv("CHIME_URL", web.url)
    monkeypatch.setenv("CHIME_API_KEY", api_key)
    namespace: dict = {}
    for code in examples("sdk"):
        exec(compile(code, str(API_MD), "exec"), namespace)  # noqa: S102 - our own docs
    printed = capsys.readouterr().out
    assert printed.startswith("[") and "61" in printed, printed  # the field's messages, from the except branch
    assert namespace["run"]["trigger"] == "manual"


def _post_django(namespace, body, headers):
    request = RequestFactory().post("/chime", data=body, content_type="application/json", headers=headers)
    return namespace["chime_webhook"](request).status_code


def _post_flask(namespace, body, headers):
    return namespace["app"].test_client().post("/chime", data=body, headers=headers).status_code


def _post_fastapi(namespace, body, headers):
    return TestClient(namespace["app"]).post("/chime", content=body, headers=headers).status_code


@pytest.mark.parametrize("kind", ["django", "flask", "fastapi"])
def test_each_receiver_example_handles_a_run_once(kind, monkeypatch, request):
    if kind == "django":
        request.getfixturevalue("django_store")  # the example's DjangoStore needs the app's table
    old, new = secret(), secret()
    monkeypatch.setenv("CHIME_SIGNING_SECRETS", f"{new} {old}")
    calls = []
    namespace = {"do_the_work": calls.append, "__name__": f"docs_{kind}"}
    (code,) = examples(kind)
    exec(compile(code, str(API_MD), "exec"), namespace)  # noqa: S102 - our own docs
    post = {"django": _post_django, "flask": _post_flask, "fastapi": _post_fastapi}[kind]
    run_id = str(uuid.uuid4())
    body, headers = delivery([old], msg_id=run_id, body={"n": 1})  # signed with the old secret only
    assert post(namespace, body, tampered_signature(headers)) == 401
    assert post(namespace, body, headers) == 200
    assert post(namespace, *delivery([new, old], msg_id=run_id, body={"n": 1})) == 200  # delivered again
    assert calls == [{"n": 1}]
