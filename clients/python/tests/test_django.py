"""The Django decorator and the Django-model store, on the test database (PostgreSQL).

The app (``chime_client.contrib.django``) is installed for these tests only and its migration
applied inside the test's transaction, so the Chime project itself is untouched."""

from django.http import HttpResponse, JsonResponse
from django.test import RequestFactory

from chime_client.contrib.django.views import webhook_view
from chime_client.dedupe import BUSY, CLAIMED, DONE

from .signing import delivery, secret, tampered_signature


def post(view, body, headers):
    request = RequestFactory().post("/hook", data=body, content_type="application/json", headers=headers)
    return view(request)


def test_the_model_store_claims_once_and_remembers(django_store):
    from chime_client.contrib.django.models import WebhookReceipt

    assert django_store.claim("a", 30) == CLAIMED
    assert django_store.claim("a", 30) == BUSY
    django_store.release("a")
    assert django_store.claim("a", 30) == CLAIMED
    django_store.complete("a", 60)
    assert django_store.claim("a", 30) == DONE
    assert WebhookReceipt.objects.get(webhook_id="a").state == "done"
    assert django_store.claim("b", -1) == CLAIMED  # a claim already expired...
    assert django_store.claim("b", 30) == CLAIMED  # ... is taken over


def test_the_decorator_runs_the_view_once_per_run(django_store):
    key, calls = secret(), []

    @webhook_view(key, store=django_store)
    def hook(request, webhook):
        calls.append(webhook.id)
        if webhook.json().get("fail"):
            return HttpResponse(status=500)
        return JsonResponse({"ok": webhook.id})

    body, headers = delivery([key], msg_id="run-1")
    assert post(hook, body, headers).status_code == 200
    assert post(hook, body, headers).status_code == 200
    assert post(hook, *delivery([key], msg_id="run-1")).status_code == 200
    assert calls == ["run-1"]
    assert post(hook, body, tampered_signature(headers)).status_code == 401
    assert post(hook, body, {}).status_code == 400
    failing = delivery([key], msg_id="run-2", body={"fail": True})
    assert post(hook, *failing).status_code == 500
    assert post(hook, *failing).status_code == 500  # released: Chime's retry runs it again
    assert calls == ["run-1", "run-2", "run-2"]


def test_the_decorator_refuses_stale_timestamps(db):
    from datetime import UTC, datetime, timedelta

    key = secret()

    @webhook_view(lambda: [key])
    def hook(request, webhook):
        raise AssertionError("not called")

    assert post(hook, *delivery([key], at=datetime.now(UTC) - timedelta(hours=1))).status_code == 401
