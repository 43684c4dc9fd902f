"""apps/core/heap.py in a process of its own (freezing the test runner's heap would change every
test after it): what a long-running process loaded is frozen, the young generation's threshold is
CHIME_GC_THRESHOLD, and the collector still frees the cycles the process makes afterwards."""

import subprocess
import sys

from tests.support.processes import ROOT, process_env

SCRIPT = """
import gc, weakref
import django
django.setup()
from apps.core.heap import settle
before = gc.get_threshold()
settle()
class Cycle: pass
made = Cycle(); made.me = made; alive = weakref.ref(made); del made
gc.collect()
print(gc.get_freeze_count(), *before, *gc.get_threshold(), alive() is None)
"""


def settled(threshold: int) -> tuple[int, tuple, tuple, bool]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=process_env(CHIME_GC_THRESHOLD=str(threshold)),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    frozen, b0, b1, b2, a0, a1, a2, freed = done.stdout.split()
    return int(frozen), (int(b0), int(b1), int(b2)), (int(a0), int(a1), int(a2)), freed == "True"


def test_settle_freezes_what_the_process_loaded_and_raises_the_young_threshold():
    frozen, before, after, freed = settled(20_000)
    assert frozen > 50_000, "Django and the app's modules: out of every later collection's walk"
    assert after == (20_000, before[1], before[2])
    assert freed, "a cycle made after settling is still collected"


def test_a_threshold_of_zero_keeps_pythons_own():
    frozen, before, after, freed = settled(0)
    assert frozen > 50_000 and after == before and freed
