"""A fake Kubernetes API on loopback: as much of agent-sandbox as the real SDK's claim flow uses.

* SandboxClaims (``extensions.agents.x-k8s.io/v1beta1``): create (validated against
  tests/k8s_schemas/sandboxclaim.json, the CRD's fields: an unknown field is a 422 as with
  kubectl's strict validation), get, list (``labelSelector`` ``k=v[,k=v]``, ``fieldSelector``
  ``metadata.name=``), watch (NDJSON events after ``resourceVersion``; ``0``: the current state
  first), delete (a ``preconditions.uid`` that does not match: 409).
* Sandboxes (``agents.x-k8s.io/v1beta1``): get (``status.podIPs``).
* A tiny controller: a claim of a known pool is bound to one of its ready pods after
  ``bind_delay`` (Ready=True, ``status.sandbox``); a pool with none leaves it waiting (FIFO) until
  a pod is made; an unknown pool gets Ready=False ``WarmPoolNotFound``; a pool named in
  ``missing_templates`` gets ``TemplateNotFound``.  A claim with ``spec.env`` is refused (the
  worker must never set it).  Pods are single use: a deleted claim's pod is discarded and the
  pool makes a new one (``Pool.make``, off the event loop) after ``refill_delay``.
* Faults: :meth:`FakeKube.fail` answers the next ``times`` requests of a verb with a status
  (401, 403, 500...); every request is counted in ``calls`` by ``"<verb> <resource>"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
from aiohttp import web

NS = "{ns}"
CLAIMS = f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{NS}/sandboxclaims"
SANDBOXES = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{NS}/sandboxes"
CLAIM_SCHEMA = json.loads((Path(__file__).parent / "k8s_schemas" / "sandboxclaim.json").read_text())
_VALIDATOR = jsonschema.Draft202012Validator(CLAIM_SCHEMA, format_checker=jsonschema.FormatChecker())


@dataclass
class Pool:
    """A SandboxWarmPool: its ready pods' IPs, and how a new pod is made and an old one discarded."""

    ready: deque[str] = field(default_factory=deque)
    make: Callable[[], str] | None = None
    discard: Callable[[str], None] | None = None
    waiting: deque[str] = field(default_factory=deque)  # claim names, FIFO


class FakeKube:
    def __init__(
        self,
        pools: dict[str, Pool],
        *,
        bind_delay: float = 0.0,
        refill_delay: float = 0.0,
        missing_templates: frozenset[str] = frozenset(),
    ) -> None:
        self.pools = pools
        self.bind_delay = bind_delay
        self.refill_delay = refill_delay
        self.missing_templates = missing_templates
        self.rv = itertools.count(1)
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.sandboxes: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.claim_ip: dict[tuple[str, str], str] = {}
        self.calls: Counter[str] = Counter()
        self.faults: dict[str, deque[int]] = {}
        self.created: list[dict[str, Any]] = []  # every accepted claim as it was sent
        self.url = ""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cond: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None
        self._refills: set[asyncio.Future[None]] = set()

    # -- faults and figures -------------------------------------------------------------------
    def fail(self, verb: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests of ``verb`` (create, get, list, watch, delete,
        get-sandbox) with ``status``."""
        with self._lock:
            self.faults.setdefault(verb, deque()).extend([status] * times)

    def _fault(self, verb: str) -> web.Response | None:
        with self._lock:
            queue = self.faults.get(verb)
            status = queue.popleft() if queue else None
        if status is None:
            return None
        return _status(status, {401: "Unauthorized", 403: "Forbidden"}.get(status, "InternalError"), "injected")

    def bind_now(self, namespace: str, pool: str) -> None:
        """Bind waiting claims of ``pool`` to its ready pods now (after a test added one)."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._bind(namespace, self.pools[pool]), self._loop).result(10)

    # -- serving --------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(CLAIMS, self.create_claim)
        app.router.add_get(CLAIMS, self.list_claims)
        app.router.add_get(CLAIMS + "/{name}", self.get_claim)
        app.router.add_delete(CLAIMS + "/{name}", self.delete_claim)
        app.router.add_get(SANDBOXES + "/{name}", self.get_sandbox)
        return app

    @contextlib.contextmanager
    def serving(self) -> Iterator[FakeKube]:
        """Serve on 127.0.0.1 (its own event loop thread) while the block runs."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            self._cond = asyncio.Condition()
            self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            port = self._runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=run, daemon=True, name="fakekube")
        thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake Kubernetes API did not start")
        try:
            yield self
        finally:
            loop = self._loop
            assert loop is not None and self._runner is not None

            async def settle() -> None:  # pods being made are made (and so can be removed)
                if self._refills:
                    await asyncio.wait(set(self._refills), timeout=120)

            asyncio.run_coroutine_threadsafe(settle(), loop).result(130)
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    def _now(self) -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    async def _emit(self, key: tuple[str, str], kind: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        self.events.setdefault(key, []).append({"type": kind, "object": copy.deepcopy(obj)})
        assert self._cond is not None
        async with self._cond:
            self._cond.notify_all()

    # -- claims ---------------------------------------------------------------------------------
    async def create_claim(self, request: web.Request) -> web.Response:
        self.calls["create sandboxclaims"] += 1
        if (fault := self._fault("create")) is not None:
            return fault
        ns = request.match_info["ns"]
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _status(400, "BadRequest", "not JSON")
        problems = sorted(_VALIDATOR.iter_errors(body), key=lambda e: list(e.absolute_path))
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path)
            return _status(422, "Invalid", f"SandboxClaim is invalid: {where}: {problems[0].message}")
        if body["spec"].get("env"):
            return _status(422, "Invalid", "fake: spec.env forces a cold start; the worker must never set it")
        name = body["metadata"]["name"]
        key = (ns, name)
        if key in self.claims:
            return _status(409, "AlreadyExists", f'sandboxclaims "{name}" already exists')
        self.created.append(copy.deepcopy(body))
        body["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=self._now(), generation=1)
        body["status"] = {}
        self.claims[key] = body
        await self._emit(key, "ADDED", body)
        created = copy.deepcopy(body)
        pool_name = body["spec"]["warmPoolRef"]["name"]
        pool = self.pools.get(pool_name)
        if pool is None or pool_name in self.missing_templates:
            reason = "WarmPoolNotFound" if pool is None else "TemplateNotFound"
            body["status"] = {"conditions": [_cond("False", reason, f"{pool_name}: not found")]}
            await self._emit(key, "MODIFIED", body)
        else:
            pool.waiting.append(name)
            asyncio.get_running_loop().call_later(self.bind_delay, lambda: asyncio.ensure_future(self._bind(ns, pool)))
        return web.json_response(created, status=201)

    async def _bind(self, ns: str, pool: Pool) -> None:
        while pool.waiting and pool.ready:
            name = pool.waiting.popleft()
            key = (ns, name)
            claim = self.claims.get(key)
            if claim is None:
                continue
            ip = pool.ready.popleft()
            sandbox = f"{claim['spec']['warmPoolRef']['name']}-{uuid.uuid4().hex[:5]}"
            self.claim_ip[key] = ip
            self.sandboxes[(ns, sandbox)] = {
                "apiVersion": "agents.x-k8s.io/v1beta1",
                "kind": "Sandbox",
                "metadata": {"name": sandbox, "namespace": ns, "resourceVersion": str(next(self.rv))},
                "status": {"podIPs": [{"ip": ip}], "conditions": [_cond("True", "DependenciesReady", "")]},
            }
            claim["status"] = {
                "sandbox": {"name": sandbox, "podIPs": [ip]},
                "conditions": [_cond("True", "SandboxReady", "")],
            }
            await self._emit(key, "MODIFIED", claim)

    def _refill(self, ns: str, pool: Pool, old_ip: str | None) -> None:
        """A claimed pod is gone for good; the pool makes a new one (off the event loop)."""
        loop = asyncio.get_running_loop()

        async def replace() -> None:
            await asyncio.sleep(self.refill_delay)
            if old_ip is not None and pool.discard is not None:
                await loop.run_in_executor(None, pool.discard, old_ip)
            if pool.make is None:
                return
            ip = await loop.run_in_executor(None, pool.make)
            pool.ready.append(ip)
            await self._bind(ns, pool)

        self._refills.add(task := asyncio.ensure_future(replace()))
        task.add_done_callback(self._refills.discard)

    async def get_claim(self, request: web.Request) -> web.Response:
        self.calls["get sandboxclaims"] += 1
        if (fault := self._fault("get")) is not None:
            return fault
        claim = self.claims.get((request.match_info["ns"], request.match_info["name"]))
        return web.json_response(claim) if claim else _status(404, "NotFound", "not found")

    async def get_sandbox(self, request: web.Request) -> web.Response:
        self.calls["get sandboxes"] += 1
        if (fault := self._fault("get-sandbox")) is not None:
            return fault
        sandbox = self.sandboxes.get((request.match_info["ns"], request.match_info["name"]))
        return web.json_response(sandbox) if sandbox else _status(404, "NotFound", "not found")

    async def delete_claim(self, request: web.Request) -> web.Response:
        self.calls["delete sandboxclaims"] += 1
        if (fault := self._fault("delete")) is not None:
            return fault
        ns, name = request.match_info["ns"], request.match_info["name"]
        claim = self.claims.get((ns, name))
        if claim is None:
            return _status(404, "NotFound", f'sandboxclaims "{name}" not found')
        if request.can_read_body:
            options = await request.json()
            uid = (options.get("preconditions") or {}).get("uid")
            if uid is not None and uid != claim["metadata"]["uid"]:
                return _status(409, "Conflict", "precondition failed: uid")
        del self.claims[(ns, name)]
        await self._emit((ns, name), "DELETED", claim)
        sandbox = (claim.get("status") or {}).get("sandbox", {}).get("name")
        if sandbox:
            self.sandboxes.pop((ns, sandbox), None)
        ip = self.claim_ip.pop((ns, name), None)
        pool = self.pools.get(claim["spec"]["warmPoolRef"]["name"])
        if pool is not None:
            with contextlib.suppress(ValueError):
                pool.waiting.remove(name)
            if ip is not None:  # single use: the pod goes, the pool makes a new one
                self._refill(ns, pool, ip)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})

    async def list_claims(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        query = request.query
        name = None
        if query.get("fieldSelector", "").startswith("metadata.name="):
            name = query["fieldSelector"].split("=", 1)[1]
        wanted = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if "=" in p)
        if query.get("watch", "").lower() not in ("true", "1"):
            self.calls["list sandboxclaims"] += 1
            if (fault := self._fault("list")) is not None:
                return fault
            items = [
                c
                for (n, _), c in self.claims.items()
                if n == ns
                and (name is None or c["metadata"]["name"] == name)
                and all((c["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
            ]
            return web.json_response({"kind": "SandboxClaimList", "apiVersion": "v1", "items": items, "metadata": {}})
        self.calls["watch sandboxclaims"] += 1
        if (fault := self._fault("watch")) is not None:
            return fault
        if name is None:
            return _status(400, "BadRequest", "fake: a watch names one claim (fieldSelector=metadata.name=...)")
        return await self._watch(request, (ns, name))

    async def _watch(self, request: web.Request, key: tuple[str, str]) -> web.StreamResponse:
        query = request.query
        rv = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 30)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        sent = 0
        if rv == 0 and key in self.claims:  # "0": the current state first
            await response.write(json.dumps({"type": "ADDED", "object": self.claims[key]}).encode() + b"\n")
            sent = len(self.events.get(key, []))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        assert self._cond is not None
        try:
            while loop.time() < deadline:
                for event in self.events.get(key, [])[sent:]:
                    sent += 1
                    if int(event["object"]["metadata"]["resourceVersion"]) > rv:
                        await response.write(json.dumps(event).encode() + b"\n")
                async with self._cond:
                    try:
                        await asyncio.wait_for(self._cond.wait(), max(0.0, deadline - loop.time()))
                    except TimeoutError:
                        break
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response


def _cond(status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message}
    return web.json_response({**body, "code": code}, status=code)
