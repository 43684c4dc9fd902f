"""chimectl: Chime from the command line (built on the SDK).

    chimectl --help                 every command, each with an example
    chimectl --install-completion   shell completion (bash, zsh, fish, PowerShell)

Server and key: ``--url``/``--api-key``, ``CHIME_URL``/``CHIME_API_KEY``, or a profile file
(:mod:`chime_client.cli.config`). ``--json`` on any command prints the API's objects as JSON.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from typer.core import TyperGroup

from chime_client import Client
from chime_client.errors import ApiError, ChimeError

from . import output
from .config import ConfigError, resolve


def _show_failure(error: Exception) -> None:
    """An API error or a config problem: one red message (with the field messages) on stderr."""
    if isinstance(error, ApiError):
        output.errors.print(f"[red]error[/red] {error.status} {error.code}: {escape(error.message)}")
        for field, messages in error.fields.items():
            output.errors.print(f"  [bold]{escape(field)}[/bold]: {escape('; '.join(messages))}")
    else:
        output.errors.print(f"[red]error[/red] {escape(str(error))}")


class _Group(TyperGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (ChimeError, ConfigError) as error:
            _show_failure(error)
            raise typer.Exit(1) from error


app = typer.Typer(
    cls=_Group,
    help="Chime from the command line: jobs, runs, schedules, keys, the signing secret, a local receiver.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    epilog="Example: CHIME_URL=https://chime.example.com CHIME_API_KEY=chime_... chimectl jobs list",
)


class State:
    def __init__(self, url, api_key, profile, json_output):
        self.url, self.api_key, self.profile, self.json = url, api_key, profile, json_output
        self._client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            settings = resolve(self.url, self.api_key, self.profile)
            if not settings.api_key:
                raise ConfigError("no API key: pass --api-key, set CHIME_API_KEY, or add api_key to the profile")
            self._client = Client(settings.url, settings.api_key)
        return self._client


@app.callback()
def _options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="Chime's URL (else CHIME_URL or the profile).")] = None,
    api_key: Annotated[str | None, typer.Option(help="API key (else CHIME_API_KEY or the profile).")] = None,
    profile: Annotated[str | None, typer.Option(help="A profile of the config file (CHIME_PROFILE).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="JSON output for scripts.")] = False,
):
    ctx.obj = State(url, api_key, profile, json_output)


def main() -> None:
    app(prog_name="chimectl")


from . import commands, listen  # noqa: E402, F401  (registers the commands on app)
