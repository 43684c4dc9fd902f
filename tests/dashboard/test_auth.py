"""Sign up, log in and out, password reset, and that every page needs a login."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from apps.tenants.models import Membership, Role, SigningSecret

pytestmark = pytest.mark.django_db

PAGES = ["/", "/jobs/", "/jobs/new/", "/runs/", "/dead-letters/", "/keys/", "/signing-secret/"]


def test_sign_up_creates_a_tenant_its_owner_and_logs_in():
    client = Client()
    response = client.post(
        "/signup/", {"email": "Ada@Example.com", "password": "a-long-passphrase-42", "tenant_name": "Acme Robotics"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    user = get_user_model().objects.get(username="ada@example.com")
    membership = Membership.objects.select_related("tenant").get(user=user)
    assert membership.role == Role.OWNER
    assert membership.tenant.slug == "acme-robotics"
    assert SigningSecret.objects.filter(tenant=membership.tenant, expires_at__isnull=True).exists()
    assert "Acme Robotics" in client.get("/").content.decode()


def test_sign_up_refuses_a_taken_email_and_a_weak_password(owner):
    response = Client().post("/signup/", {"email": owner.email, "password": "123", "tenant_name": "Again"})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "exists already" in errors["email"][0]
    response = Client().post("/signup/", {"email": "new@x.test", "password": "password", "tenant_name": "X"})
    assert "password" in response.context["form"].errors


def test_two_sign_ups_with_the_same_organization_name_get_distinct_slugs():
    for email in ("a@x.test", "b@x.test"):
        Client().post("/signup/", {"email": email, "password": "a-long-passphrase-42", "tenant_name": "Acme"})
    slugs = sorted(Membership.objects.values_list("tenant__slug", flat=True))
    assert slugs == ["acme", "acme-2"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_sends_anonymous_visitors_to_the_login(path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_login_with_email_and_logout_by_post_only(owner):
    client = Client()
    response = client.post("/login/", {"username": "OWNER@acme.test", "password": "pw-Chime-2026!"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    assert client.get("/logout/").status_code == 405  # a link cannot log you out (CSRF)
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_login_page_has_labelled_fields():
    html = Client().get("/login/").content.decode()
    for field_id in ("id_username", "id_password"):
        assert f'<label for="{field_id}">' in html


def test_password_reset_by_email(owner):
    client = Client()
    response = client.post("/password-reset/", {"email": owner.email})
    assert response.status_code == 302 and response["Location"] == "/password-reset/sent/"
    assert len(mail.outbox) == 1
    link = re.search(r"https?://[^/]+(/reset/\S+/)", mail.outbox[0].body).group(1)
    form_url = client.get(link)["Location"]  # Django swaps the token for a session value
    response = client.post(
        form_url, {"new_password1": "another-passphrase-77", "new_password2": "another-passphrase-77"}
    )
    assert response.status_code == 302 and response["Location"] == "/reset/done/"
    assert Client().login(username=owner.username, password="another-passphrase-77")


def test_password_reset_for_an_unknown_email_says_nothing_and_sends_nothing():
    response = Client().post("/password-reset/", {"email": "nobody@x.test"})
    assert response.status_code == 302
    assert mail.outbox == []
