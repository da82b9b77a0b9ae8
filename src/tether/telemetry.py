"""OpenTelemetry traces of what tether does, after the GenAI semantic conventions — or nothing at all.

Spans (names and ``gen_ai.*`` attributes as the conventions have them; tether's own under ``tether.*``):

- ``invoke_agent {agent}``: one conversation turn (``agent/session.py``);
- ``chat {model}``: one model call, with the provider, the models asked and answering, the input and
  output tokens the service reported and the finish reason (``agent/decisions.py``);
- ``execute_tool {task}``: one tool call of a turn, with the task, the model's call id, the execution id
  and the outcome (``agent/calls.py``); a delegation's turn hangs under the call that handed it over;
- ``tether.worker {task}``: the worker process that ran it (``execution/worker.py``), a child of the
  call that started it: the executor writes the W3C ``traceparent`` of the current span into the
  worker's request, so the trace crosses the process boundary, and a background job's worker hangs under
  the call that started it for as long as it runs;
- ``invoke_workflow {run}`` and ``flow_task {task}``: a flow run and each attempt of its tasks
  (``supervisor/engine.py``);
- ``tools/call {task}``: one call of an MCP client through ``tether mcp serve``
  (``interfaces/mcp_server.py``), under the client's span when its request's ``_meta`` carries a
  ``traceparent``.

**Nothing when off.** With ``[telemetry] exporter = "none"`` (the default), or without the ``otel``
extra, no ``opentelemetry`` module is imported by tether and every function here returns at once
(``span`` hands back one shared no-op context). A worker configures telemetry only when its request
carries a ``traceparent``, which only a traced caller writes.

**Across crashes.** A turn recovered by DBOS continues its original trace: the turn's identity (trace id,
its own span id, its parent) is decided in the turn's first durable step and replayed from it
(``turn_ids``), and a flow run's and a task attempt's span ids derive from their ids (``ids_for``). A
recovered turn's span therefore has the same id as the one its crashed process never ended, and the
spans that process did export still hang under it: one tree.

Settings: ``[telemetry]`` (``config.TelemetrySettings``): ``exporter`` (``otlp`` sends OTLP/HTTP
protobuf to ``otlp_endpoint``, or where ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT`` say; ``console`` writes spans to stderr), ``service_name`` (unless
``OTEL_SERVICE_NAME`` names one). The SDK reads the rest of the standard ``OTEL_*`` variables itself
in tether's own processes. A worker exports its own span from an allowlisted environment: it inherits
``[telemetry]`` and those three variables (``config.TELEMETRY_VARIABLES``), not the rest — not
``OTEL_EXPORTER_OTLP_HEADERS``, which often holds a collector's key; name it in
``[execution].worker_env`` when the collector needs it for workers' spans too.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import hashlib
import secrets
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# The span ids the next span must have (a recovered turn, a run): read by the SDK's id generator.
_FORCED: contextvars.ContextVar[tuple[str | None, str | None] | None] = contextvars.ContextVar(
    "tether_forced_ids", default=None
)
_lock = threading.Lock()
_state: dict[str, Any] = {}  # "tracer", "provider" once configured; "tried" for each home asked


class _NoSpan:
    """What ``span`` yields when nothing is traced: every call is a no-op."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def error(self, message: str) -> None:
        return None


NO_SPAN = _NoSpan()
_NULL = contextlib.nullcontext(NO_SPAN)


def enabled() -> bool:
    return "tracer" in _state


def configure(home: Path | None = None, *, exporter: Any = None) -> bool:
    """Trace this process as ``home``'s ``[telemetry]`` says (once per process; a later call changes
    nothing); ``exporter`` (an SDK ``SpanExporter``: the tests' in-memory one) traces to it whatever the
    settings say. False when nothing is traced: exporter none, or the ``otel`` extra not installed."""
    if enabled():
        return True
    tried: set[Path | None] = _state.setdefault("tried", set())
    if exporter is None and home in tried:
        return False  # this home's settings said none already: not read again
    with _lock:
        if enabled():
            return True
        if exporter is None:
            tried.add(home)
            settings = _settings(home)
            if settings is None or settings.exporter == "none":
                return False
        else:
            settings = None
        try:
            _start(settings, exporter)
        except ImportError:
            print(
                "tether: [telemetry] is set but the OpenTelemetry SDK is not installed: pip install "
                "'tether[otel]' (nothing is traced)",
                file=sys.stderr,
            )
            return False
    return True


def _settings(home: Path | None) -> Any:
    from tether.config import TelemetrySettings, default_home

    try:
        return TelemetrySettings.load(home or default_home())
    except Exception:  # a bad section is said by the command that reads settings: never fail here
        return None


def _start(settings: Any, exporter: Any) -> None:
    import os

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Ids(RandomIdGenerator):
        """Random ids, except where tether decided them (``_FORCED``)."""

        def generate_span_id(self) -> int:
            forced = _FORCED.get()
            return int(forced[1], 16) if forced and forced[1] else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = _FORCED.get()
            return int(forced[0], 16) if forced and forced[0] else super().generate_trace_id()

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": _service(settings)}
    provider = TracerProvider(resource=Resource.create(attributes), id_generator=Ids())
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stderr: a command's stdout may be --json for a script
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.otlp_endpoint or None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    atexit.register(provider.shutdown)  # what is queued is sent before the process ends
    _state["provider"] = provider
    _state["tracer"] = provider.get_tracer("tether")


def _service(settings: Any) -> str:
    return settings.service_name if settings is not None else "tether"


def reset() -> None:
    """Forget this process's tracing (tests that configure another exporter): ends the provider."""
    with _lock:
        provider = _state.pop("provider", None)
        _state.pop("tracer", None)
        _state.pop("tried", None)
    if provider is not None:
        provider.shutdown()


def flush(timeout_ms: int = 5_000) -> None:
    """Send what is queued now (a worker about to exit; a test about to read the receiver)."""
    provider = _state.get("provider")
    if provider is not None:
        provider.force_flush(timeout_ms)


# -- ids ------------------------------------------------------------------------------------------


def ids_for(key: str) -> tuple[str, str]:
    """A (trace id, span id) derived from ``key``: the same in every process, after any crash."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return digest[:32], digest[32:48]


def turn_ids() -> dict[str, str | None] | None:
    """The identity of a turn's span, decided once (in the turn's first durable step): the current
    trace's id (or a new one) and parent, and a new span id. None when nothing is traced."""
    if not enabled():
        return None
    parent = _current()
    trace_id = parent[0] if parent else secrets.token_hex(16)
    return {"trace_id": trace_id, "span_id": secrets.token_hex(8), "parent_id": parent[1] if parent else None}


def child_ids(key: str) -> dict[str, str | None] | None:
    """The identity of a child of the current span whose own id derives from ``key`` (a step's id):
    the same span however often it is started. None when nothing is traced."""
    if not enabled():
        return None
    parent = _current()
    if parent is None:
        return None
    return {"trace_id": parent[0], "span_id": ids_for(key)[1], "parent_id": parent[1]}


def _current() -> tuple[str, str] | None:
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span (None when nothing is traced or no span is open)."""
    if not enabled():
        return None
    current = _current()
    return None if current is None else f"00-{current[0]}-{current[1]}-01"


def _parsed(value: str | None) -> tuple[str, str] | None:
    parts = (value or "").split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    hexdigits = set("0123456789abcdef")
    if not set(parts[1] + parts[2]) <= hexdigits:
        return None
    return parts[1], parts[2]


# -- spans ----------------------------------------------------------------------------------------


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    ids: Mapping[str, Any] | None = None,
    parent: str | None = None,
    start_ns: int | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """A span, current within the ``with`` (nothing at all when tracing is off). ``ids`` fixes its
    identity (``trace_id``, ``span_id``, ``parent_id``: see ``turn_ids`` and ``ids_for``); ``parent``
    is a ``traceparent`` to hang it under (another process's span); otherwise the current span is its
    parent. ``error(message)`` on what it yields marks it failed."""
    if not enabled():
        return _NULL
    return _span(name, dict(attributes or {}), ids, parent, start_ns)


@contextlib.contextmanager
def _span(
    name: str,
    attributes: dict[str, Any],
    ids: Mapping[str, Any] | None,
    parent: str | None,
    start_ns: int | None,
) -> Iterator[Any]:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    context = None
    forced: tuple[str | None, str | None] | None = None
    remote = _parsed(parent)
    if ids is not None:
        trace_id, parent_id = ids.get("trace_id"), ids.get("parent_id")
        remote = (trace_id, parent_id) if trace_id and parent_id else None
        forced = (trace_id, ids.get("span_id"))
        if remote is None:
            context = trace.set_span_in_context(trace.INVALID_SPAN)  # a root, with the trace id forced
    if remote is not None:
        parent_context = SpanContext(
            trace_id=int(remote[0], 16), span_id=int(remote[1], 16), is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )  # fmt: skip
        context = trace.set_span_in_context(NonRecordingSpan(parent_context))
    clean = {k: v for k, v in attributes.items() if v is not None}
    token = _FORCED.set(forced) if forced else None
    try:
        started = _state["tracer"].start_span(name, context=context, attributes=clean, start_time=start_ns)
    finally:
        if token is not None:
            _FORCED.reset(token)
    with trace.use_span(started, end_on_exit=True, record_exception=True, set_status_on_exception=True):
        yield _Traced(started)


class _Traced:
    """The span ``span`` yields when tracing is on."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def error(self, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_status(Status(StatusCode.ERROR, message[:500]))


@contextlib.contextmanager
def worker_span(trace: str | None, home: Path, task_id: str, execution_id: str) -> Iterator[Any]:
    """A worker's span under the call that started it (``trace``, from its request); nothing, and no
    import, when the request carries none. What it recorded is sent before the worker exits."""
    if trace is None or not configure(home):
        yield NO_SPAN
        return
    attributes = {"tether.task.id": task_id, "tether.execution.id": execution_id, "gen_ai.tool.name": task_id}
    try:
        with span(f"tether.worker {task_id}", attributes, parent=trace) as traced:
            yield traced
    finally:
        flush()
