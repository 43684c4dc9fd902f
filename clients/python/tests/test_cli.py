"""chimectl against a live Chime, in-process (typer's runner): every command, --json and human
output, errors with field messages, profiles, and --help with an example on every command."""

import json

import pytest
import typer
from typer.testing import CliRunner

from chime_client.cli import app, output

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def cli(web, api_key, monkeypatch, tmp_path):
    monkeypatch.setenv("CHIME_URL", web.url)
    monkeypatch.setenv("CHIME_API_KEY", api_key)
    monkeypatch.setenv("CHIMECTL_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setattr(output.console, "width", 200)  # tables unwrapped, as on a wide terminal
    runner = CliRunner()

    def run(*args, code=0):
        result = runner.invoke(app, list(args), catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    def run_json(*args):
        return json.loads(run("--json", *args))

    run.json = run_json
    return run


def test_every_command_has_help_with_an_example():
    root = typer.main.get_command(app)
    runner = CliRunner()

    def walk(command, path):
        yield path
        if hasattr(command, "commands"):  # a group (typer has its own copy of click)
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])

    paths = list(walk(root, []))
    assert len(paths) > 20
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "Example" in result.output, path
    completion = runner.invoke(app, ["--show-completion", "bash"], env={"SHELL": "/bin/bash"})
    assert "complete" in completion.output


def test_jobs_commands(cli):
    job = cli.json(
        "jobs", "create", "--name", "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Berlin",
        "--url", "http://127.0.0.1:9/hook", "--header", "X-Team=billing", "--body", '{"a": 1}',
        "--set", 'retry={"max_attempts": 2}',
    )  # fmt: skip
    assert job["schedule"] == {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin", "run_at": None}
    assert (job["target"]["headers"], job["target"]["body"], job["retry"]["max_attempts"]) == (
        {"X-Team": "billing"},
        {"a": 1},
        2,
    )
    listed = cli("jobs", "list")
    assert "nightly" in listed and "0 2 * * * (Europe/Berlin)" in listed
    assert [j["id"] for j in cli.json("jobs", "list", "--status", "active")] == [job["id"]]
    assert cli.json("jobs", "update", job["id"], "--name", "renamed")["name"] == "renamed"
    assert cli.json("jobs", "pause", job["id"])["status"] == "paused"
    assert "paused" in cli("jobs", "get", job["id"])
    assert cli.json("jobs", "resume", job["id"])["status"] == "active"
    run = cli.json("jobs", "trigger", job["id"])
    assert run["trigger"] == "manual"
    assert (
        cli.json("jobs", "backfill", job["id"], "--start", "2026-01-01T00:00:00Z", "--end", "2026-01-01T12:00:00Z")[
            "created"
        ]
        == 1
    )
    assert cli.json("runs", "list", "--job", job["id"])[-1]["id"] == run["id"]
    assert cli.json("runs", "get", run["id"])["id"] == run["id"]
    assert cli.json("runs", "cancel", run["id"])["status"] == "cancelled"
    refused = cli("runs", "replay", run["id"], code=1)
    assert "409 conflict" in refused
    assert cli.json("jobs", "delete", job["id"]) == {"id": job["id"], "delete": True}


def test_errors_show_the_field_messages(cli):
    out = cli("jobs", "create", "--name", "bad", "--cron", "61 * * * *", "--url", "http://127.0.0.1:9/", code=1)
    assert "400 invalid" in out and "schedule.expression" in out


def test_preview_flags_dst(cli):
    out = cli("preview", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "3", "--start", "2026-03-28T00:00:00Z")
    assert "DST gap" in out
    data = cli.json("preview", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "3", "--start", "2026-03-28T00:00:00Z")
    assert [t["dst"] for t in data["fire_times"]] == [None, "gap", None]


def test_keys_and_secret(cli):
    created = cli.json("keys", "create", "--name", "ci")
    assert created["key"].startswith("chime_")
    assert created["id"] in cli("keys", "list")
    assert cli.json("keys", "revoke", created["id"]) == {"id": created["id"], "revoked": True}
    shown = cli.json("secret", "show")["secret"]
    assert cli("secret", "show").strip() == shown
    assert cli.json("secret", "rotate")["secret"] != shown


def test_a_profile_file_and_no_config(cli, web, api_key, monkeypatch, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[default]\nurl = "http://127.0.0.1:9"\n\n[local]\nurl = "{web.url}"\napi_key = "{api_key}"\n')
    monkeypatch.setenv("CHIMECTL_CONFIG", str(config))
    monkeypatch.delenv("CHIME_URL")
    monkeypatch.delenv("CHIME_API_KEY")
    assert cli.json("--profile", "local", "secret", "show")["secret"].startswith("whsec_")
    assert "no profile [nope]" in cli("--profile", "nope", "keys", "list", code=1)
    assert "no API key" in cli("keys", "list", code=1)  # the default profile has no key


def test_listen_follows_a_secret_rotation(web, api_key):
    """`chimectl listen` verifies with the API's secret; after `secret rotate`, a delivery signed
    with the new secret only (as Chime signs once the old one has expired) still verifies."""
    from datetime import UTC, datetime

    import httpx

    from apps.delivery.signing import webhook_headers
    from chime_client import Client

    from .test_acceptance import Listener

    listener = Listener(web.url, api_key)
    try:
        with Client(web.url, api_key) as chime:
            new = chime.signing_secret.rotate()["secret"]
        body = b'{"hello": "rotated"}'
        headers = webhook_headers(secrets=[new], msg_id="run-r", timestamp=datetime.now(UTC), payload=body)
        assert httpx.post(f"{listener.url}/", content=body, headers=headers).status_code == 200
        entry = listener.next()
        assert (entry["outcome"], entry["webhook_id"], entry["body"]) == ("delivered", "run-r", {"hello": "rotated"})
        assert httpx.post(f"{listener.url}/", content=body, headers={**headers, "webhook-id": "x"}).status_code == 401
    finally:
        listener.stop()
