"""``tether notify``: where notifications go — channels (the desktop, a webhook, Telegram, e-mail, any
Apprise address), what each is sent, a test, and the log of what was sent or failed. An address carries
tokens and passwords: it is typed (not echoed) into the OS keyring, or read from the environment
(``TETHER_API_KEY_NOTIFY_<NAME>``), never given on the command line or kept in settings.toml."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import typer

from tether.errors import ConfigError
from tether.interfaces.base import JsonFlag, guarded, state
from tether.interfaces.render import out

notify_app = typer.Typer(help="Notification channels: add, list, remove, test; the log of what was sent.")

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
DEFAULT_EVENTS = ("approval", "review", "proactive")


def _runtime() -> Any:
    from tether.runtime import Runtime

    return Runtime.open(state.home)


def _events(given: str) -> tuple[str, ...]:
    from tether.store.notifications import EVENTS

    chosen = tuple(dict.fromkeys(e.strip() for e in given.split(",") if e.strip()))
    wrong = [e for e in chosen if e not in EVENTS]
    if wrong or not chosen:
        raise ConfigError(f"--on takes some of {', '.join(EVENTS)} (comma-separated), not {given!r}")
    return chosen


def _scheme(url: str) -> str:
    import apprise

    if not apprise.Apprise().add(url):
        raise ConfigError(
            "Apprise does not understand that address: e.g. tgram://BOT_TOKEN/CHAT_ID, "
            "mailtos://user:password@host?to=you@example.com, json://host/path, dbus:// (the desktop)"
        )
    return url.partition("://")[0].lower()


@notify_app.command("add")
def add_command(
    name: Annotated[str, typer.Argument(help="A short name: phone, mail, desktop")],
    on: Annotated[
        str, typer.Option("--on", help="What it is sent: approval,review,ended,proactive")
    ] = ",".join(DEFAULT_EVENTS),
    as_json: JsonFlag = False,
) -> None:
    """Add (or change) a channel. Its address is asked for, not echoed, and kept in the OS keyring;
    if TETHER_API_KEY_NOTIFY_<NAME> is set, that is used instead."""

    def body() -> int:
        from tether.credentials import get_key, key_info, set_key
        from tether.supervisor.notify import CURSOR, secret_name

        if not NAME_RE.match(name):
            raise ConfigError(f"a channel's name is a short lowercase word such as phone, not {name!r}")
        events = _events(on)
        secret = secret_name(name)
        info = key_info(secret)
        if info.source == "none":
            url = typer.prompt(
                f"Apprise address for {name} (e.g. tgram://TOKEN/CHAT_ID)", hide_input=True, err=True
            )
            scheme = _scheme(url.strip())
            set_key(secret, url.strip())
            where = "the OS keyring"
        else:
            scheme = _scheme(get_key(secret) or "")
            where = info.source
        with _runtime() as runtime:
            runtime.notifications.add_channel(name, scheme, events)
            runtime.notifications.cursor(CURSOR, runtime.events.last_id())  # from now on, not history
        document = {"channel": name, "scheme": scheme, "events": list(events), "address_from": where}
        if as_json:
            print(json.dumps(document))
        else:
            out.print(f"{name} ({scheme}, address in {where}) is sent: {', '.join(events)}", markup=False)
        return 0

    guarded(as_json, body)


@notify_app.command("list")
def list_command(as_json: JsonFlag = False) -> None:
    """The channels, what each is sent, and where its address comes from (never the address)."""

    def body() -> int:
        from tether.credentials import key_info
        from tether.supervisor.notify import secret_name

        with _runtime() as runtime:
            found = [
                {**c.to_dict(), "address_from": key_info(secret_name(c.name)).source}
                for c in runtime.notifications.channels()
            ]
        if as_json:
            print(json.dumps({"channels": found}))
            return 0
        for c in found:
            out.print(
                f"{c['name']:<12} {c['scheme']:<10} {','.join(c['events']):<34} address: {c['address_from']}",
                markup=False,
            )
        if not found:
            out.print("no channels: `tether notify add phone --on approval,proactive`", markup=False)
        return 0

    guarded(as_json, body)


@notify_app.command("remove")
def remove_command(name: Annotated[str, typer.Argument()], as_json: JsonFlag = False) -> None:
    """Remove a channel and its address from the keyring."""

    def body() -> int:
        from tether.credentials import delete_key
        from tether.errors import CredentialError
        from tether.supervisor.notify import secret_name

        with _runtime() as runtime:
            if not runtime.notifications.remove_channel(name):
                raise ConfigError(f"no channel {name!r}: `tether notify list` shows them")
        try:
            delete_key(secret_name(name))
        except CredentialError:
            pass  # no usable keyring: the address was in the environment
        if as_json:
            print(json.dumps({"removed": name}))
        else:
            out.print(f"removed {name}", markup=False)
        return 0

    guarded(as_json, body)


@notify_app.command("test")
def test_command(name: Annotated[str, typer.Argument()], as_json: JsonFlag = False) -> None:
    """Send a test notification to a channel now, and say whether it arrived at the channel."""

    def body() -> int:
        from tether.config import InitiativeSettings
        from tether.credentials import get_key
        from tether.supervisor.notify import deliver, secret_name

        with _runtime() as runtime:
            if name not in {c.name for c in runtime.notifications.channels()}:
                raise ConfigError(f"no channel {name!r}: `tether notify list` shows them")
            settings = InitiativeSettings.load(runtime.home)
        url = get_key(secret_name(name))
        if not url:
            raise ConfigError(f"no address for {name!r}: `tether notify add {name}` again")
        error = deliver(url, "tether: a test", "If you read this, notifications reach you here.", settings)
        if as_json:
            print(json.dumps({"channel": name, "sent": error is None, "error": error}))
        else:
            out.print(f"sent to {name}" if error is None else f"{name} failed: {error}", markup=False)
        return 0 if error is None else 1

    guarded(as_json, body)


@notify_app.command("log")
def log_command(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000)] = 20, as_json: JsonFlag = False
) -> None:
    """The newest notifications: sent, waiting (quiet hours, a retry) or failed, with the error."""

    def body() -> int:
        with _runtime() as runtime:
            found = [n.to_dict() for n in runtime.notifications.notifications(limit=limit)]
        if as_json:
            print(json.dumps({"notifications": found}, ensure_ascii=False))
            return 0
        for n in found:
            error = f"  ({n['error']})" if n["error"] else ""
            out.print(
                f"#{n['id']:<5} {n['created_at'][:19]}  {n['channel']:<10} {n['event']:<9} {n['status']:<8} "
                f"×{n['attempts']}  {n['title'][:60]}{error[:120]}",
                markup=False,
            )
        if not found:
            out.print("nothing notified yet", markup=False)
        return 0

    guarded(as_json, body)
