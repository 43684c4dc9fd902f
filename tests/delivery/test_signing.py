"""Signing is verified exactly as a receiver would: standardwebhooks.Webhook.verify()."""

import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from apps.delivery.signing import generate_signing_secret, signature_header, webhook_headers


def _payload(data: object) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def test_generate_signing_secret_format():
    secret = generate_signing_secret()
    assert secret.startswith("whsec_")
    raw = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    assert len(raw) == 32
    assert generate_signing_secret() != secret


def test_single_secret_verifies():
    secret = generate_signing_secret()
    payload = _payload({"job": "nightly", "run": 1})
    headers = webhook_headers(secrets=[secret], msg_id="msg_1", timestamp=datetime.now(UTC), payload=payload)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"].isdigit()
    assert headers["webhook-signature"].startswith("v1,")
    assert " " not in headers["webhook-signature"]
    assert Webhook(secret).verify(payload, headers) == {"job": "nightly", "run": 1}


def test_two_secrets_each_verifies_alone():
    old, new = generate_signing_secret(), generate_signing_secret()
    payload = _payload({"rotating": True})
    headers = webhook_headers(secrets=[new, old], msg_id="msg_rot", timestamp=datetime.now(UTC), payload=payload)
    sigs = headers["webhook-signature"].split(" ")
    assert len(sigs) == 2
    assert all(s.startswith("v1,") for s in sigs)
    for secret in (old, new):
        Webhook(secret).verify(payload, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_signing_secret()).verify(payload, headers)


def test_non_utc_aware_timestamp_is_converted():
    secret = generate_signing_secret()
    payload = _payload({"tz": "test"})
    now_utc = datetime.now(UTC)
    tokyo = now_utc.astimezone(timezone(timedelta(hours=9)))
    minus5 = now_utc.astimezone(timezone(timedelta(hours=-5)))
    h_utc = webhook_headers(secrets=[secret], msg_id="m", timestamp=now_utc, payload=payload)
    h_tokyo = webhook_headers(secrets=[secret], msg_id="m", timestamp=tokyo, payload=payload)
    h_minus5 = webhook_headers(secrets=[secret], msg_id="m", timestamp=minus5, payload=payload)
    assert h_utc == h_tokyo == h_minus5
    assert int(h_tokyo["webhook-timestamp"]) == int(now_utc.timestamp())
    # Verification enforces a 5 minute window, so a wrongly shifted (+9h) timestamp would fail here.
    Webhook(secret).verify(payload, h_tokyo)
    Webhook(secret).verify(payload, h_minus5)


def test_naive_timestamp_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        webhook_headers(secrets=[generate_signing_secret()], msg_id="m", timestamp=datetime.now(), payload=b"{}")


def test_subsecond_timestamp_signs_header_second():
    secret = generate_signing_secret()
    ts = datetime.now(UTC).replace(microsecond=999_999)
    payload = b'{"a":1}'
    headers = webhook_headers(secrets=[secret], msg_id="m", timestamp=ts, payload=payload)
    assert headers["webhook-timestamp"] == str(int(ts.timestamp()))
    Webhook(secret).verify(payload, headers)


@pytest.mark.parametrize(
    "data",
    [
        {"name": "Zürich ☕ 東京", "emoji": "🚀"},
        {"text": "line\nbreak \u2028 sep", "quote": '"'},
        ["ünïcödé", 1, None, 2.5],
    ],
)
def test_non_ascii_payload_verifies(data):
    secret = generate_signing_secret()
    payload = _payload(data)
    assert not payload.isascii()
    headers = webhook_headers(secrets=[secret], msg_id="msg_ü", timestamp=datetime.now(UTC), payload=payload)
    assert Webhook(secret).verify(payload, headers) == data


def test_tampered_body_fails():
    secret = generate_signing_secret()
    payload = _payload({"amount": 10})
    headers = webhook_headers(secrets=[secret], msg_id="m", timestamp=datetime.now(UTC), payload=payload)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(_payload({"amount": 1000}), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(payload + b" ", headers)


def test_tampered_id_or_timestamp_fails():
    secret = generate_signing_secret()
    payload = b"{}"
    headers = webhook_headers(secrets=[secret], msg_id="m1", timestamp=datetime.now(UTC), payload=payload)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(payload, {**headers, "webhook-id": "m2"})
    shifted = str(int(headers["webhook-timestamp"]) - 1)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(payload, {**headers, "webhook-timestamp": shifted})


def test_signature_header_matches_webhook_headers():
    secrets = [generate_signing_secret(), generate_signing_secret()]
    ts = datetime.now(UTC)
    payload = b'{"x":"y"}'
    assert (
        signature_header(secrets, "m", ts, payload)
        == webhook_headers(secrets=secrets, msg_id="m", timestamp=ts, payload=payload)["webhook-signature"]
    )


def test_secret_without_prefix_accepted_like_library():
    raw = base64.b64encode(b"k" * 32).decode()
    payload = b"{}"
    headers = webhook_headers(secrets=[raw], msg_id="m", timestamp=datetime.now(UTC), payload=payload)
    Webhook("whsec_" + raw).verify(payload, headers)


@pytest.mark.parametrize(
    ("secrets", "payload", "exc"),
    [
        ([], b"{}", ValueError),
        ("whsec_abc", b"{}", TypeError),
        (["whsec_" + base64.b64encode(b"k" * 32).decode()], "{}", TypeError),
        (["whsec_" + base64.b64encode(b"k" * 32).decode()], b"\xff\xfe", ValueError),
    ],
)
def test_invalid_arguments(secrets, payload, exc):
    with pytest.raises(exc):
        webhook_headers(secrets=secrets, msg_id="m", timestamp=datetime.now(UTC), payload=payload)


# The reference implementation as the oracle of the one-shot HMAC (apps/delivery/signing.py):
# generated secrets (with and without the prefix, unpadded), ids, seconds and UTF-8 payloads.
_secret_bytes = st.binary(min_size=1, max_size=64)


@given(
    raw=_secret_bytes,
    prefixed=st.booleans(),
    unpadded=st.booleans(),
    msg_id=st.text(min_size=1, max_size=40),
    seconds=st.integers(min_value=0, max_value=2**33),
    text=st.text(max_size=300),
)
@hypothesis_settings(max_examples=300, deadline=None)
def test_signature_is_the_reference_implementations(raw, prefixed, unpadded, msg_id, seconds, text):
    encoded = base64.b64encode(raw).decode()
    secret = ("whsec_" if prefixed else "") + (encoded.rstrip("=") if unpadded else encoded)
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    payload = text.encode("utf-8")
    ours = signature_header([secret], msg_id, moment, payload)
    assert ours == Webhook(secret).sign(msg_id, moment, text)


def test_each_secret_is_signed_with_its_own_key():
    secrets = [generate_signing_secret() for _ in range(3)]
    ts = datetime.now(UTC)
    header = signature_header(secrets, "m", ts, b"{}")
    assert header.split(" ") == [Webhook(secret).sign("m", ts, "{}") for secret in secrets]
