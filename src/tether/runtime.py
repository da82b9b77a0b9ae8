"""The runtime of one tether home: what every layer above the stores is handed, in one object.

``Runtime.open(home)`` resolves the home, validates every settings section, opens the database (the
home's SQLite file, or the URL in ``[store].database_url``) and gives:

- ``jobs`` (the job table), ``threads`` (conversations), ``events`` (the persisted event log) and
  ``bus`` (in-process fan-out of events that are on record);
- ``installation``: the home's identity (``<home>/installation``) and host: several homes may share one
  database, and each acts only on the rows it owns;
- ``resilience``: the one retry + circuit-breaker registry, so one model service has one breaker;
- the settings of every section.

The executor and the conversation session receive it instead of reaching for files in the home; tests
hand them one on a throw-away home or on PostgreSQL. There is no process-wide instance.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.config import (
    AgentSettings,
    ClusterSettings,
    ModelSettings,
    Settings,
    StoreSettings,
    read_settings_file,
    resolve_home,
)
from tether.errors import ConfigError
from tether.events import EventBus
from tether.installation import installation_id, node_name
from tether.resilience import ResilienceRegistry, breakers_dir
from tether.store.agents import AgentStore
from tether.store.artifacts import SqlArtifactStore
from tether.store.database import Database, default_url
from tether.store.events import EventLog
from tether.store.initiative import InitiativeStore
from tether.store.jobs import SqlJobStore
from tether.store.memories import MemoryStore
from tether.store.notifications import NotificationStore
from tether.store.runs_sql import SqlRunStore
from tether.store.threads_sql import SqlThreadStore
from tether.store.vectors import MemoryVectors

DATABASE_CREDENTIAL = "database"


def database_url(home: Path, store: StoreSettings) -> str:
    """The URL of the home's database, with its password (if it needs one) from the keyring or the
    environment — never from settings.toml."""
    if not store.database_url:
        return default_url(home)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    written = read_settings_file(home).get("store", {}).get("database_url")
    try:
        url = make_url(store.database_url)
        if written and make_url(written).password is not None:
            raise ConfigError(
                "settings.toml holds a database password: remove it from [store].database_url and run "
                f"`tether auth set {DATABASE_CREDENTIAL}` (or set TETHER_API_KEY_DATABASE)"
            )
    except ArgumentError as exc:
        raise ConfigError(f"[store].database_url is not a database URL: {exc}") from exc
    if url.username and url.password is None:
        from tether.credentials import get_key

        password = get_key(DATABASE_CREDENTIAL)
        if password:
            url = url.set(password=password)
    return url.render_as_string(hide_password=False)


class Runtime:
    def __init__(
        self,
        *,
        home: Path,
        settings: Settings,
        store_settings: StoreSettings,
        model_settings: ModelSettings,
        agent_settings: AgentSettings,
        db: Database,
        cluster_settings: ClusterSettings | None = None,
    ) -> None:
        self.home = home
        self.cluster_settings = cluster_settings or ClusterSettings()
        self.settings = settings
        self.store_settings = store_settings
        self.model_settings = model_settings
        self.agent_settings = agent_settings
        self.db = db
        self.installation = db.installation  # whose rows this runtime acts on in a shared database
        self.jobs = SqlJobStore(db)
        self.threads = SqlThreadStore(db)
        self.agents = AgentStore(db)
        self.memories = MemoryStore(db)
        self.vectors = MemoryVectors(db)
        self.initiative = InitiativeStore(db)
        self.notifications = NotificationStore(db)
        self.events = EventLog(db)
        self.runs = SqlRunStore(db)
        self.artifacts = SqlArtifactStore(db)
        self.bus = EventBus()
        # Breakers keep their state in the home: a service one command found dead stays skipped by the
        # next command until its recovery time, instead of being retried from scratch by each.
        self.resilience = ResilienceRegistry(
            model_settings.retry_policy(), model_settings.breaker_policy(), state_dir=breakers_dir(home)
        )

    @classmethod
    def open(
        cls,
        home: str | os.PathLike[str] | None = None,
        *,
        settings: Settings | None = None,
        store_settings: StoreSettings | None = None,
        model_settings: ModelSettings | None = None,
        agent_settings: AgentSettings | None = None,
        environ: dict[str, str] | None = None,
    ) -> Runtime:
        """The runtime of ``home``; a section given here replaces what the home's settings say."""
        path = resolve_home(home)
        store_settings = store_settings or StoreSettings.load(path, environ)
        runtime_settings = settings or Settings.load(path, environ)
        model = model_settings or ModelSettings.load(path, environ)
        agent = agent_settings or AgentSettings.load(path, environ)
        cluster = ClusterSettings.load(path, environ)
        db = Database(
            database_url(path, store_settings),
            installation=installation_id(path),
            node=node_name(path, cluster.node),
            busy_timeout_s=store_settings.busy_timeout_s,
        )
        return cls(
            home=path,
            settings=runtime_settings,
            store_settings=store_settings,
            model_settings=model,
            agent_settings=agent,
            db=db,
            cluster_settings=cluster,
        )

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
