"""Traces of runs (OpenTelemetry), off unless the standard ``OTEL_*`` variables say where.

A run is one trace, across processes: the process that admits it (an API replica, or the
embedded service) starts its root span ``skill_run`` (:func:`start`, with a child
``admission``) and records the root's W3C ``traceparent`` (:func:`traceparent`) with the run;
the process that executes it continues from that (:func:`under`; a worker given none or a
malformed one starts a fresh trace and says so: :func:`adopt`) with ``queue_wait``
(:func:`past`) and ``run`` > ``sandbox``, ``stage``, ``execute``, ``collect``, ``cleanup``.
JSON log lines emitted while a span is current carry its trace id.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
is set (OTLP over HTTP/protobuf; the SDK reads its other ``OTEL_*`` settings itself:
headers, timeouts, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), unless
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``.  Off, every helper here is a
no-op that costs a flag check (the warm run path is not slowed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

T = TypeVar("T")
log = logging.getLogger(__name__)
_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("skill_executor")
_state = {"on": False}
_lock = threading.Lock()


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(role: str) -> bool:
    """Install the SDK's tracer provider with the OTLP exporter when :func:`wanted`; once per
    process (the service, a worker).  ``role`` becomes the ``skill_executor.role`` attribute."""
    with _lock:
        if _state["on"] or not wanted():
            return _state["on"]
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"skill_executor.role": role})  # + OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):  # the SDK's default
            resource = resource.merge(Resource({"service.name": "skill-executor"}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _state["on"] = True
        return True


def shutdown() -> None:
    """Send what is buffered (at the end of a process)."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if _state["on"] and flush is not None:
        flush()


def enabled() -> bool:
    return _state["on"]


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span | None]:
    """A span named ``name`` (a child of the current one), current for the block; None when
    tracing is off.  An exception leaving the block marks it failed."""
    if not _state["on"]:
        yield None
        return
    with _TRACER.start_as_current_span(
        name, kind=SpanKind.INTERNAL, attributes=_clean(attributes), record_exception=True
    ) as current:
        yield current


def start(name: str, **attributes: Any) -> Span | None:
    """The root span ``name`` of a new trace -- whatever is current (an HTTP request's span
    continuing a caller's ``traceparent``): a run's trace id is always the service's own --
    started but not current: :func:`within` makes it current for a block, :func:`end` ends
    it.  None when tracing is off."""
    if not _state["on"]:
        return None
    return _TRACER.start_span(
        name, context=otel_context.Context(), kind=SpanKind.INTERNAL, attributes=_clean(attributes)
    )


def end(current: Span | None, error: BaseException | None = None) -> None:
    """End ``current`` (marked failed with ``error``); ending it again does nothing."""
    if current is None:
        return
    if error is not None:
        current.record_exception(error)
        current.set_status(Status(StatusCode.ERROR, type(error).__name__))
    current.end()


@contextlib.contextmanager
def within(current: Span | None) -> Iterator[None]:
    """``current`` is the current span for the block (it is not ended here)."""
    if current is None:
        yield
        return
    with trace.use_span(current, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        yield


def traceparent(current: Span | None) -> str | None:
    """The W3C ``traceparent`` naming ``current`` (what another process continues from)."""
    if current is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(current))
    return carrier.get("traceparent")


def _parent(header: str | None) -> Any:
    """The context whose current span is the one ``header`` names; None: absent, malformed."""
    if not header:
        return None
    found = _PROPAGATOR.extract({"traceparent": header})
    return found if trace.get_current_span(found).get_span_context().is_valid else None


@contextlib.contextmanager
def under(header: str | None) -> Iterator[None]:
    """Spans started in the block are children of the span ``header`` (a ``traceparent``)
    names, in this process or another; nothing changes when it names none or tracing is off."""
    parent = _parent(header) if _state["on"] else None
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


def adopt(header: str | None, name: str, **attributes: Any) -> tuple[Span | None, str | None]:
    """What a process executing another's run continues from: ``(None, header)`` when
    ``header`` names a span (or tracing is off); else (absent, malformed) a fresh root span
    ``name`` -- the caller ends it -- and its traceparent, which a warning says (in it)."""
    if not _state["on"] or _parent(header) is not None:
        return None, header
    root = start(name, fresh=True, **attributes)
    with within(root):
        log.warning(
            "run %s came without a valid trace parent (%s): a fresh trace",
            attributes.get("run_id"),
            "none" if not header else "malformed",
        )
    return root, traceparent(root)


def captured() -> Any:
    """The current context (its span the parent of spans :func:`past` records later, on another
    thread: a run's egress requests); None when tracing is off."""
    return otel_context.get_current() if _state["on"] else None


def past(name: str, started: float, ended: float, *, parent: Any = None, **attributes: Any) -> None:
    """A span ``name`` (a child of the current one, or of ``parent``'s: :func:`captured`) that
    began at ``started`` and ended at ``ended`` (seconds since the epoch), e.g. the wait of a
    queued run."""
    if not _state["on"]:
        return
    first = int(started * 1e9)
    _TRACER.start_span(
        name, context=parent, kind=SpanKind.INTERNAL, attributes=_clean(attributes), start_time=first
    ).end(end_time=max(first, int(ended * 1e9)))


def trace_of(header: str | None) -> str | None:
    """The trace id (32 hex digits) in a ``traceparent``; None for none or a malformed one."""
    parent = _parent(header)
    if parent is None:
        return None
    return format(trace.get_current_span(parent).get_span_context().trace_id, "032x")


def end_attributes(current: Span | None, **attributes: Any) -> None:
    """Record ``attributes`` on ``current`` (a step's outcome), if tracing."""
    if current is not None:
        current.set_attributes(_clean(attributes))


def trace_id(current: Span | None = None) -> str | None:
    """The hex trace id of ``current`` (or of the current span); None when not tracing."""
    if not _state["on"]:
        return None
    found = current if current is not None else trace.get_current_span()
    ctx = found.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def log_fields() -> dict[str, str]:
    """``trace_id`` and ``span_id`` of the current span, for a log line (empty when none)."""
    if not _state["on"]:
        return {}
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {f"skill_executor.{k}": v for k, v in attributes.items() if v is not None}
