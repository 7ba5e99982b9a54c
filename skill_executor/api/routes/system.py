"""Health and metrics."""

from __future__ import annotations

import tempfile

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ...access import Principal
from ...lifecycle.dispatch import QueueDispatch
from ...web.auth import principal
from ..schemas import Check, Health

router = APIRouter(tags=["system"])


@router.get(
    "/healthz",
    response_model=Health,
    summary="Each dependency: engine, image, OCI runtime, workers, data dir, database; 503 names what fails",
    responses={503: {"model": Health}},
)
def healthz(request: Request) -> JSONResponse:
    executor = request.app.state.executor
    runtime = executor.runtime
    checks: dict[str, Check] = {}
    try:
        for name, (ok, detail) in runtime.health().items():
            checks[name] = Check(ok=ok, detail=detail)
    except Exception as exc:  # a probe that breaks is a failing check, never a 500
        checks["runtime"] = Check(ok=False, detail=f"health probe failed: {exc}")
    try:
        with tempfile.NamedTemporaryFile(dir=executor.settings.data_dir):
            pass
        checks["data_dir"] = Check(ok=True, detail=f"{executor.settings.data_dir} writable")
    except OSError as exc:
        checks["data_dir"] = Check(ok=False, detail=f"{executor.settings.data_dir} not writable: {exc.strerror}")
    try:
        ok = request.app.state.manager.store.writable()
        checks["database"] = Check(ok=ok, detail="run store writable" if ok else "run store not writable")
    except Exception as exc:
        checks["database"] = Check(ok=False, detail=f"run store: {exc}")
    worker = getattr(getattr(request.app.state, "service", None), "worker", None)
    if worker is not None:  # a cluster's worker: its lease
        lost = worker.membership.lost.is_set()
        detail = f"worker {worker.worker_id}: " + (f"lease lost ({worker.lost_reason})" if lost else "lease held")
        checks["worker"] = Check(ok=not lost, detail=detail)
    try:
        count = len(executor.repository.list(include_hidden=True))
        checks["skills"] = Check(ok=True, detail=f"{count} skills loaded")
    except Exception as exc:
        checks["skills"] = Check(ok=False, detail=f"skills: {exc}")
    failing = sorted(name for name, check in checks.items() if not check.ok)
    body = Health(status="unhealthy" if failing else "ok", runtime=runtime.name, checks=checks, failing=failing)
    return JSONResponse(body.model_dump(), status_code=503 if failing else 200)


@router.get("/metrics", summary="Prometheus metrics", responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request, _: Principal = Depends(principal)) -> Response:
    """Never fails: a figure that cannot be had (the engine is away) is left out, and
    ``skill_executor_engine_up`` says so."""
    state = request.app.state
    dispatcher = state.manager.dispatch
    if isinstance(dispatcher, QueueDispatch):  # an API replica: the cluster's figures
        try:
            waiting, running = dispatcher.figures()
            state.metrics.queue_depth.set(waiting)
            state.metrics.running.set(running)
        except Exception:  # the database is away: the figures are left as they were
            pass
    else:
        limiter = state.executor.runner.limiter
        state.metrics.queue_depth.set(max(0, limiter.waiting - max(0, limiter.slots - limiter.running)))
        state.metrics.running.set(limiter.running)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
