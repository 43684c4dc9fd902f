"""``Client`` (sync) and ``AsyncClient``: httpx, an API key, retries, pagination.

from chime_client import Client
chime = Client("https://chime.example.com", api_key="chime_...")
for job in chime.jobs.list(status="active"):
    print(job["name"], job["next_fire_at"])
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from . import __version__
from ._http import API_PREFIX, Call, RetryPolicy, api_root, next_call, result
from .errors import TransportError
from .resources import ApiKeys, Archives, Jobs, Operations, Runs, Schedules, SigningSecrets, StatsResource

FINISHED = {"succeeded", "failed", "cancelled", "skipped"}


class _Base:
    def _setup(self, base_url, api_key, *, timeout, max_retries, max_retry_wait_seconds, headers):
        base_url = base_url or os.environ.get("CHIME_URL")
        api_key = api_key or os.environ.get("CHIME_API_KEY")
        if not base_url or not api_key:
            raise ValueError("base_url and api_key are required (or set CHIME_URL and CHIME_API_KEY)")
        self.base_url = api_root(base_url)
        self.retry = RetryPolicy(max_retries=max_retries, max_retry_wait_seconds=max_retry_wait_seconds)
        self._options = {
            "base_url": self.base_url,
            "timeout": timeout,
            "headers": {
                "Authorization": f"Bearer {api_key}",
                "User-Agent": f"chime-client-python/{__version__}",
                "Accept": "application/json",
                **(headers or {}),
            },
        }
        self.jobs = Jobs(self)
        self.runs = Runs(self)
        self.operations = Operations(self)
        self.api_keys = ApiKeys(self)
        self.archives = Archives(self)
        self.signing_secret = SigningSecrets(self)
        self.schedules = Schedules(self)
        self.stats = StatsResource(self)

    @staticmethod
    def _request(call: Call) -> dict[str, Any]:
        url = call.path if call.path.startswith(API_PREFIX) else API_PREFIX + call.path
        request: dict[str, Any] = {"method": call.method, "url": url, "params": call.params, "headers": call.headers}
        if call.json is not None or call.method in ("POST", "PATCH"):
            request["json"] = call.json if call.json is not None else {}
        return request


class Client(_Base):
    """A synchronous client. ``base_url``: the server (``https://chime.example.com``; a trailing
    ``/api/v1`` is fine). Both default to ``CHIME_URL`` and ``CHIME_API_KEY``. ``headers``: extra
    headers on every request. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait_seconds: float = 30.0,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self._setup(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_wait_seconds=max_retry_wait_seconds,
            headers=headers,
        )
        self._http = httpx.Client(transport=transport, **self._options)

    def _run(self, call: Call) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(**self._request(call))
            except httpx.TransportError as error:
                if not self.retry.should_retry(call, attempt, None):
                    raise TransportError(f"{call.method} {call.path}: {error}") from error
                response = None
            if response is not None and not self.retry.should_retry(call, attempt, response):
                return result(response)
            time.sleep(self.retry.wait(attempt, response))
            attempt += 1

    def _paginate(self, call: Call) -> Iterator[Any]:
        page = self._run(call)
        while True:
            yield from page["results"]
            following = next_call(page.get("next"))
            if following is None:
                return
            page = self._run(following)

    def wait_for_run(self, run_id: str, *, timeout_seconds: float = 60, interval_seconds: float = 0.5):
        """Poll a run until it is finished (succeeded, failed, cancelled, skipped); return it."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            run = self.runs.get(run_id)
            if run["status"] in FINISHED or time.monotonic() > deadline:
                return run
            time.sleep(interval_seconds)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient(_Base):
    """The same operations, awaited: ``await chime.jobs.get(id)``; lists are async iterators:
    ``async for run in chime.runs.list(status="failed")``."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait_seconds: float = 30.0,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._setup(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            max_retry_wait_seconds=max_retry_wait_seconds,
            headers=headers,
        )
        self._http = httpx.AsyncClient(transport=transport, **self._options)

    async def _run(self, call: Call) -> Any:
        attempt = 0
        while True:
            try:
                response = await self._http.request(**self._request(call))
            except httpx.TransportError as error:
                if not self.retry.should_retry(call, attempt, None):
                    raise TransportError(f"{call.method} {call.path}: {error}") from error
                response = None
            if response is not None and not self.retry.should_retry(call, attempt, response):
                return result(response)
            await asyncio.sleep(self.retry.wait(attempt, response))
            attempt += 1

    async def _paginate(self, call: Call) -> AsyncIterator[Any]:
        page = await self._run(call)
        while True:
            for item in page["results"]:
                yield item
            following = next_call(page.get("next"))
            if following is None:
                return
            page = await self._run(following)

    async def wait_for_run(self, run_id: str, *, timeout_seconds: float = 60, interval_seconds: float = 0.5):
        deadline = time.monotonic() + timeout_seconds
        while True:
            run = await self.runs.get(run_id)
            if run["status"] in FINISHED or time.monotonic() > deadline:
                return run
            await asyncio.sleep(interval_seconds)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
