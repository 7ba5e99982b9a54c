"""Health and metrics."""

from __future__ import annotations

import tempfile

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ...access import Principal
from ..auth import principal
from ..schemas import Check, Health

router = APIRouter(tags=["system"])


@router.get("/healthz", response_model=Health, summary="Engine reachable, image present, store writable",
            responses={503: {"model": Health}})
def healthz(request: Request) -> JSONResponse:
    executor = request.app.state.executor
    checks: dict[str, Check] = {}
    runtime = executor.runtime
    probe = getattr(runtime, "health", None)
    if probe is not None:
        for name, (ok, detail) in probe().items():
            checks[name] = Check(ok=ok, detail=detail)
    else:
        checks["runtime"] = Check(ok=True, detail=f"{runtime.name} runtime (no isolation)")
    try:
        with tempfile.NamedTemporaryFile(dir=executor.settings.data_dir):
            pass
        ok = request.app.state.manager.store.writable()
        checks["store"] = Check(ok=ok, detail="data dir and run store writable" if ok else "run store not writable")
    except OSError as exc:
        checks["store"] = Check(ok=False, detail=f"data dir not writable: {exc.strerror}")
    count = len(executor.repository.list(include_hidden=True))
    checks["skills"] = Check(ok=True, detail=f"{count} skills loaded")
    healthy = all(c.ok for c in checks.values())
    body = Health(status="ok" if healthy else "unhealthy", runtime=runtime.name, checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if healthy else 503)


@router.get("/metrics", summary="Prometheus metrics", responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request, _: Principal = Depends(principal)) -> Response:
    state = request.app.state
    limiter = state.executor.runner.limiter
    state.metrics.queue_depth.set(max(0, limiter.waiting - max(0, limiter.slots - limiter.running)))
    state.metrics.running.set(limiter.running)
    count = getattr(state.executor.runtime, "containers_alive", None)
    state.metrics.containers.set(count() if count is not None else 0)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


