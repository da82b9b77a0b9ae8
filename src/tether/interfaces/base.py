"""What every command shares, and nothing else: the root Typer app and its global options, the
registry and executor a command works with, and the guard that ends every command in one line (or
one JSON document) and an exit code.

Command modules (``task_cli``, ``job_cli``, ``home_cli``, ``agent_cli``, ``flow_cli``, ``web_cli``,
``artifacts_cli``) import this module; it imports none of them. ``cli.py`` composes them into the
``tether`` command.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from tether.errors import ConfigError
from tether.interfaces.render import print_error

if TYPE_CHECKING:
    from tether.execution.executor import Executor
    from tether.tasks.spec import Registry

DEFAULT_REGISTRY = "tether.toolkits.standard:registry"
REGISTRY_ENV = "TETHER_REGISTRY"

app = typer.Typer(
    name="tether",
    help="Run audited tasks through tether's executor, and control their jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")]


class State:
    """The global options of this command: set once by the app's callback, read by the commands."""

    home: str | None = None
    registry_ref: str = DEFAULT_REGISTRY


state = State()


def _version(value: bool) -> None:
    if value:
        from tether import __version__

        print(f"tether {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    home: Annotated[
        str | None, typer.Option(help="The tether home (default: $TETHER_HOME or ~/.tether).")
    ] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            help=f"The task registry, as module:attribute (default: ${REGISTRY_ENV}, else {DEFAULT_REGISTRY}:"
            " every toolkit tether ships)."
        ),
    ] = None,
) -> None:
    from tether.config import HOME_ENV

    if home is not None and not home.strip():
        raise ConfigError("--home is empty: give the tether home as a folder path")
    if home is None and os.environ.get(HOME_ENV) is not None and not os.environ[HOME_ENV].strip():
        raise ConfigError(f"{HOME_ENV} is set but empty: give the tether home as a folder path, or unset it")
    state.home = home
    state.registry_ref = registry or os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY


def load_registry(ref: str) -> Registry:
    """``Registry.load``, where your own registry lives next to you: when its package is importable
    from nowhere else, the folder the command runs from is (as with uvicorn or celery; a console
    script does not put it on sys.path). Appended, so it never shadows an installed module."""
    import importlib.util

    from tether.tasks.spec import Registry

    top = ref.partition(":")[0].split(".")[0]
    with contextlib.suppress(OSError, ValueError, ImportError):
        here = os.getcwd()
        if top and here not in sys.path and importlib.util.find_spec(top) is None:
            sys.path.append(here)
    return Registry.load(ref)


def registry() -> Registry:
    """The registry this command was given (``--registry``, ``$TETHER_REGISTRY`` or the default), as
    this command's home sees it (with the tasks its settings add: tools imported from MCP servers)."""
    from tether.config import resolve_home

    return load_registry(state.registry_ref).for_home(resolve_home(state.home))


def open_executor() -> Executor:
    """An executor on this command's home and registry, its store maintained (use it in ``with``)."""
    from tether.execution.executor import Executor
    from tether.supervisor.cluster import DbosForwarder

    made = Executor(load_registry(state.registry_ref), home=state.home)  # it adds the home's own tasks
    made.placement.forwarder = DbosForwarder(made.runtime)  # a call for another node's resource goes there
    made.maintain()
    return made


def fail(message: str, *, as_json: bool, code: str = "usage", exit_code: int = 2) -> NoReturn:
    print_error(message, as_json=as_json, code=code)
    raise typer.Exit(exit_code)


def guarded(as_json: bool, body: Callable[[], int]) -> None:
    """Run a command's body: whatever it raises ends in one line (or one JSON document) and a code."""
    from tether.interfaces.guard import fail_for

    try:
        code = body()
    except typer.Exit:
        raise
    except (Exception, KeyboardInterrupt) as exc:
        code = fail_for(exc, as_json)
    raise typer.Exit(code)
