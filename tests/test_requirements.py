"""The lock files (requirements/*.txt, written by `./chime lock` from requirements/*.in).

What a deploy installs must be what the suite ran on: every package, transitive ones too, pinned
to one version with its hashes (a floating redis-py 8 once came in through celery[redis] and broke
the live dashboard), and dev.txt / bench.txt must agree with base.txt on every package they share.
These checks read the files only: re-resolving needs the package index (`./chime lock`).
"""

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements"
LOCKS = ("base", "dev", "bench")
LAYERS = [("base", "dev"), ("dev", "bench")]  # (lower, upper): upper pins everything lower pins, the same way


def logical_lines(path: Path) -> list[str]:
    """Requirement lines with their `\\` continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = (re.sub(r"(^|\s)#.*", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


def pins(name: str) -> dict[tuple[str, str], tuple[str, frozenset[str]]]:
    """{(package, marker): (version, hashes)} of requirements/NAME.txt. A universal lock may pin a
    package twice under disjoint markers (one version on CPython, another on PyPy)."""
    result = {}
    for line in logical_lines(REQUIREMENTS / f"{name}.txt"):
        spec, *options = re.split(r"\s+--", line)
        assert not spec.startswith("-"), f"{name}.txt: option line {line!r} (a lock holds only pins)"
        requirement = Requirement(spec)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{name}.txt: {spec!r} is not pinned to one version"
        hashes = frozenset(option.removeprefix("hash=") for option in options if option.startswith("hash="))
        assert hashes, f"{name}.txt: {spec!r} has no hash"
        key = (canonicalize_name(requirement.name), str(requirement.marker or ""))
        assert key not in result, f"{name}.txt pins {key} twice"
        result[key] = (specifier.version, hashes)
    return result


def intent(name: str) -> list[Requirement]:
    """The top-level requirements of requirements/NAME.in, following its -r includes."""
    result = []
    for line in logical_lines(REQUIREMENTS / f"{name}.in"):
        if line.startswith("-r "):
            result += intent(line.removeprefix("-r ").strip().removesuffix(".in"))
        elif not line.startswith("-c "):
            result.append(Requirement(line))
    return result


@pytest.mark.parametrize("name", LOCKS)
def test_every_package_is_pinned_with_hashes(name):
    locked = pins(name)
    assert len(locked) > 10


def versions(name: str) -> dict[str, set[tuple[str, frozenset[str]]]]:
    """{package: {(version, hashes)}} of a lock, whatever the markers."""
    result: dict[str, set] = {}
    for (package, _marker), pin in pins(name).items():
        result.setdefault(package, set()).add(pin)
    return result


@pytest.mark.parametrize("lower,upper", LAYERS)
def test_upper_layers_pin_every_shared_package_like_the_lower_one(lower, upper):
    """Same versions and hashes. Markers may be wider above: bench's django-celery-beat needs
    tzdata everywhere, base only on Windows."""
    below, above = versions(lower), versions(upper)
    missing = sorted(set(below) - set(above))
    assert not missing, f"{upper}.txt lacks what {lower}.txt pins: {missing}"
    differ = {
        package: (sorted(v for v, _ in below[package]), sorted(v for v, _ in above[package]))
        for package in below
        if below[package] != above[package]
    }
    assert not differ, f"{upper}.txt pins these unlike {lower}.txt (versions or hashes): {differ}"


@pytest.mark.parametrize("name", LOCKS)
def test_each_lock_satisfies_its_intent(name):
    """A package added to an .in file without `./chime lock` afterwards shows up here."""
    locked = {package: {version for version, _ in pinned} for package, pinned in versions(name).items()}
    for requirement in intent(name):
        package = canonicalize_name(requirement.name)
        assert package in locked, f"{name}.in wants {requirement}, {name}.txt lacks it: run ./chime lock"
        for version in locked[package]:
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{name}.txt pins {package}=={version} outside {name}.in's {requirement}: run ./chime lock"
            )


def test_the_runtime_lock_has_what_the_settings_use():
    """Installed through extras or imported directly, so an .in line alone does not show them."""
    locked = {package for package, _marker in pins("base")}
    assert {"psycopg-binary", "psycopg-pool", "redis", "channels-redis", "uvloop"} <= locked
