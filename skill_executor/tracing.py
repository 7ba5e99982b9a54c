"""Traces of runs (OpenTelemetry), off unless the standard ``OTEL_*`` variables say where.

A run is one trace in the process that executes it: a ``skill_run`` span with child spans
for the steps (``sandbox``, ``stage``, ``execute``, ``collect``, ``cleanup``).  JSON log
lines emitted while a span is current carry its trace id.  (Not yet: a trace continuing from
an API replica to the worker.)

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
is set (OTLP over HTTP/protobuf; the SDK reads its other ``OTEL_*`` settings itself:
headers, timeouts, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), unless
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``.  Off, every helper here is a
no-op that costs a flag check (the warm run path is not slowed).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

T = TypeVar("T")
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

        resource = Resource.create({"service.name": "skill-executor", "skill_executor.role": role})
        provider = TracerProvider(resource=resource)  # OTEL_SERVICE_NAME etc. still win
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


def end_attributes(current: Span | None, **attributes: Any) -> None:
    """Record ``attributes`` on ``current`` (a step's outcome), if tracing."""
    if current is not None:
        current.set_attributes(_clean(attributes))


@contextlib.contextmanager
def entered(manager: contextlib.AbstractContextManager[T], enter: str, leave: str, **attributes: Any) -> Iterator[T]:
    """``with manager as value``, its entering traced as span ``enter`` and its leaving (a
    sandbox's cleanup, say) as span ``leave``."""
    with span(enter, **attributes):
        value = manager.__enter__()
    try:
        yield value
    except BaseException:
        with span(leave):
            if not manager.__exit__(*sys.exc_info()):
                raise
    else:
        with span(leave):
            manager.__exit__(None, None, None)


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
