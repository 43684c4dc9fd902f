"""Issue #10, deliverable 2: one endpoint's answer never hurts another tenant's runs.

Real parts: a Celery worker and a scheduler (its sweep), Redis, PostgreSQL, the signing receiver
for tenant B, and a raw TCP endpoint for tenant A that answers what no HTTP library would send:
NUL bytes, 2 MB, invalid UTF-8, a malformed status line, NUL and odd bytes in a header, a huge
header. The runs of both tenants are published as one message, so they share one chunk, as they
do in production when both are due at once.
"""

import socket
import socketserver
import threading

import pytest
from django.utils import timezone

from apps.delivery.enqueue import publish_runs
from apps.jobs.models import JobDefinition, JobRun, RunStatus, Trigger
from tests.support.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

TWO_MB = 2 * 1024 * 1024
HOSTILE_REPLIES = {
    "nul": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\x00",
    "big": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % TWO_MB + b"x\x00" * (TWO_MB // 2),
    "utf8": b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n\xff\xfe bad \xc3\x28 \xed\xa0\x80\x00!",
    "status": b"HTTP/1.1 2\x00\xff0 O\x00K\r\nContent-Length: 0\r\n\r\n",
    "reason": b"HTTP/1.1 500 Bad\x00\xff\xfe\r\nContent-Length: 4\r\n\r\n\x00\x00\x00\x00",
    "header": b"HTTP/1.1 200 OK\r\nX-Odd: a\x00b\xff\xfe\r\nContent-Length: 2\r\n\r\nok",
    "huge-header": b"HTTP/1.1 200 OK\r\nX-Huge: " + b"h\x00" * 60_000 + b"\r\nContent-Length: 2\r\n\r\nok",
}


class HostileEndpoint:
    """Reads one request, answers the raw bytes named by its path, closes the connection."""

    def __init__(self):
        replies = HOSTILE_REPLIES

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                data = b""
                self.request.settimeout(10)
                while b"\r\n\r\n" not in data:
                    chunk = self.request.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode().strip("/")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(body) < length:
                    body += self.request.recv(65536)
                try:
                    self.request.sendall(replies[path])
                    self.request.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the client may stop reading a 2 MB body early

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile():
    endpoint = HostileEndpoint()
    yield endpoint
    endpoint.stop()


def paused_job(api, name: str, url: str, max_attempts: int) -> JobDefinition:
    """A job the scheduler leaves alone; its manual runs are still delivered."""
    response = api.post(
        "/api/v1/jobs",
        {
            "name": name,
            "schedule": {"type": "once", "run_at": "2099-01-01T00:00:00Z"},
            "target": {"url": url, "body": {"job": name}},
            "retry": {"max_attempts": max_attempts, "initial_backoff_seconds": 1, "max_backoff_seconds": 2},
            "enabled": False,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    return JobDefinition.objects.get(id=response.json()["id"])


def queued_run(job: JobDefinition, now) -> JobRun:
    return JobRun.objects.create(
        tenant_id=job.tenant_id,
        definition=job,
        partition=job.partition,
        priority=job.priority,
        scheduled_for=now,
        trigger=Trigger.MANUAL,
        status=RunStatus.QUEUED,
        available_at=now,
        queued_at=now,
    )


def test_a_hostile_endpoint_does_not_touch_the_runs_it_shares_a_chunk_with(chime, api, other_api, receiver, hostile):
    hostile_jobs = {path: paused_job(other_api, f"a-{path}", f"{hostile.url}/{path}", 1) for path in HOSTILE_REPLIES}
    normal_jobs = [paused_job(api, f"b-{n}", f"{receiver.url}/b-{n}", 3) for n in range(10)]
    now = timezone.now()
    hostile_runs = {path: queued_run(job, now) for path, job in hostile_jobs.items()}
    normal_runs = [queued_run(job, now) for job in normal_jobs]
    mixed = [*normal_runs[:5], *hostile_runs.values(), *normal_runs[5:]]
    publish_runs([str(run.id) for run in mixed], priority="default")  # one message: one chunk

    terminal = (RunStatus.SUCCEEDED, RunStatus.FAILED)
    wait_until(
        lambda: not JobRun.objects.filter(id__in=[r.id for r in mixed]).exclude(status__in=terminal).exists(),
        timeout=90,
        message="every run terminal",
    )

    for run in normal_runs:
        run.refresh_from_db()
        attempts = list(run.attempts.all())
        assert run.status == RunStatus.SUCCEEDED, (run.status, run.status_reason)
        assert [(a.number, a.status_code, a.error_kind) for a in attempts] == [(1, 200, "")]
        assert len(receiver.received(lambda d, run=run: d.webhook_id == str(run.id))) == 1, "delivered once"

    for path, run in hostile_runs.items():
        run.refresh_from_db()
        attempts = list(run.attempts.all())
        assert len(attempts) == 1, (path, run.status, [a.error_kind for a in attempts])
        attempt = attempts[0]
        assert attempt.error_kind != "worker_lost", path
        stored = [attempt.error, attempt.response_excerpt, run.status_reason, *attempt.request_headers.values()]
        assert not any("\x00" in text for text in stored), path
        assert len(attempt.response_excerpt) <= 4096 and len(attempt.error) <= 1000, path

    by_path = {path: run.attempts.get() for path, run in hostile_runs.items()}
    assert (by_path["nul"].status_code, by_path["nul"].response_excerpt) == (200, "ok\ufffd")
    assert by_path["big"].status_code == 200 and 0 < len(by_path["big"].response_excerpt) <= 4096
    assert by_path["utf8"].status_code == 200 and "\ufffd" in by_path["utf8"].response_excerpt
    assert by_path["status"].status_code is None and by_path["status"].error_kind == "network"
    assert hostile_runs["nul"].status == RunStatus.SUCCEEDED
