"""``tether doctor``: check the setup and say what to fix.

Each check is one line: what was checked, ok / warn / fail, and for anything not ok the one thing to
do about it. The model check makes one cheap request (``GET {base_url}/models``) when a model is
configured; the offline model needs nothing.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


def check_home(home: str | None) -> tuple[Check, Path | None]:
    from tether.config import resolve_home
    from tether.errors import ConfigError

    try:
        path = resolve_home(home)
    except ConfigError as exc:
        return Check(name="home", status=FAIL, detail=exc.message, fix="give --home a folder you own"), None
    mode = stat.S_IMODE(path.stat().st_mode)
    if not os.access(path, os.W_OK):
        return Check(
            name="home", status=FAIL, detail=f"{path} is not writable", fix="make it yours (chown)"
        ), path
    if mode & 0o077:
        return (
            Check(
                name="home",
                status=WARN,
                detail=f"{path} is readable by others (mode {mode:o})",
                fix=f"chmod 700 {path}",
            ),
            path,
        )
    return Check(name="home", status=OK, detail=f"{path} (private)"), path


def check_settings(home: Path) -> Check:
    from tether.config import SETTINGS_FILE

    problems, fixes = settings_problems(home)
    if problems:
        return Check(name="settings", status=FAIL, detail="; ".join(problems), fix="; ".join(fixes))
    exists = (home / SETTINGS_FILE).exists()
    return Check(
        name="settings", status=OK, detail=SETTINGS_FILE if exists else "defaults (no settings.toml)"
    )


def settings_problems(home: Path) -> tuple[list[str], list[str]]:
    """Every invalid setting of ``home`` (not only the first), each naming where it was set (the file
    or an environment variable), the key and what is allowed; and what to do about them."""
    import difflib

    from tether.config import SECTIONS, SETTINGS_FILE, read_settings_file
    from tether.errors import ConfigError

    path = home / SETTINGS_FILE
    try:
        document = read_settings_file(home)
    except ConfigError as exc:  # not TOML, an unknown section: the message names the file
        return [exc.message], [f"edit {path}"]
    in_file: list[str] = []
    keys: list[str] = []
    other: list[str] = []
    for name, section in SECTIONS.items():
        before = len(in_file)
        for key, value in document.get(name, {}).items():
            if key not in section.model_fields:
                close = difflib.get_close_matches(key, list(section.model_fields), n=1, cutoff=0.6)
                known = (
                    f"did you mean {close[0]!r}?" if close else f"known: {', '.join(section.model_fields)}"
                )
                in_file.append(f"[{name}].{key} is not a setting ({known})")
            elif (why := _setting_problem(section, key, value)) is not None:
                in_file.append(f"[{name}].{key} = {_shown(value)} is not allowed: {why}")
            else:
                continue
            keys.append(f"[{name}].{key}")
        if len(in_file) == before:  # a variable, or a rule across keys: the loader's own words
            try:
                section.load(home)
            except ConfigError as exc:
                other.append(_sourced(exc.message, section, path))
    problems = ([f"{path}: {'; '.join(in_file)}"] if in_file else []) + other
    fixes = [f"edit {', '.join(keys)} in {path}"] if keys else []
    variables = [v for v in other if v.startswith("TETHER_")]
    fixes += [f"fix or unset {v.partition(':')[0]}" for v in variables]
    fixes += [f"edit {path}"] if len(variables) < len(other) and not keys else []
    return problems, fixes


def _setting_problem(section: Any, key: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for ``[section].key`` (None if it is, or if the key is unknown)."""
    from typing import Annotated

    from pydantic import ConfigDict, TypeAdapter, ValidationError

    field = section.model_fields.get(key)
    if field is None:
        return None
    annotation: Any = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    try:
        TypeAdapter(annotation, config=ConfigDict(strict=True, allow_inf_nan=False)).validate_python(value)
    except ValidationError as exc:
        said = [
            e["msg"].removeprefix("Value error, ").replace("Input should be", "it must be")
            for e in exc.errors()
        ]
        return "; ".join(dict.fromkeys(said))
    except Exception:  # a type TypeAdapter cannot build alone: the section's load says what is wrong
        return None
    return None


def _sourced(message: str, section: Any, path: Path) -> str:
    """The loader's message, saying where the setting came from when it does not already."""
    import os

    if str(path) in message:
        return message
    variables = [
        f"TETHER_{key.upper()}" for key in section.model_fields if f"TETHER_{key.upper()}" in os.environ
    ]
    source = " or ".join(variables) if variables else str(path)
    return f"{source}: {message.removeprefix('invalid setting: ')}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


DAMAGED_FIX = "move it away to start afresh (tether creates a new one), or put back a copy you kept"


def check_store(home: Path) -> Check:
    from tether.errors import TetherError
    from tether.runtime import Runtime

    try:
        runtime = Runtime.open(home)
        try:
            runtime.jobs.list(limit=1)
            url = f"{runtime.db.dialect} {runtime.db.where}"
            full = runtime.db.full
            problems = [] if full else _integrity(runtime.db)
        finally:
            runtime.close()
    except TetherError as exc:
        # Damage can stop the store from opening at all (where it lies decides when it is read).
        damaged = "damaged" in exc.message
        return Check(
            name="store",
            status=FAIL,
            detail=exc.message,
            fix=DAMAGED_FIX if damaged else "see `[store].database_url`",
        )
    if full:  # readable as last saved, but nothing can be recorded
        return Check(name="store", status=FAIL, detail=full, fix="free some space on that disk")
    if problems:
        return Check(
            name="store",
            status=FAIL,
            detail=f"the store {url} is damaged: {'; '.join(problems)}",
            fix=DAMAGED_FIX,
        )
    return Check(name="store", status=OK, detail=url)


INTEGRITY_PROBLEMS_SHOWN = 3


def _integrity(db: Any) -> list[str]:
    """What SQLite's integrity check finds wrong with every page of the file (reading one row, as
    the other checks do, passes a file damaged past its first pages); PostgreSQL checks its own."""
    if not db.is_sqlite:
        return []
    from sqlalchemy.exc import DBAPIError

    try:
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql(f"PRAGMA integrity_check({INTEGRITY_PROBLEMS_SHOWN})").fetchall()
    except DBAPIError as exc:
        return [str(exc.orig or exc).splitlines()[0][:200]]
    found = [str(row[0])[:200] for row in rows]
    return [] if found == ["ok"] else found


def check_registry(ref: str) -> Check:
    from tether.errors import TetherError
    from tether.interfaces.base import load_registry

    try:
        registry = load_registry(ref)
    except TetherError as exc:
        return Check(
            name="registry",
            status=FAIL,
            detail=exc.message,
            fix="check --registry / TETHER_REGISTRY (module:attribute, importable from this folder)",
        )
    return Check(
        name="registry", status=OK, detail=f"{ref} ({len(registry.for_caller('cli'))} tasks for cli)"
    )


def check_keyring() -> Check:
    from tether.credentials import backend_name, backend_problem

    problem = backend_problem()
    if problem is not None:
        return Check(
            name="keyring",
            status=WARN,
            detail=problem,
            fix="keys can come from TETHER_API_KEY_<PROVIDER> in the environment instead",
        )
    return Check(name="keyring", status=OK, detail=backend_name())


def check_model(home: Path) -> Check:
    from tether.config import ModelSettings
    from tether.credentials import env_names, get_key
    from tether.errors import TetherError
    from tether.models.factory import resolve

    try:
        settings = ModelSettings.load(home)
        choice = resolve(home, settings)
    except TetherError as exc:
        return Check(name="model", status=FAIL, detail=exc.message, fix="fix [model] in settings.toml")
    if not choice.model:
        return Check(name="model", status=OK, detail="offline planner (no key, no network)")
    key = get_key(settings.provider)
    if key is None and choice.needs_key:
        return Check(
            name="model",
            status=FAIL,
            detail=f"{choice.label} at {choice.base_url}: no key",
            fix=f"run `tether auth set {settings.provider}` or set {env_names(settings.provider)[0]}",
        )
    return _reach(choice, key)


def _reach(choice: Any, key: str | None) -> Check:
    import httpx

    from tether.errors import ModelRequestsForbidden
    from tether.models.base import check_request_allowed

    label = f"{choice.label} at {choice.base_url}"
    try:
        check_request_allowed(choice.base_url)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        response = httpx.get(f"{choice.base_url.rstrip('/')}/models", headers=headers, timeout=10.0)
    except ModelRequestsForbidden as exc:
        return Check(name="model", status=WARN, detail=f"{label}: not tried ({exc.message})")
    except httpx.HTTPError as exc:
        return Check(
            name="model",
            status=FAIL,
            detail=f"{label}: cannot be reached ({type(exc).__name__})",
            fix="start the server, or check base_url and your network",
        )
    if response.status_code in (401, 403):
        return Check(
            name="model",
            status=FAIL,
            detail=f"{label}: the key was refused (HTTP {response.status_code})",
            fix=f"store the right key: tether auth set {choice.provider}",
        )
    if response.status_code >= 400:
        return Check(
            name="model",
            status=WARN,
            detail=f"{label}: reachable, but GET /models answered HTTP {response.status_code}",
        )
    try:
        ids = [str(m.get("id")) for m in response.json().get("data", []) if isinstance(m, dict)]
    except ValueError:
        ids = []
    if ids and choice.model not in ids and not any(choice.model in i for i in ids):
        shown = ", ".join(ids[:5])
        return Check(
            name="model",
            status=WARN,
            detail=f"{label}: reachable, but it does not list {choice.model!r} (it has: {shown})",
            fix="check [model].model",
        )
    return Check(name="model", status=OK, detail=f"{label}: reachable")


def check_documents() -> Check:
    """The CJK font documents need (pdf and pptx in Chinese)."""
    from tether.artifacts.fonts import FontMissing, find_font

    try:
        font = find_font()
    except FontMissing as exc:
        return Check(name="documents", status=WARN, detail="no CJK font: Chinese documents cannot be made",
                     fix=f"apt-get install {exc.data.get('package', 'fonts-noto-cjk')}")  # fmt: skip
    return Check(name="documents", status=OK, detail=f"{font.family} ({font.path})")


def check_research(path: Path) -> Check:
    from tether.toolkits.web.specs import search_available

    why = search_available(path)
    if why:
        return Check(name="research", status=WARN, detail="web search is off (reading URLs works)", fix=why)
    from tether.config import ResearchSettings

    return Check(
        name="research", status=OK, detail=f"web search through {ResearchSettings.load(path).search_provider}"
    )


def check_skills(path: Path) -> Check:
    from tether.toolkits.skills.library import SkillLibrary

    library = SkillLibrary(path)
    names = ", ".join(library.names()) or "none"
    if library.problems:
        first = next(iter(library.problems.values()))
        detail = f"{len(library.problems)} left out; installed: {names}"
        return Check(name="skills", status=WARN, detail=detail, fix=first)
    return Check(name="skills", status=OK, detail=names)


def check_mcp(path: Path) -> Check | None:
    """The MCP servers this home imports tools from (None when it configures none): the SDK, each
    server's kept tool list and its secrets. Every problem is named (one hid the others), the worst
    decides the status."""
    from tether.errors import ConfigError
    from tether.toolkits.mcp import specs
    from tether.toolkits.mcp.servers import stored_secrets

    try:
        plans = specs.plan(path)
    except ConfigError as exc:
        return Check(name="mcp", status=FAIL, detail="[[mcp.servers]] is not valid", fix=exc.message)
    if not plans:
        return None
    imported = sum(1 for plan in plans for tool in plan.tools if tool.spec is not None)
    detail = f"{len(plans)} servers, {imported} tools imported"
    missing = specs.sdk_problem(path)
    problems = [missing] if missing else []
    for plan in plans:
        problems += [f"{plan.server.name}: {plan.problem}"] if plan.problem else []
        stored = stored_secrets(plan.server)
        problems += [
            f"{plan.server.name}: store its secret {name} in the keyring: `tether auth set {entry}`"
            for name, entry in plan.server.secret_names().items()
            if stored[name] is None
        ]
    if not problems:
        return Check(name="mcp", status=OK, detail=detail)
    return Check(name="mcp", status=FAIL if missing else WARN, detail=detail, fix="; ".join(problems))


def run_checks(home: str | None, registry_ref: str) -> list[Check]:
    checks: list[Check] = []
    first, path = check_home(home)
    checks.append(first)
    if path is None:
        return checks
    settings = check_settings(path)
    checks.append(settings)
    if settings.status == FAIL:  # the store opens with the settings: its check would repeat their error
        checks.append(Check(name="store", status=WARN, detail="not checked: fix the settings first"))
    else:
        checks.append(check_store(path))
    checks.append(check_registry(registry_ref))
    checks.append(check_keyring())
    if settings.status != FAIL or "[model]" in settings.detail:
        checks.append(check_model(path))
    checks.append(check_documents())
    if settings.status != FAIL:
        checks.append(check_research(path))
        mcp = check_mcp(path)
        if mcp is not None:
            checks.append(mcp)
    checks.append(check_skills(path))
    return checks
