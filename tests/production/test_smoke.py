"""Production smoke test: the deploy a user makes, started from the Procfile alone.

A fresh checkout, a fresh database, `release` first (on its own "dyno"), then `web`, `scheduler`,
`worker` and `ops` exactly as the Procfile writes them, with DEBUG=false and no DJANGO_SETTINGS_MODULE
(the settings a Procfile deploy gets by default). Every request carries `X-Forwarded-Proto: https`
as a TLS-terminating proxy adds it. Then: 32 concurrent API clients for 30 s (no 5xx, PostgreSQL
sessions within the pool bounds), every dashboard page, the admin and the API docs in Debian
Chromium with all their assets, a live update over the WebSocket, a bulk operation on the ops
process, and SIGTERM at the end.

Measured numbers go to test-output/production-smoke.json.
"""

import http.client
import json
import re
import secrets
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.dashboard.browser import WATCH_STATUSES, chromium, free_port, require_chromium, screenshot
from tests.support.processes import ROOT, wait_until
from tests.support.receiver import Receiver, Reply

from . import pages
from .deploy import (
    ConnectionSampler,
    ProcfileProcess,
    create_database,
    database_url,
    deploy_env,
    drop_database,
    fresh_checkout,
    procfile,
    run_command,
    server_conninfo,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CLIENTS = 32
LOAD_SECONDS = 30
WORKER_CONCURRENCY = 2  # the Procfile's default
PROXY = {"X-Forwarded-Proto": "https"}
REPORT = ROOT / "test-output" / "production-smoke.json"
USERNAME, PASSWORD = "ops@example.com", "smoke-" + secrets.token_urlsafe(12)


class Deploy:
    def __init__(self, port: int, env: dict[str, str], app_dir: Path, dbname: str):
        self.port, self.env, self.app_dir, self.dbname = port, env, app_dir, dbname
        self.base_url = f"http://127.0.0.1:{port}"
        self.processes: dict[str, ProcfileProcess] = {}
        self.report: dict = {}
        self.api_key = ""
        self.receiver_url = ""

    def count(self, sql: str) -> int:
        with psycopg.connect(**server_conninfo(self.dbname)) as conn:
            return conn.execute(sql).fetchone()[0]

    def manage(self, *args: str, **extra_env: str) -> str:
        return run_command(["python", "manage.py", *args], self.app_dir, self.env, **extra_env)

    def request(self, method: str, path: str, body=None, headers=None, proxy=True):
        """(status, headers, body) of one request to the web process, as the proxy forwards it."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            all_headers = {**(PROXY if proxy else {}), **(headers or {})}
            if self.api_key:
                all_headers.setdefault("Authorization", f"Bearer {self.api_key}")
            payload = None if body is None else json.dumps(body)
            if payload is not None:
                all_headers["Content-Type"] = "application/json"
            conn.request(method, path, body=payload, headers=all_headers)
            response = conn.getresponse()
            return response.status, response.msg, response.read()
        finally:
            conn.close()

    def api(self, method: str, path: str, body=None, expect: int = 200):
        status, _, raw = self.request(method, f"/api/v1{path}", body)
        assert status == expect, f"{method} {path}: {status} {raw[:500]!r}"
        return json.loads(raw) if raw else None

    def tails(self) -> str:
        return "\n".join(process.tail(2500) for process in self.processes.values())


@pytest.fixture(scope="module")
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deploy(tmp_path_factory, receiver):
    from tests.conftest import _require

    require_chromium()
    server = server_conninfo()
    _require("PostgreSQL", f"postgres://{server['host']}:{server['port']}", 5432)
    _require("Redis", settings.REDIS_URL, 6379)
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # this test's broker DB starts empty
    commands = procfile()
    assert list(commands) == ["release", "web", "scheduler", "worker", "ops"], commands
    dbname = create_database()
    port = free_port()
    env = deploy_env(
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        CSRF_TRUSTED_ORIGINS=f"http://127.0.0.1:{port},http://localhost:{port}",
        DATABASE_URL=database_url(dbname),
        REDIS_URL=settings.REDIS_URL,
        WEBHOOK_ALLOW_PRIVATE_NETWORKS="true",
        PORT=str(port),
        # One API key for 32 clients: the per-key throttle (1200/min) would answer most with 429.
        CHIME_API_RATE_LIMIT="1000000/min",
        # 32 clients create more than the default 1,000 jobs in the 30 s load (batch-era speed);
        # the tests after it still create jobs of their own.
        CHIME_QUOTA_MAX_JOBS="1000000",
    )
    deploy = Deploy(port, env, fresh_checkout(tmp_path_factory.mktemp("app")), dbname)
    deploy.receiver_url = receiver.url
    try:
        # The release phase, on a "dyno" of its own whose disk is then thrown away.
        release_dir = fresh_checkout(tmp_path_factory.mktemp("release"))
        started = time.monotonic()
        release = ProcfileProcess("release", commands["release"], release_dir, env)
        assert release.popen.wait(180) == 0, f"release failed\n{release.tail()}"
        deploy.report["release_seconds"] = round(time.monotonic() - started, 1)
        release.terminate(1)
        shutil.rmtree(release_dir)  # the release dyno's disk is gone

        started = time.monotonic()
        for name in ("web", "scheduler", "worker", "ops"):
            deploy.processes[name] = ProcfileProcess(name, commands[name], deploy.app_dir, env)
        deploy.manage("create_tenant", "smoke", "--name", "Smoke")
        deploy.api_key = deploy.manage("create_api_key", "smoke").strip()
        deploy.manage("createsuperuser", "--noinput", "--username", USERNAME, "--email", USERNAME,
                      DJANGO_SUPERUSER_PASSWORD=PASSWORD)  # fmt: skip
        deploy.manage("shell", "-c", pages.ADD_OWNER.format(username=USERNAME, slug="smoke"))
        deploy.processes["web"].wait_for_http(f"{deploy.base_url}/healthz", timeout=120)
        deploy.report["web_ready_seconds"] = round(time.monotonic() - started, 1)
        collected = re.search(r"Collected static files into .* in ([\d.]+) s", deploy.processes["web"].log())
        assert collected, "the web process of a fresh checkout must collect static files"  # no build step here
        deploy.report["web_collectstatic_seconds"] = float(collected.group(1))
        deploy.processes["worker"].wait_for_log("ready.", timeout=120)
        deploy.processes["ops"].wait_for_log("ready.", timeout=120)
        deploy.processes["scheduler"].wait_for_log("scheduler started", timeout=120)
        receiver.secrets = [deploy.api("GET", "/signing-secret")["secret"]]
        yield deploy
    finally:
        for process in deploy.processes.values():
            if process.popen.returncode is None and process.group_alive():
                process.terminate(30)
        drop_database(dbname)
        shutil.rmtree(deploy.app_dir, ignore_errors=True)
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(deploy.report, indent=2))


def test_plain_http_is_redirected_to_https_except_the_health_check(deploy):
    status, headers, _ = deploy.request("GET", "/login/", proxy=False)
    assert status == 301 and headers.get("Location") == f"https://127.0.0.1:{deploy.port}/login/"
    status, _, body = deploy.request("GET", "/healthz", proxy=False)
    assert status == 200 and json.loads(body) == {"status": "ok"}

    status, headers, _ = deploy.request("GET", "/login/")  # through the TLS proxy
    assert status == 200
    assert "max-age=" in headers.get("Strict-Transport-Security", "")
    cookies = headers.get_all("Set-Cookie") or []
    assert cookies and all("; Secure" in cookie for cookie in cookies), cookies


def _client(deploy: Deploy, index: int, until: float, statuses: Counter, errors: list, lock: threading.Lock):
    """One API client on one keep-alive connection: mostly cron jobs (nothing due), every tenth a
    job that fires at once (the scheduler and the workers deliver it meanwhile), every fifth a list."""
    conn = http.client.HTTPConnection("127.0.0.1", deploy.port, timeout=60)
    headers = {**PROXY, "Authorization": f"Bearer {deploy.api_key}", "Content-Type": "application/json"}
    n = 0
    while time.monotonic() < until:
        n += 1
        job = {"name": f"load-{index}-{n}", "target": {"url": f"{deploy.receiver_url}/load/{index}/{n}"}}
        if n % 5 == 0:
            kind, method, path, body = "list", "GET", "/api/v1/jobs?limit=20", None
        elif n % 10 == 3:
            kind, method, path = "once", "POST", "/api/v1/jobs"
            body = json.dumps({**job, "schedule": {"type": "once"}})
        else:
            kind, method, path = "cron", "POST", "/api/v1/jobs"
            body = json.dumps({**job, "schedule": {"type": "cron", "expression": "0 0 1 1 *", "timezone": "UTC"}})
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            status = response.status
        except (OSError, http.client.HTTPException) as error:
            with lock:
                errors.append(f"{method} {path}: {error!r}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", deploy.port, timeout=60)
            continue
        with lock:
            statuses[(kind, status)] += 1
            if status >= 500 and len(errors) < 20:
                errors.append(f"{method} {path}: {status} {raw[:300]!r}")
    conn.close()


def test_32_api_clients_for_30_s_get_no_5xx_and_connections_stay_within_the_pool_bounds(deploy, receiver):
    statuses, errors, lock = Counter(), [], threading.Lock()
    load_started = time.time()
    until = time.monotonic() + LOAD_SECONDS
    with ConnectionSampler(deploy.dbname) as sampler:
        clients = [
            threading.Thread(target=_client, args=(deploy, i, until, statuses, errors, lock)) for i in range(CLIENTS)
        ]
        for client in clients:
            client.start()
        for client in clients:
            client.join(LOAD_SECONDS + 90)
    requests = sum(statuses.values())
    server_errors = sum(count for (_, status), count in statuses.items() if status >= 500)
    created = statuses[("cron", 201)] + statuses[("once", 201)]
    deploy.report["load"] = {
        "clients": CLIENTS,
        "seconds": LOAD_SECONDS,
        "requests": requests,
        "per_second": round(requests / LOAD_SECONDS, 1),
        "statuses": {f"{kind} {status}": count for (kind, status), count in sorted(statuses.items())},
        "5xx": server_errors,
        "connection_errors": len([e for e in errors if "Error" in e]),
        "max_connections": dict(sampler.max_by_app),
        "max_connections_total": sampler.max_total,
        "samples": sampler.samples,
    }
    assert not errors, f"{len(errors)} failed requests, e.g. {errors[:5]}\n{deploy.tails()}"
    assert server_errors == 0, deploy.report["load"]
    assert created > 100 and statuses[("list", 200)] > 10 and statuses[("once", 201)] > 5, deploy.report["load"]
    assert sampler.samples >= LOAD_SECONDS, sampler.samples  # every 0.5 s, so about twice that

    # The documented bounds (docs/operations.md#database-connections, config/settings/base.py
    # DB_POOL_DEFAULT_MAX): one web process, one scheduler, WORKER_CONCURRENCY worker children.
    pool = settings.DB_POOL_DEFAULT_MAX
    bounds = {
        "chime-web": pool["web"],
        "chime-scheduler": pool["scheduler"],
        "chime-worker": pool["worker"] * WORKER_CONCURRENCY,
        # The ops worker: its one child (--concurrency 1) and its main process (the sweep).
        "chime-ops": pool["ops"] * 2,
    }
    for app, bound in bounds.items():
        assert sampler.max_by_app.get(app, 0) <= bound, (app, dict(sampler.max_by_app))
    for app in set(bounds) - {"chime-ops"}:  # the sampler saw every process type at work (ops has none here)
        assert sampler.max_by_app.get(app, 0) >= 1, (app, dict(sampler.max_by_app))
    unexpected = set(sampler.max_by_app) - set(bounds)
    assert not unexpected, dict(sampler.max_by_app)
    assert sampler.max_total <= sum(bounds.values()), dict(sampler.max_by_app)

    assert deploy.count("SELECT count(*) FROM jobs_jobdefinition") == created

    # Every job that fired at once reached the receiver, signed: the scheduler released it and a
    # worker delivered it.
    fired = statuses[("once", 201)]
    wait_until(lambda: len(receiver.received(lambda d: d.path.startswith("/load/"))) >= fired, timeout=120)
    deliveries = receiver.received(lambda d: d.path.startswith("/load/"))
    assert all(d.signature_ok for d in deliveries)
    assert len({d.webhook_id for d in deliveries}) == fired
    deploy.report["load"]["fired_jobs_all_delivered_after_seconds"] = round(
        max(d.received_at for d in deliveries) - load_started, 1
    )


@pytest.fixture(scope="module")
def browser(deploy):
    with chromium() as browser:
        context = browser.new_context(
            base_url=deploy.base_url, extra_http_headers=PROXY, viewport={"width": 1280, "height": 900}
        )
        context.set_default_timeout(20000)
        yield context
        context.close()


def test_every_page_the_admin_and_the_api_docs_load_with_their_assets(deploy, browser, receiver):
    job = deploy.api("POST", "/jobs", {
        "name": "nightly-report",
        "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
        "target": {"url": f"{receiver.url}/pages"},
    }, expect=201)  # fmt: skip
    run = deploy.api("POST", f"/jobs/{job['id']}/trigger", expect=201)
    walk = pages.Walk(browser)
    for path in pages.PUBLIC:
        walk.visit(path)
    walk.log_in(USERNAME, PASSWORD)
    for path in pages.member_pages(job_id=job["id"], run_id=run["id"]):
        walk.visit(path)
    deploy.report["pages"] = walk.summary()
    screenshot(walk.page, "production-api-docs")
    assert not walk.problems, "\n".join(walk.problems)
    assert walk.hashed_assets, "no asset was served under a manifest (hashed) name"


def test_a_run_triggered_through_the_api_changes_status_live_on_the_runs_page(deploy, browser, receiver):
    receiver.respond = lambda delivery: Reply(status=200, delay_seconds=1.5)
    job = deploy.api("POST", "/jobs", {
        "name": "live-update",
        "schedule": {"type": "cron", "expression": "0 3 * * *", "timezone": "UTC"},
        "target": {"url": f"{receiver.url}/live"},
    }, expect=201)  # fmt: skip
    page = browser.new_page()
    errors = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/runs/")
    page.locator("[data-live-indicator][data-state=live]").wait_for()
    page.evaluate("window.__noReload = true")
    run = deploy.api("POST", f"/jobs/{job['id']}/trigger", expect=201)
    page.evaluate(WATCH_STATUSES, run["id"])
    page.locator(f"#run-{run['id']}[data-status=succeeded]").wait_for(timeout=60000)
    seen = page.evaluate("window.__statuses")
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"
    assert len(seen) >= 2 and seen[-1] == "succeeded", seen  # it changed on screen, not just appeared
    assert not errors, errors
    deliveries = receiver.received(lambda d: d.path == "/live")
    assert deliveries and deliveries[0].signature_ok is True
    deploy.report["live_statuses"] = seen
    page.close()


def test_a_bulk_operation_runs_on_the_ops_process(deploy):
    """POST /operations/replay answers 202 at once; the Procfile's `ops` process (and no delivery
    worker: they do not consume its queue) runs it to `succeeded`."""
    operation = deploy.api("POST", "/operations/replay", {"status_code": 599}, expect=202)
    assert operation["state"] == "pending", operation
    done = wait_until(
        lambda: (
            (body := deploy.api("GET", f"/operations/{operation['id']}"))["state"] in ("succeeded", "failed") and body
        ),
        timeout=60,
        message="operation finished",
    )
    assert done["state"] == "succeeded" and done["result"] == {"replayed": 0}, done
    assert "operations.run[" in deploy.processes["ops"].log()  # "Task operations.run[<id>] received"
    assert "operations.run[" not in deploy.processes["worker"].log()


def test_sigterm_stops_every_process(deploy):
    exits = {name: process.terminate(30) for name, process in deploy.processes.items()}
    deploy.report["sigterm_exit_seconds"] = {name: None if s is None else round(s, 1) for name, s in exits.items()}
    deploy.report["exit_codes"] = {name: process.popen.returncode for name, process in deploy.processes.items()}
    leaked = [name for name, process in deploy.processes.items() if process.group_alive()]
    assert not leaked, leaked
