"""The private servers' ports (bench/chaos/servers.py free_port): a port one process picked is
never handed to another, nor twice to the same one, even before its server listens. CI once failed
with two pickers on one port (tests/chaos, "Address already in use" at redis-server's start)."""

import subprocess
import sys
import textwrap

from bench.chaos import servers
from bench.chaos.processes import ROOT


def _pick_sequence(monkeypatch, ports):
    """free_port draws these ports first, in order (the real picker would draw them at random)."""
    draws = iter(ports)
    monkeypatch.setattr(servers.random, "randint", lambda low, high: next(draws))


def test_a_port_another_live_process_picked_is_not_handed_out(monkeypatch):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import random, sys
                from bench.chaos import servers
                random.seed()
                print(servers.free_port(), flush=True)
                sys.stdin.read()  # hold the reservation until the test closes our stdin
                """
            ),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        taken = int(holder.stdout.readline())
        other = 20000 + (taken - 20000 + 1) % 10000
        _pick_sequence(monkeypatch, [taken, other, other + 1])
        # Nothing listens on `taken` (the holder never started a server): a bind test alone passes.
        assert servers.free_port() != taken
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_a_port_is_handed_out_once_per_process_even_before_its_server_starts(monkeypatch):
    first = servers.free_port()
    other = 20000 + (first - 20000 + 1) % 10000
    _pick_sequence(monkeypatch, [first, other, other + 1])
    assert servers.free_port() != first


def test_a_reservation_ends_with_its_process(monkeypatch):
    out = subprocess.run(
        [sys.executable, "-c", "from bench.chaos import servers; print(servers.free_port())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    port = int(out.stdout)
    _pick_sequence(monkeypatch, [port])
    assert servers.free_port() == port
