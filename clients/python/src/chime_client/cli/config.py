"""Where chimectl finds the server and the key.

In order: ``--url`` / ``--api-key``; then the profile named by ``--profile`` (or ``CHIME_PROFILE``)
in the config file; then ``CHIME_URL`` / ``CHIME_API_KEY``; then the file's ``default`` profile.
The file is ``$CHIMECTL_CONFIG``, else ``$XDG_CONFIG_HOME/chimectl/config.toml`` (default
``~/.config/chimectl/config.toml``)::

    [default]
    url = "https://chime.example.com"
    api_key = "chime_..."

    [staging]
    url = "https://staging.chime.example.com"
    api_key = "chime_..."
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    pass


def config_path() -> Path:
    if os.environ.get("CHIMECTL_CONFIG"):
        return Path(os.environ["CHIMECTL_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "chimectl" / "config.toml"


def _profiles(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: {error}") from error
    return {name: value for name, value in data.items() if isinstance(value, dict)}


@dataclass
class Settings:
    url: str
    api_key: str | None


def resolve(url: str | None = None, api_key: str | None = None, profile: str | None = None) -> Settings:
    path = config_path()
    profiles = _profiles(path)
    chosen = profile or os.environ.get("CHIME_PROFILE")
    if chosen and chosen not in profiles:
        raise ConfigError(f"no profile [{chosen}] in {path}")
    named = profiles.get(chosen, {}) if chosen else {}
    default = profiles.get("default", {})
    final_url = url or named.get("url") or os.environ.get("CHIME_URL") or default.get("url")
    final_key = api_key or named.get("api_key") or os.environ.get("CHIME_API_KEY") or default.get("api_key")
    if not final_url:
        raise ConfigError(f"no server: pass --url, set CHIME_URL, or add a profile to {path}")
    return Settings(url=final_url, api_key=final_key)
