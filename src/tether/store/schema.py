"""The tables of the readable record, as SQLAlchemy Core sees them (``migrations`` builds them)."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("execution_id", String, primary_key=True),
    Column("task_id", String, nullable=False),
    Column("caller", String, nullable=False),
    Column("status", String, nullable=False),
    Column("message", Text, nullable=False),
    Column("data", Text, nullable=False),
    Column("params", Text, nullable=False),
    Column("resources", Text, nullable=False),
    Column("background", Integer, nullable=False),
    Column("detached", Integer, nullable=False),
    Column("pid", Integer),
    Column("create_time", Float),
    Column("exit_code", Integer),
    Column("duration_seconds", Float, nullable=False),
    Column("created_at", String, nullable=False),
    Column("updated_at", String, nullable=False),
    Column("ended_at", String),
    Column("origin", String),
    Column("starter_pid", Integer),
    Column("starter_create_time", Float),
    Column("confirmation", String),
    Column("confirmed_by", String),
    Column("step_id", String),
    Column("installation", String),
    Column("host", String),
)

threads = Table(
    "threads",
    metadata,
    Column("thread_id", String, primary_key=True),
    Column("title", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("folded", Integer, nullable=False),
    Column("pending", Text),
    Column("turns", Integer, nullable=False),
    Column("created_at", String, nullable=False),
    Column("updated_at", String, nullable=False),
    Column("agent", String),
    Column("parent", String),
    Column("private", Integer, nullable=False),  # 1: nothing from it is remembered (``store/memories.py``)
)

# Named agents (``store/agents.py``): a persona, a model, grants within the agent caller's tasks.
agents = Table(
    "agents",
    metadata,
    Column("name", String, primary_key=True),
    Column("description", Text, nullable=False),
    Column("persona", Text, nullable=False),
    Column("model", String),
    Column("language", String),
    Column("grants", Text, nullable=False),
    Column("aliases", Text, nullable=False),
    Column("memory", String, nullable=False),
    Column("channel", String),
    Column("created_at", String, nullable=False),
    Column("updated_at", String, nullable=False),
)

deleted_threads = Table(
    "deleted_threads",
    metadata,
    Column("thread_id", String, primary_key=True),
    Column("deleted_at", String, nullable=False),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("artifact_id", Integer, primary_key=True, autoincrement=True),
    Column("origin", String),
    Column("thread_id", String),
    Column("step_id", String),
    Column("execution_id", String, nullable=False),
    Column("format", String, nullable=False),
    Column("name", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("size", Integer, nullable=False),
    Column("created_at", String, nullable=False),
    Column("superseded_at", String),
    Column("installation", String),
    Column("host", String),
)

turns = Table(
    "turns",
    metadata,
    Column("thread_id", String, primary_key=True),
    Column("turn", Integer, primary_key=True),
    Column("status", String, nullable=False),
    Column("message", Text, nullable=False),
    Column("final", Text, nullable=False),
    Column("owner_pid", Integer),
    Column("owner_create_time", Float),
    Column("started_at", String, nullable=False),
    Column("ended_at", String),
    Column("installation", String),
    Column("host", String),
)

messages = Table(
    "messages",
    metadata,
    Column("thread_id", String, primary_key=True),
    Column("turn", Integer, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("message", Text, nullable=False),
    Column("created_at", String, nullable=False),
)

steps = Table(
    "steps",
    metadata,
    Column("step_id", String, primary_key=True),
    Column("thread_id", String, nullable=False),
    Column("turn", Integer, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("kind", String, nullable=False),
    Column("status", String, nullable=False),
    Column("tool", String),
    Column("args", Text),
    Column("result", Text),
    Column("text", Text, nullable=False),
    Column("execution_id", String),
    Column("call_id", String),
    Column("created_at", String, nullable=False),
    Column("updated_at", String),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("kind", String, nullable=False),
    Column("topic", String, nullable=False),
    Column("payload", Text, nullable=False),
    Column("installation", String),
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String, primary_key=True),
    Column("goal", Text, nullable=False),
    Column("status", String, nullable=False),
    Column("plan", Text, nullable=False),
    Column("caller", String, nullable=False),
    Column("segment", Integer, nullable=False),
    Column("plan_version", Integer, nullable=False),
    Column("rev", Integer, nullable=False, server_default="0"),
    Column("message", Text, nullable=False),
    Column("created_at", String, nullable=False),
    Column("updated_at", String, nullable=False),
    Column("ended_at", String),
    Column("installation", String),
    Column("host", String),
    Column("planning", Text, nullable=False, server_default="[]"),
)

run_tasks = Table(
    "run_tasks",
    metadata,
    Column("run_id", String, primary_key=True),
    Column("task_id", String, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("status", String, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("iterations", Integer, nullable=False),
    Column("message", Text, nullable=False),
    Column("diagnostics", Text, nullable=False),
    Column("outputs", Text, nullable=False),
    Column("review", Text),
    Column("overrides", Text, nullable=False),
    Column("started_at", String),
    Column("ended_at", String),
    Column("updated_at", String, nullable=False),
    Column("rev", Integer, nullable=False, server_default="0"),
)

# Tasks of this installation's runs waiting for a resource another job holds: the earliest asked goes
# first when it frees (a busy resource is a wait in the order asked, never a failure).
resource_waits = Table(
    "resource_waits",
    metadata,
    Column("resource", String, primary_key=True),
    Column("run_id", String, primary_key=True),
    Column("task_id", String, primary_key=True),
    Column("since", Float, nullable=False),
    Column("installation", String, nullable=False),
)

run_attempts = Table(
    "run_attempts",
    metadata,
    Column("run_id", String, primary_key=True),
    Column("task_id", String, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("execution_id", String, nullable=False),
    Column("status", String, nullable=False),
    Column("message", Text, nullable=False),
    Column("how", Text, nullable=False),
    Column("started_at", String, nullable=False),
    Column("ended_at", String),
    Column("duration_seconds", Float, nullable=False),
    Column("installation", String),
    Column("host", String),
)

workers = Table(
    "workers",
    metadata,
    Column("executor_id", String, primary_key=True),
    Column("installation", String, nullable=False),
    Column("node", String, nullable=False),
    Column("machine", String, nullable=False),
    Column("home", String, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("resources", Text, nullable=False),
    Column("version", String, primary_key=True),
    Column("status", String, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("beat_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("taken_by", String),
    Column("recovered_at", Float),
)

resource_leases = Table(
    "resource_leases",
    metadata,
    Column("installation", String, primary_key=True),
    Column("resource", String, primary_key=True),
    Column("holder", String, nullable=False),
    Column("expires_at", Float, nullable=False),
)

job_requests = Table(
    "job_requests",
    metadata,
    Column("execution_id", String, primary_key=True),
    Column("stop_reason", Text),
    Column("requested_by", String),
    Column("requested_at", Float),
    Column("log_tail", Text),
    Column("tail_at", Float),
    Column("followed_at", Float),
)
