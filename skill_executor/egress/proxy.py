"""The gateway process: mitmproxy (as a library, in its own environment) with the egress addon.

Started by :mod:`skill_executor.egress.gateway` as ``<egress python> -I proxy.py <control fd>``;
imports only the standard library, mitmproxy and :mod:`rules` (this folder). Everything it is
told -- the configuration, each run's grant with its secrets -- arrives as JSON lines over the
control socket (an inherited socketpair: nothing in argv, the environment or a file), and
everything it reports -- readiness, acknowledgements, one event per request -- leaves the same way.
When the control socket closes (the service is gone) the process exits.

Per request (CONNECT tunnels are always intercepted; requests inside them are judged one by one):

- the run is named by its proxy credentials (``Proxy-Authorization``, on the CONNECT or on a
  plain-HTTP request) and a tunnel keeps the token it was opened with; no grant: 407;
- the host must match the grant's allow-list (exact names, one-label ``*.`` wildcards, IP
  literals only when listed as such), the port its ports (443 and 80 unless listed), the
  ``Host`` header and the TLS SNI the CONNECT's host, the method its methods; WebSocket upgrades
  only with ``websocket``; caps on requests and bytes per run;
- the address it connects to: ``SKILL_EXECUTOR_EGRESS_HOSTS``' mapping (trusted), else the
  system's resolution, refused when not public unless the allow-list names that address;
- secrets: toward the host an injection names, its header is set from its template and a
  placeholder in any header becomes the real value; toward any other host, the URL, the headers
  and the body (up to a bound) are scanned for every secret of the run and the request refused;
- the response is streamed to the client, counted, and cut past ``max_response_bytes`` (or the
  run's byte cap): a response announcing a larger size is replaced by a 502 naming the limit, one
  of unknown size is truncated and its connection closed.

Refusals answer 403 (407 for missing credentials) with a plain-text body naming the rule.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import sys
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from . import rules
except ImportError:  # run as a script in the gateway's environment
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import rules  # type: ignore[no-redef]

try:
    from mitmproxy import ctx, http
    from mitmproxy.addons import core, disable_h2c, errorcheck, next_layer, proxyserver, tlsconfig
    from mitmproxy.certs import CertStore
    from mitmproxy.master import Master
    from mitmproxy.options import Options
except ModuleNotFoundError:  # imported by the service (whose checks walk the package); run where mitmproxy is
    pass

log = logging.getLogger("skill_executor.egress")

#: The CA's names (mitmproxy's CertStore keeps them in <confdir>/mitmproxy-ca*.pem).
CA_ORGANIZATION = "skill-executor"
CA_COMMON_NAME = "skill-executor egress CA"
REALM = 'Basic realm="skill-executor egress"'
#: The most hosts one run may have waiting for approval at once (``ask``); one more is refused.
MAX_ASKING = 8
#: How long past the service's own timeout a held request waits for its answer (the service
#: always answers: at a decision, at its timeout, at the run's end; this bounds a lost answer).
ASK_GRACE = 5.0
#: Hosts a grant remembers its answers for (RunGrant.memo) before it starts over.
MEMO_SIZE = 256


@dataclass
class RunGrant:
    """One run's grant as the service sent it, with its counters."""

    token: str
    run_id: str
    rule: str
    allow: list[str]
    ports: list[int]
    methods: list[str] | None
    websocket: bool
    max_response_bytes: int | None
    max_requests: int | None
    max_bytes: int | None
    max_connections: int | None
    injections: list[dict[str, str]]
    secrets: dict[str, str]  # name -> real value
    placeholders: dict[str, str]  # name -> placeholder the run holds
    forms: dict[str, list[bytes]] = field(default_factory=dict)
    #: ``ask``: a host outside ``allow`` is held for the service's answer (at most ``ask_timeout`` s)
    ask: bool = False
    ask_timeout: float = 0.0
    #: host -> its question's answer, while one is asked (requests to it wait on the same)
    asking: dict[str, asyncio.Future[tuple[bool, str | None]]] = field(default_factory=dict)
    #: host -> why it was not approved: asked once per run
    refused: dict[str, str] = field(default_factory=dict)
    #: (form as text, replacement) for scrubbing events, made once (rules.scrub's, in its order)
    scrub_forms: list[tuple[str, str]] = field(default_factory=list)
    #: host -> the allow-list entry that lets it through / the secrets injected toward it /
    #: the injections toward it: the same answers for every request to it, found once
    #: (bounded: a run naming many hosts only starts over)
    memo: dict[tuple[str, str], Any] = field(default_factory=dict)
    requests: int = 0
    bytes: int = 0
    connections: int = 0

    @classmethod
    def parse(cls, token: str, data: dict[str, Any]) -> RunGrant:
        secrets = {name: s["value"] for name, s in data.get("secrets", {}).items()}
        grant = cls(
            token=token,
            run_id=data["run_id"],
            rule=data["rule"],
            allow=list(data["allow"]),
            ports=list(data.get("ports") or [443, 80]),
            methods=[m.upper() for m in data["methods"]] if data.get("methods") else None,
            websocket=bool(data.get("websocket")),
            max_response_bytes=data.get("max_response_bytes"),
            max_requests=data.get("max_requests"),
            max_bytes=data.get("max_bytes"),
            max_connections=data.get("max_connections"),
            injections=list(data.get("inject", [])),
            secrets=secrets,
            placeholders={name: s["placeholder"] for name, s in data.get("secrets", {}).items()},
            ask=bool(data.get("ask")),
            ask_timeout=float(data.get("ask_timeout") or 0.0),
        )
        grant.forms = {name: rules.secret_forms(value) for name, value in secrets.items()}
        grant.scrub_forms = [
            (form.decode("utf-8", "replace"), f"[secret:{name}]")
            for name, value in secrets.items()
            for form in rules.secret_forms(value)
        ]
        return grant

    def _memo(self, kind: str, host: str, find: Any) -> Any:
        key = (kind, host)
        try:
            return self.memo[key]
        except KeyError:
            pass
        if len(self.memo) >= MEMO_SIZE:
            self.memo.clear()
        found = self.memo[key] = find(host)
        return found

    def set_allow(self, allow: list[str]) -> None:
        """Change the allow-list in place (a session's narrowing, an approved host): the memo's
        answers were the old list's, so it starts over."""
        self.allow = allow
        self.memo.clear()

    def allowed(self, host: str) -> str | None:
        """The allow-list entry that lets ``host`` through (:func:`rules.match_host`), or None."""
        return self._memo("allow", host, lambda h: rules.match_host(h, self.allow))  # type: ignore[no-any-return]

    def injecting(self, host: str) -> list[dict[str, str]]:
        """The injections toward ``host``."""
        return self._memo(  # type: ignore[no-any-return]
            "inject", host, lambda h: [i for i in self.injections if rules.match_host(h, [i["host"]])]
        )

    def owned(self, host: str) -> set[str]:
        """The secrets an injection sends toward ``host``."""
        names: set[str] = set()
        for injection in self.injecting(host):
            names.update(rules.template_secrets(injection["value"]))
        return names

    def scrub(self, text: str) -> str:
        """``text`` without the run's secrets (:func:`rules.scrub`, with the forms made once)."""
        for form, replacement in self.scrub_forms:
            if form in text:
                text = text.replace(form, replacement)
        return text


class Refusal(Exception):
    def __init__(self, reason: str, *, status: int = 403, decision: str = "denied", limit: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.decision = decision
        self.limit = limit


class EgressAddon:
    """The mitmproxy addon: judges each request against its run's grant and reports it."""

    def __init__(self, config: dict[str, Any], control: socket.socket) -> None:
        self.config = config
        self.hosts: dict[str, tuple[str, int | None]] = {}
        for name, target in (config.get("hosts") or {}).items():
            address, port = _split_target(str(target))
            self.hosts[rules.normalise_host(name)] = (address, port)
        self.scan_bytes = int(config.get("scan_bytes") or 8 * 1024 * 1024)
        self.control = control
        self.grants: dict[str, RunGrant] = {}
        self.tunnels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self.counted: weakref.WeakKeyDictionary[Any, RunGrant] = weakref.WeakKeyDictionary()
        self.connected: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # a tunnel's host
        self.dialled: dict[str, tuple[str, int]] = {}  # server connection id -> (name, port) while it connects
        #: question id -> (grant, host) of the hosts waiting for the service's answer (``ask``)
        self.asks: dict[int, tuple[RunGrant, str]] = {}
        #: question ids start at random: an answer meant for a question of an earlier process (before
        #: a restart) never matches one of this process's (and each answer names its run and host too)
        self.next_ask = secrets.randbits(52)
        self.writer: asyncio.StreamWriter | None = None
        self.unix_server: asyncio.AbstractServer | None = None

    # -- the control channel -------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def running(self) -> None:
        reader, self.writer = await asyncio.open_connection(sock=self.control)
        port = ctx.master.addons.get("proxyserver").listen_addrs()[0][1]
        unix_path = self.config.get("unix_socket")
        if unix_path:
            self.unix_server = await _unix_forwarder(unix_path, port)
        self.send({"op": "ready", "port": port, "pid": os.getpid()})
        asyncio.get_running_loop().create_task(self.serve_control(reader))

    async def serve_control(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            message = json.loads(line)
            op = message.get("op")
            if op == "grant":
                self.grants[message["token"]] = RunGrant.parse(message["token"], message["grant"])
            elif op == "narrow" and message["token"] in self.grants:  # a session's: counters kept
                self.grants[message["token"]].set_allow(list(message["allow"]))
            elif op == "revoke":
                revoked = self.grants.pop(message["token"], None)
                for ask_id, (grant, _) in list(self.asks.items()):
                    if grant is revoked:
                        self.answer(ask_id, False, "the run has ended")
            elif op == "answer":
                self.answer(
                    int(message["ask"]),
                    bool(message.get("allow")),
                    message.get("reason"),
                    asked=(str(message.get("run_id")), str(message.get("host"))),
                )
            elif op == "close":
                break
            self.send({"op": "ok", "id": message.get("id")})
        ctx.master.shutdown()

    # -- approvals (``ask``) -------------------------------------------------------------------

    def consent(self, grant: RunGrant, host: str, port: int, method: str) -> Any:
        """None when ``host`` needs no question (allowed, or the grant does not ask, or it is an
        address: addresses are never asked for); else an awaitable that holds the request until
        the service answers (approved: the host joins the grant's ``allow``; else a Refusal).
        Only a held request waits: the hook stays synchronous otherwise."""
        if not grant.ask or port not in grant.ports or grant.allowed(host) is not None:
            return None
        if rules.ip_literal(host) is not None or "*" in host or not rules.valid_pattern(host):
            return None
        if host in grant.refused:
            raise Refusal(f"{host} is not in the allow-list and was not approved: {grant.refused[host]}")
        future = grant.asking.get(host)
        if future is None:
            if len(grant.asking) >= MAX_ASKING:
                raise Refusal(f"{host} is not in the allow-list, and {MAX_ASKING} hosts already wait for approval")
            future = asyncio.get_running_loop().create_future()
            grant.asking[host] = future
            self.next_ask += 1
            self.asks[self.next_ask] = (grant, host)
            self.send(
                {"op": "ask", "ask": self.next_ask, "run_id": grant.run_id, "rule": grant.rule, "host": host}
                | {"method": method}
            )
        return self._held(grant, host, future)

    async def _held(self, grant: RunGrant, host: str, future: asyncio.Future[tuple[bool, str | None]]) -> None:
        try:
            allowed, reason = await asyncio.wait_for(asyncio.shield(future), grant.ask_timeout + ASK_GRACE)
        except TimeoutError:
            for ask_id, (asked, name) in list(self.asks.items()):
                if asked is grant and name == host:
                    self.answer(ask_id, False, "no answer came")
            allowed, reason = future.result()
        if not allowed:
            raise Refusal(f"{host} is not in the allow-list and was not approved: {reason or 'rejected'}")

    def answer(self, ask_id: int, allowed: bool, reason: str | None, *, asked: tuple[str, str] | None = None) -> None:
        """The answer to question ``ask_id``: every request held for it goes on.  ``asked``: the
        run and host the service's answer is for; an answer for another question is ignored."""
        found = self.asks.get(ask_id)
        if found is None:  # answered already (the timeout, the run's end)
            return
        grant, host = found
        if asked is not None and asked != (grant.run_id, host):
            log.warning("an answer for question %d named another run or host: ignored", ask_id)
            return
        del self.asks[ask_id]
        future = grant.asking.pop(host, None)
        if allowed:
            if host not in grant.allow:
                grant.set_allow([*grant.allow, host])
        else:
            grant.refused[host] = reason or "rejected"
        if future is not None and not future.done():
            future.set_result((allowed, reason))

    # -- events ------------------------------------------------------------------------------

    def report(
        self,
        grant: RunGrant | None,
        *,
        host: str,
        method: str,
        path: str,
        status: int,
        sent: int,
        received: int,
        decision: str,
        reason: str | None = None,
        limit: str | None = None,
        started: float | None = None,
    ) -> None:
        scrub = grant.scrub if grant else _unchanged
        self.send(
            {
                "op": "event",
                "run_id": grant.run_id if grant else None,
                "rule": grant.rule if grant else None,
                "host": scrub(host),
                "method": scrub(method),
                "path": scrub(path.split("?", 1)[0]),
                "status": status,
                "bytes": received,
                "request_bytes": sent,
                "decision": decision,
                "reason": scrub(reason) if reason else None,
                "limit": limit,
                "time": time.time(),
                "started": started,
            }
        )

    def report_flow(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata
        if meta.get("egress_reported"):
            return
        meta["egress_reported"] = True
        grant = self.grants.get(meta.get("egress_token", "")) or meta.get("egress_grant")
        status = flow.response.status_code if flow.response else 502
        self.report(
            grant,
            host=flow.request.pretty_host,
            method=flow.request.method,
            path=flow.request.path,
            status=status,
            sent=len(flow.request.raw_content or b""),
            received=meta.get("egress_received", 0),
            decision=meta.get("egress_decision", "allowed"),
            reason=meta.get("egress_reason") or (flow.error.msg if flow.error else None),
            limit=meta.get("egress_limit"),
            started=flow.request.timestamp_start,
        )

    # -- refusals --------------------------------------------------------------------------------

    def refuse(self, flow: http.HTTPFlow, grant: RunGrant | None, refusal: Refusal) -> None:
        rule = grant.rule if grant else None
        body = f"skill-executor egress: {refusal.reason}"
        if rule:
            body += f" (rule {rule!r})"
        headers = {"content-type": "text/plain; charset=utf-8", "connection": "close"}
        if refusal.status == 407:
            headers["proxy-authenticate"] = REALM
        flow.response = http.Response.make(refusal.status, (body + "\n").encode(), headers)
        flow.metadata.update(egress_decision=refusal.decision, egress_reason=refusal.reason, egress_limit=refusal.limit)

    def grant_of(self, flow: http.HTTPFlow) -> RunGrant:
        header = flow.request.headers.get("proxy-authorization")
        token = rules.proxy_token(header) if header else self.tunnels.get(flow.client_conn)
        if header is not None:
            del flow.request.headers["proxy-authorization"]
        bound = self.tunnels.get(flow.client_conn)
        if bound is not None and token != bound:  # a connection never changes runs
            raise Refusal("other proxy credentials than the connection's", status=407)
        if not token:
            raise Refusal("no proxy credentials: use the proxy URL the run was given", status=407)
        grant = self.grants.get(token)
        if grant is None:
            raise Refusal("unknown or expired proxy credentials (the run is over?)", status=407)
        self.tunnels[flow.client_conn] = token
        flow.metadata["egress_token"] = token
        flow.metadata["egress_grant"] = grant
        return grant

    def check_name(self, grant: RunGrant, host: str) -> None:
        """Before anything else looks at a host name (an approval question, a resolver): one that
        carries a secret would take it to the zone's resolvers, the audit log, the approvers."""
        carried = rules.find_secret_in_name(host, grant.forms) if grant.forms else None
        if carried:
            raise Refusal(f"the host name carries secret {carried}")

    def check_destination(self, grant: RunGrant, host: str, port: int) -> None:
        self.check_name(grant, host)
        if grant.allowed(host) is None:
            what = "an IP address not listed" if rules.ip_literal(host) is not None else "not in the allow-list"
            raise Refusal(f"{host} is {what}")
        if port not in grant.ports:
            raise Refusal(f"port {port} is not allowed (allowed: {', '.join(map(str, grant.ports))})")

    # -- hooks -------------------------------------------------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> Any:
        grant: RunGrant | None = None
        host, port = flow.request.host, flow.request.port
        try:
            grant = self.grant_of(flow)
            self.check_name(grant, host)
            held = self.consent(grant, rules.normalise_host(host), port, "CONNECT")
            if held is not None:
                return self._connect_held(flow, grant, held)
            self.check_destination(grant, host, port)
            if grant.max_connections is not None and grant.connections >= grant.max_connections:
                raise Refusal(
                    f"the run's cap of {grant.max_connections} connections is reached",
                    decision="limited",
                    limit="egress_connections",
                )
        except Refusal as refusal:
            self.connect_refused(flow, grant, refusal)
            return None
        grant.connections += 1
        self.counted[flow.client_conn] = grant  # counted down when the client goes
        self.connected[flow.client_conn] = rules.normalise_host(host)
        return None

    def connect_refused(self, flow: http.HTTPFlow, grant: RunGrant | None, refusal: Refusal) -> None:
        self.refuse(flow, grant, refusal)
        self.report(
            grant,
            host=flow.request.host,
            method="CONNECT",
            path="",
            status=refusal.status,
            sent=0,
            received=0,
            decision=refusal.decision,
            reason=refusal.reason,
            limit=refusal.limit,
            started=flow.request.timestamp_start,
        )
        flow.metadata["egress_reported"] = True

    async def _connect_held(self, flow: http.HTTPFlow, grant: RunGrant, held: Any) -> None:
        """A CONNECT to a host waiting for approval: judged again once the service answered."""
        try:
            await held
        except Refusal as refusal:
            self.connect_refused(flow, grant, refusal)
            return
        if self.grants.get(flow.metadata.get("egress_token", "")) is not grant:
            self.connect_refused(
                flow, grant, Refusal("unknown or expired proxy credentials (the run is over?)", status=407)
            )
            return
        self.http_connect(flow)

    def client_disconnected(self, client: Any) -> None:
        grant = self.counted.pop(client, None)
        if grant is not None:
            grant.connections -= 1

    def requestheaders(self, flow: http.HTTPFlow) -> Any:
        grant: RunGrant | None = None
        try:
            grant = self.grant_of(flow)
            self.check_name(grant, flow.request.host)
            held = self.consent(grant, rules.normalise_host(flow.request.host), flow.request.port, flow.request.method)
            if held is not None:
                return self._request_held(flow, grant, held)
            self.judge(flow, grant)
        except Refusal as refusal:
            self.refuse(flow, grant, refusal)
        return None

    async def _request_held(self, flow: http.HTTPFlow, grant: RunGrant, held: Any) -> None:
        """A plain-HTTP request to a host waiting for approval: judged once the service answered."""
        try:
            await held
            if self.grants.get(flow.metadata.get("egress_token", "")) is not grant:
                raise Refusal("unknown or expired proxy credentials (the run is over?)", status=407)
            self.judge(flow, grant)
        except Refusal as refusal:
            self.refuse(flow, grant, refusal)

    def judge(self, flow: http.HTTPFlow, grant: RunGrant) -> None:
        request = flow.request
        host = rules.normalise_host(request.host)
        self.check_destination(grant, host, request.port)
        tunnel = self.connected.get(flow.client_conn)
        if tunnel is not None and host != tunnel:
            raise Refusal(f"{host} is not the host the tunnel was opened to ({tunnel})")
        # Every Host header (one may hide behind another, or behind HTTP/2's :authority) names it.
        for authority in [request.host_header or "", *request.headers.get_all("host")]:
            header_host = rules.normalise_host(
                authority.rsplit(":", 1)[0] if not authority.endswith("]") else authority
            )
            if header_host and header_host != host:
                raise Refusal(f"the Host header {header_host!r} is not the host connected to ({host})")
        if len(request.headers.get_all("host")) > 1:
            raise Refusal("a request with more than one Host header")
        if flow.client_conn not in self.counted:  # plain HTTP: the connection is counted at its first request
            if grant.max_connections is not None and grant.connections >= grant.max_connections:
                raise Refusal(
                    f"the run's cap of {grant.max_connections} connections is reached",
                    decision="limited",
                    limit="egress_connections",
                )
            grant.connections += 1
            self.counted[flow.client_conn] = grant
        sni = flow.client_conn.sni
        if request.scheme == "https" and sni and rules.normalise_host(sni) != host:
            raise Refusal(f"the TLS server name {sni!r} is not the host connected to ({host})")
        if grant.methods is not None and request.method.upper() not in grant.methods:
            raise Refusal(f"method {request.method} is not allowed (allowed: {', '.join(grant.methods)})")
        upgrade = request.headers.get("upgrade", "").lower()
        if upgrade and not (upgrade == "websocket" and grant.websocket):
            raise Refusal(f"protocol upgrade to {upgrade!r} is not allowed")
        if grant.max_requests is not None and grant.requests >= grant.max_requests:
            raise Refusal(
                f"the run's cap of {grant.max_requests} requests is reached",
                decision="limited",
                limit="egress_requests",
            )
        if grant.max_bytes is not None and grant.bytes >= grant.max_bytes:
            raise Refusal(
                f"the run's cap of {grant.max_bytes} bytes is reached", decision="limited", limit="egress_bytes"
            )
        grant.requests += 1
        owned = grant.owned(host) if request.scheme == "https" else set()
        foreign = {name: forms for name, forms in grant.forms.items() if name not in owned}
        # The URL and the headers toward this host carry no secret it is not the host of.
        carried = rules.find_secret(request.url.encode(), foreign) or rules.find_secret(
            b"\n".join(k + b": " + v for k, v in request.headers.fields), foreign
        )
        if carried:
            raise Refusal(f"the request carries secret {carried}, which is not sent to {host}")
        if foreign:
            length = request.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.scan_bytes:
                raise Refusal(f"a request body over {self.scan_bytes} bytes cannot be checked for secrets")
            coding = ",".join(request.headers.get_all("content-encoding"))
            if coding.strip().lower() not in rules.READABLE_CODINGS:
                raise Refusal(f"a request body in content-encoding {coding!r} cannot be checked for secrets")
            if length is None and (request.headers.get("transfer-encoding") or request.is_http2):
                request.stream = _Scanner(foreign, self.scan_bytes, flow, self, coding)
            flow.metadata["egress_scan"] = foreign
        # Toward the injection's host: its header from the template, and placeholders replaced.
        values_owned = {name: grant.secrets[name] for name in owned if name in grant.secrets}
        if values_owned:
            for injection in grant.injecting(host):
                request.headers[injection["header"]] = rules.render(injection["value"], grant.secrets)
            marks = [grant.placeholders[name].encode() for name in values_owned]
            # (one pass over the headers first: most requests hold no placeholder)
            if any(mark in value for _, value in request.headers.fields for mark in marks):
                for key in list(request.headers.keys()):
                    values = request.headers.get_all(key)
                    replaced = [_unplace(value, grant, values_by_name=values_owned) for value in values]
                    if replaced != values:
                        request.headers.set_all(key, replaced)

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:  # refused in requestheaders
            return
        foreign = flow.metadata.get("egress_scan")
        grant: RunGrant | None = flow.metadata.get("egress_grant")
        body = flow.request.raw_content
        if foreign and body and not flow.request.stream:
            carried = rules.find_secret(body, foreign)
            if not carried:
                try:
                    decoder = rules.BodyDecoder(
                        ",".join(flow.request.headers.get_all("content-encoding")), self.scan_bytes
                    )
                    if decoder.inflate is not None:
                        carried = rules.find_secret(decoder.feed(body) + decoder.feed(b""), foreign)
                except ValueError as exc:
                    self.refuse(flow, grant, Refusal(f"the request body cannot be checked for secrets: {exc}"))
                    return
            if carried:
                self.refuse(flow, grant, Refusal(f"the request body carries secret {carried}, which is not sent there"))
                return
        trailers = flow.request.trailers
        carried = (
            rules.find_secret(b"\n".join(k + b": " + v for k, v in trailers.fields), foreign)
            if foreign and trailers
            else None
        )
        if carried:
            reason = f"the request's trailers carry secret {carried}, which is not sent there"
            if flow.request.stream:  # the body has gone: the trailers stay here and the request is cut
                flow.request.trailers = None
                flow.metadata.update(egress_decision="denied", egress_reason=reason)
                self.report_flow(flow)
                self.cut(flow)
            else:
                self.refuse(flow, grant, Refusal(reason))
            return
        if grant is not None and body:
            grant.bytes += len(body)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        grant: RunGrant | None = flow.metadata.get("egress_grant")
        response = flow.response
        if grant is None or response is None or flow.metadata.get("egress_decision"):
            return
        caps = []
        if grant.max_response_bytes is not None:
            caps.append((grant.max_response_bytes, "egress_response_bytes", "max_response_bytes"))
        if grant.max_bytes is not None:
            caps.append((max(0, grant.max_bytes - grant.bytes), "egress_bytes", "the run's byte cap"))
        limit = min(caps) if caps else None
        length = response.headers.get("content-length")
        if limit is not None and length is not None and length.isdigit() and int(length) > limit[0]:
            reason = f"the response of {length} bytes exceeds {limit[2]} ({limit[0]} bytes)"
            body = f"skill-executor egress: {reason} (rule {grant.rule!r})\n".encode()
            flow.metadata.update(egress_decision="limited", egress_reason=reason, egress_limit=limit[1])
            response.status_code = 502
            response.reason = "Bad Gateway"
            response.headers.clear()
            response.headers["content-type"] = "text/plain; charset=utf-8"
            response.headers["content-length"] = str(len(body))
            response.headers["connection"] = "close"
            response.stream = _Replacement(body, flow, self)
            return
        response.stream = _Counter(limit, flow, self)

    def response(self, flow: http.HTTPFlow) -> None:
        self.report_flow(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        message = flow.error.msg if flow.error else ""
        if "skill-executor egress:" in message and not flow.metadata.get("egress_decision"):
            flow.metadata.update(egress_decision="denied", egress_reason=message.split("skill-executor egress: ", 1)[1])
        self.report_flow(flow)

    async def server_connect(self, data: Any) -> None:
        """Where the server connection goes: the operator's mapping, else the system's resolution,
        each address judged (a name that resolves to a private address is refused)."""
        server = data.server
        if server.address is None or server.error:
            return
        host, port = server.address[0], server.address[1]
        name = rules.normalise_host(host)
        self.dialled[server.id] = (host, port)
        mapped = self.hosts.get(name)
        if mapped is not None:
            server.address = (mapped[0], mapped[1] or port)
            return
        token = self.tunnels.get(data.client)
        grant = self.grants.get(token) if token else None
        allow = grant.allow if grant else []
        if rules.ip_literal(name) is not None:
            refusal = rules.address_refusal(name, allow)
            if refusal:
                server.error = f"skill-executor egress: {refusal}"
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            server.error = f"skill-executor egress: cannot resolve {name}: {exc}"
            return
        for info in infos:
            address = str(info[4][0])
            if rules.address_refusal(address, allow) is None:
                server.address = (address, port)
                return
        server.error = f"skill-executor egress: {name} resolves to no public address"

    def server_connected(self, data: Any) -> None:
        """Give the connection its name back: mitmproxy reuses a server connection for a request
        whose (host, port) equals the connection's address, and the address was the dialled one."""
        original = self.dialled.pop(data.server.id, None)
        if original is not None:
            # Server.__setattr__ refuses a new address on an open connection (it would not move the
            # connection); here the connection stays where it is and only its name is given back.
            object.__setattr__(data.server, "address", original)

    def server_connect_error(self, data: Any) -> None:
        self.dialled.pop(data.server.id, None)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """A message the run sends over a WebSocket (``websocket: true``) toward a host that is not
        a secret's is looked through like a body: one that carries a secret ends the connection."""
        foreign = flow.metadata.get("egress_scan")
        if not foreign or flow.websocket is None:
            return
        message = flow.websocket.messages[-1]
        carried = rules.find_secret(message.content, foreign) if message.from_client else None
        if carried:
            message.drop()
            flow.kill()
            self.report(
                flow.metadata.get("egress_grant"),
                host=flow.request.pretty_host,
                method="WEBSOCKET",
                path=flow.request.path,
                status=403,
                sent=len(message.content),
                received=0,
                decision="denied",
                reason=f"a WebSocket message carries secret {carried}, which is not sent there",
            )

    def tcp_start(self, flow: Any) -> None:
        """Raw TCP in a tunnel (neither TLS nor HTTP) is never relayed."""
        flow.kill()

    def cut(self, flow: http.HTTPFlow, *, client: bool = True) -> None:
        """Close the flow's connections (after what was allowed has been sent; ``client`` false:
        the upstream's only, when the client's response is complete as sent)."""
        handler = ctx.master.addons.get("proxyserver").connections.get(flow.client_conn.id)
        if handler is None:
            return

        def close() -> None:
            # the client's first: closing the server's first would let mitmproxy end the client's
            # chunked body cleanly, and a cut must read as one (an incomplete body), not a short file
            for connection in (flow.client_conn, flow.server_conn) if client else (flow.server_conn,):
                if connection in handler.transports:
                    handler.close_connection(connection)

        close()  # now: a later event of this flow (the upstream's end) must find the client gone


class _Counter:
    """The response body on its way to the client: counted, and cut at ``limit``."""

    def __init__(self, limit: tuple[int, str, str] | None, flow: http.HTTPFlow, egress: EgressAddon) -> None:
        self.limit = limit
        self.flow = flow
        self.egress = egress
        self.seen = 0
        self.done = False

    def __call__(self, data: bytes) -> Iterable[bytes]:
        if self.done:
            return []
        grant: RunGrant | None = self.flow.metadata.get("egress_grant")
        if self.limit is not None and self.seen + len(data) > self.limit[0]:
            data = data[: self.limit[0] - self.seen]
            self.done = True
            self.flow.metadata.update(
                egress_decision="limited",
                egress_reason=f"the response was cut at {self.limit[2]} ({self.limit[0]} bytes)",
                egress_limit=self.limit[1],
            )
            self.egress.cut(self.flow)
            self.egress.report_flow(self.flow)
        self.seen += len(data)
        self.flow.metadata["egress_received"] = self.seen
        if grant is not None:
            grant.bytes += len(data)
        return [data] if data else []


class _Replacement:
    """Stands in for an oversized body: the explanation once, then the connection is closed."""

    def __init__(self, body: bytes, flow: http.HTTPFlow, egress: EgressAddon) -> None:
        self.body: bytes | None = body
        self.flow = flow
        self.egress = egress

    def __call__(self, data: bytes) -> Iterable[bytes]:
        if self.body is None:
            return []
        body, self.body = self.body, None
        self.egress.report_flow(self.flow)
        self.egress.cut(self.flow, client=False)  # the explanation has its content-length: complete
        return [body]


class _Scanner:
    """A streamed request body toward a host that is not a secret's: each secret looked for
    across chunk boundaries (the last bytes are held back until the next chunk or the end)."""

    def __init__(
        self, forms: dict[str, list[bytes]], bound: int, flow: http.HTTPFlow, egress: EgressAddon, coding: str = ""
    ) -> None:
        self.forms = forms
        self.keep = rules.overlap(forms)
        self.decoder = rules.BodyDecoder(coding, bound)
        self.plain = b""  # the decoded body's last bytes, when it has a content-encoding
        self.held = b""
        self.bound = bound
        self.flow = flow
        self.egress = egress
        self.total = 0
        self.stopped = False

    def __call__(self, data: bytes) -> Iterable[bytes]:
        if self.stopped:
            return []
        window = self.held + data
        self.total += len(data)
        carried = rules.find_secret(window, self.forms)
        problem = None
        if not carried and self.decoder.inflate is not None:
            try:
                self.plain = self.plain[-self.keep :] + self.decoder.feed(data)
                carried = rules.find_secret(self.plain, self.forms)
            except ValueError as exc:
                problem = f"the request body cannot be checked for secrets: {exc}"
        if carried or problem or self.total > self.bound:
            self.stopped = True
            reason = (
                f"the request body carries secret {carried}, which is not sent there"
                if carried
                else problem or f"a request body over {self.bound} bytes cannot be checked for secrets"
            )
            self.flow.metadata.update(egress_decision="denied", egress_reason=reason)
            self.egress.report_flow(self.flow)
            self.egress.cut(self.flow)
            return []
        if not data:  # the end
            self.held = b""
            return [window] if window else []
        cut = max(0, len(window) - self.keep)
        self.held = window[cut:]
        return [window[:cut]] if cut else []


def _unchanged(text: str) -> str:
    return text


def _unplace(value: str, grant: RunGrant, *, values_by_name: dict[str, str]) -> str:
    """``value`` with the placeholders of the secrets in ``values_by_name`` replaced by their values."""
    for name, real in values_by_name.items():
        value = value.replace(grant.placeholders[name], real)
    return value


def _split_target(target: str) -> tuple[str, int | None]:
    """``address`` or ``address:port`` (``[v6]:port`` for IPv6)."""
    if target.startswith("["):
        address, _, rest = target[1:].partition("]")
        return address, int(rest[1:]) if rest.startswith(":") else None
    if target.count(":") == 1:
        address, port = target.split(":")
        return address, int(port)
    return target, None


async def _unix_forwarder(path: str, port: int) -> asyncio.AbstractServer:
    """The Unix socket the runs' bridges reach: each connection handed to the proxy's own
    listener (its regular-mode server instance), as if it had come to its loopback port --
    no relay hop through a second socket (mitmproxy listens on TCP only)."""
    instance = next(
        i for i in ctx.master.addons.get("proxyserver").servers if getattr(i.mode, "type_name", "") == "regular"
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await instance.handle_stream(reader, _Loopback(writer, port))

    if os.path.exists(path):
        os.unlink(path)
    server = await asyncio.start_unix_server(handle, path)
    os.chmod(path, 0o666)  # the runs' users connect; their proxy token is what lets them through
    return server


class _Loopback:
    """A Unix connection's writer, named as a loopback TCP client of the proxy's port (what
    mitmproxy's connection objects hold; a Unix peer has no address)."""

    def __init__(self, writer: asyncio.StreamWriter, port: int) -> None:
        self._writer = writer
        self._names = {"peername": ("127.0.0.1", 0), "sockname": ("127.0.0.1", port)}

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._names:
            return self._names[name]
        return self._writer.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


def prepare_ca(confdir: Path, export: Path) -> None:
    """The gateway's CA: made once with mitmproxy's CertStore in ``confdir`` (0700; the key
    files 0600), its public certificate copied to ``export`` (what the runs are given)."""
    confdir.mkdir(parents=True, exist_ok=True)
    os.chmod(confdir, 0o700)
    if not (confdir / "mitmproxy-ca.pem").exists():
        CertStore.create_store(confdir, "mitmproxy", 2048, organization=CA_ORGANIZATION, cn=CA_COMMON_NAME)
    for key_file in ("mitmproxy-ca.pem", "mitmproxy-ca.p12"):
        if (confdir / key_file).exists():
            os.chmod(confdir / key_file, 0o600)
    public = (confdir / "mitmproxy-ca-cert.pem").read_bytes()
    if not export.exists() or export.read_bytes() != public:
        tmp = export.with_name(export.name + ".tmp")
        tmp.write_bytes(public)
        os.chmod(tmp, 0o644)
        os.replace(tmp, export)


async def main(control: socket.socket, config: dict[str, Any]) -> None:
    confdir = Path(config["confdir"])
    prepare_ca(confdir, Path(config["ca_cert"]))
    options = Options()
    # Only the addons a proxy needs, not mitmdump's ~35 defaults: each event of each request
    # (a dozen per request) is offered to every addon, and none of the others has work here
    # (their options are off; onboarding would answer for mitm.it, playback, saving, scripts,
    # blocking -- block_global/block_private -- and proxyauth do nothing unless configured).
    master = Master(options, with_termlog=False)
    master.addons.add(
        core.Core(),
        disable_h2c.DisableH2C(),
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        errorcheck.ErrorCheck(),
    )
    options.update(
        listen_host=str(config.get("host") or "127.0.0.1"),
        listen_port=int(config.get("port") or 0),
        confdir=str(confdir),
        connection_strategy="lazy",
        ssl_verify_upstream_trusted_ca=config["trusted_ca"],
        stream_large_bodies=str(int(config.get("scan_bytes") or 8 * 1024 * 1024)),
        http2=True,
        http3=False,
        rawtcp=False,
        websocket=True,
    )
    master.addons.add(EgressAddon(config, control))
    await master.run()


def run(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="egress gateway: %(levelname)s %(message)s")
    control = socket.socket(fileno=int(argv[1]))
    line = b""
    while not line.endswith(b"\n"):
        chunk = control.recv(65536)
        if not chunk:
            return
        line += chunk
    config = json.loads(line)
    control.setblocking(False)
    asyncio.run(main(control, config))


if __name__ == "__main__":
    run(sys.argv)
