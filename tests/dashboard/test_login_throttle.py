"""The login form and the password reset are throttled per account and per client address
(apps/tenants/quotas.py): every POST counts, whether the account exists or not; past a limit the
form answers 429 with Retry-After and the password is not even checked."""

import re

import pytest
import redis
from django.core import mail
from django.test import Client

from .conftest import make_user

PASSWORD = "pw-Chime-2026!"


@pytest.fixture(autouse=True)
def clean_limits(settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter("chime:limit:*"):
        client.delete(key)
    settings.CHIME_LOGIN_RATE_PER_ACCOUNT = "1000/15min"
    settings.CHIME_LOGIN_RATE_PER_ADDRESS = "1000/15min"
    settings.CHIME_PASSWORD_RESET_RATE_PER_ACCOUNT = "1000/hour"
    settings.CHIME_PASSWORD_RESET_RATE_PER_ADDRESS = "1000/hour"
    settings.CHIME_SIGNUP_RATE_PER_ADDRESS = "1000/hour"


@pytest.fixture
def owner(tenant):
    return make_user("owner@acme.test", tenant)


def login(username, password, address="198.51.100.7", **headers):
    client = Client(REMOTE_ADDR=address, **headers)
    response = client.post("/login/", {"username": username, "password": password})
    return client, response


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def assert_throttled(response):
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 3600
    assert "Too many" in response.content.decode()


def test_login_is_throttled_per_account_even_with_the_right_password(owner, settings):
    settings.CHIME_LOGIN_RATE_PER_ACCOUNT = "3/15min"
    for index in range(3):  # a guesser spreading its tries over addresses
        assert login("owner@acme.test", "wrong", address=f"203.0.113.{index}")[1].status_code == 200
    client, response = login("owner@acme.test", PASSWORD, address="203.0.113.99")
    assert_throttled(response)
    assert not logged_in(client)
    _, other = login("someone@else.test", "whatever", address="203.0.113.99")
    assert other.status_code == 200, "another account is not affected"


def test_login_is_throttled_per_client_address(owner, settings):
    settings.CHIME_LOGIN_RATE_PER_ADDRESS = "3/15min"
    for name in ("a@x.test", "b@x.test", "c@x.test"):  # one address trying many accounts
        assert login(name, "wrong")[1].status_code == 200
    client, response = login("owner@acme.test", PASSWORD)
    assert_throttled(response)
    assert not logged_in(client)
    client, response = login("owner@acme.test", PASSWORD, address="198.51.100.8")
    assert response.status_code == 302 and logged_in(client), "another address is not affected"


def test_a_refusal_does_not_say_whether_the_account_exists(owner, settings):
    settings.CHIME_LOGIN_RATE_PER_ACCOUNT = "1/15min"
    login("owner@acme.test", "wrong")
    login("nobody@acme.test", "wrong")
    _, known = login("owner@acme.test", "wrong", address="198.51.100.9")
    _, unknown = login("nobody@acme.test", "wrong", address="198.51.100.9")
    assert known.status_code == unknown.status_code == 429
    assert strip(known, "owner@acme.test") == strip(unknown, "nobody@acme.test")


def strip(response, username: str) -> str:
    """The page without what differs by design: the name typed in, the CSRF token."""
    html = response.content.decode().replace(username, "")
    return re.sub(r'(csrfmiddlewaretoken" value="|"X-CSRFToken": ")[^"]+"', "", html)


def test_behind_the_router_the_client_address_is_the_last_forwarded_hop(owner, settings):
    """With one trusted proxy, X-Forwarded-For's last entry is the address the router saw; the
    entries before it are the client's own words and cannot buy it a fresh budget."""
    settings.CHIME_TRUSTED_PROXY_HOPS = 1
    settings.CHIME_LOGIN_RATE_PER_ADDRESS = "2/15min"
    for forged in ("1.1.1.1", "2.2.2.2"):
        assert (
            login("a@x.test", "wrong", address="10.0.0.1", HTTP_X_FORWARDED_FOR=f"{forged}, 192.0.2.5")[1].status_code
            == 200
        )
    _, refused = login("b@x.test", "wrong", address="10.0.0.2", HTTP_X_FORWARDED_FOR="3.3.3.3, 192.0.2.5")
    assert_throttled(refused)
    _, other = login("b@x.test", "wrong", address="10.0.0.1", HTTP_X_FORWARDED_FOR="192.0.2.6")
    assert other.status_code == 200, "another client behind the same router"


def test_without_a_trusted_proxy_x_forwarded_for_is_ignored(owner, settings):
    settings.CHIME_TRUSTED_PROXY_HOPS = 0
    settings.CHIME_LOGIN_RATE_PER_ADDRESS = "2/15min"
    for forged in ("1.1.1.1", "2.2.2.2"):
        login("a@x.test", "wrong", HTTP_X_FORWARDED_FOR=forged)
    assert_throttled(login("a@x.test", "wrong", HTTP_X_FORWARDED_FOR="3.3.3.3")[1])


def reset(email, address="198.51.100.7"):
    return Client(REMOTE_ADDR=address).post("/password-reset/", {"email": email})


def test_password_reset_is_throttled_per_account(owner, settings):
    settings.CHIME_PASSWORD_RESET_RATE_PER_ACCOUNT = "2/hour"
    assert [reset("owner@acme.test", f"203.0.113.{i}").status_code for i in range(2)] == [302, 302]
    assert len(mail.outbox) == 2
    assert_throttled(reset("owner@acme.test", "203.0.113.50"))
    assert len(mail.outbox) == 2, "no third email"
    assert_throttled(reset("OWNER@acme.test ", "203.0.113.51"))  # the same account, written otherwise


def test_password_reset_is_throttled_per_address_for_unknown_accounts_too(owner, settings):
    settings.CHIME_PASSWORD_RESET_RATE_PER_ADDRESS = "2/hour"
    assert [reset(f"nobody{i}@x.test").status_code for i in range(2)] == [302, 302]
    assert_throttled(reset("owner@acme.test"))
    assert not mail.outbox


def test_the_admin_login_shares_the_login_limits(owner, settings):
    settings.CHIME_LOGIN_RATE_PER_ACCOUNT = "2/15min"
    login("owner@acme.test", "wrong")
    Client(REMOTE_ADDR="203.0.113.1").post("/admin/login/", {"username": "owner@acme.test", "password": "wrong"})
    refused = Client(REMOTE_ADDR="203.0.113.2").post(
        "/admin/login/", {"username": "owner@acme.test", "password": PASSWORD}
    )
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert_throttled(login("owner@acme.test", PASSWORD, address="203.0.113.3")[1])


def test_sign_up_is_throttled_per_client_address_and_keeps_what_was_typed(db, settings):
    """Each sign-up makes a tenant with quotas of its own: one client must not mint them at will."""
    from apps.tenants.models import Tenant

    settings.CHIME_SIGNUP_RATE_PER_ADDRESS = "2/hour"

    def sign_up(n, address="198.51.100.20"):
        return Client(REMOTE_ADDR=address).post(
            "/signup/", {"email": f"u{n}@example.test", "password": "a-long-passphrase-42", "tenant_name": f"Org {n}"}
        )

    assert [sign_up(n).status_code for n in range(2)] == [302, 302]
    refused = sign_up(2)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 3600
    body = refused.content.decode()
    assert "Too many sign-ups" in body and "u2@example.test" in body
    assert Tenant.objects.count() == 2, "no tenant made past the limit"
    assert sign_up(3, address="198.51.100.21").status_code == 302, "another address is not affected"
