"""A loopback OTLP/HTTP trace receiver for the tests: what the service's OpenTelemetry SDK
exports (protobuf ``ExportTraceServiceRequest`` on ``POST /v1/traces``), decoded."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    error: bool
    #: When it began and ended (ns since the epoch).
    start: int = 0
    end: int = 0


def _values(attributes: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        found[kv.key] = getattr(value, kind) if kind else None
    return found


@dataclass
class Receiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver._lock:
                    receiver.requests += 1
                    for resource_spans in request.resource_spans:
                        resource = _values(resource_spans.resource.attributes)
                        for scope in resource_spans.scope_spans:
                            for span in scope.spans:
                                receiver.spans.append(
                                    ReceivedSpan(
                                        span.name,
                                        span.trace_id.hex(),
                                        span.span_id.hex(),
                                        span.parent_span_id.hex(),
                                        _values(span.attributes),
                                        resource,
                                        span.status.code == 2,
                                        span.start_time_unix_nano,
                                        span.end_time_unix_nano,
                                    )
                                )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def env(self) -> dict[str, str]:
        """What points a service process at this receiver (and sends spans quickly)."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def wait_for(self, names: set[str], trace_id: str | None = None, timeout: float = 30) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = [s for s in self.spans if trace_id is None or s.trace_id == trace_id]
            if names <= {s.name for s in found}:
                return found
            time.sleep(0.1)
        raise AssertionError(f"spans {sorted(names)} not all received: got {sorted({s.name for s in found})}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
