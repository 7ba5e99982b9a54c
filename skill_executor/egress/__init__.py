"""The egress gateway: the one way out of a sandbox, per run, audited (docs/guides/egress.md).

An HTTP(S) forward proxy built on mitmproxy. A run reaches it through its proxy URL
(``http://run:<token>@127.0.0.1:<port>``; the token names the run's grant), the gateway
terminates TLS with a CA of its own (made at the first start under ``<data_dir>/egress/ca``;
the runs get its public certificate only), judges each request against the run's grant (allowed
hosts, ports, methods, caps), injects the run's secrets into headers toward their own host
only, refuses requests that carry a secret anywhere else, and reports every request as an
:class:`~.gateway.EgressEvent`.

Library or process? The gateway is **a process of its own** (:func:`~.gateway.start` runs
``proxy.py`` -- mitmproxy as a library plus our addon -- under ``SKILL_EXECUTOR_EGRESS_PYTHON``):

- *Dependencies.* mitmproxy pins most of what it uses to narrow ranges (for Python 3.11 the
  newest, 11.0.2: cryptography < 44.1, h11 <= 0.14, flask, tornado, ...), which the service's
  environment cannot meet (authlib and httpcore need newer ones). Its own environment
  (``requirements/egress-lock.txt``, the ``egress`` extra) keeps both sides on their own pins;
  the process side imports only the standard library, mitmproxy and :mod:`.rules`.
- *Isolation.* The gateway parses hostile traffic from the sandboxes. In its own process it
  holds the CA key and the secrets of the runs it serves, but not the service's database,
  API keys or object store; a parser bug or a crash stays there, and the service sees the
  control socket close and starts another (the same CA and socket; the live grants registered
  again; bounded attempts: :class:`~.gateway.Gateway`). mitmproxy's master is a process-wide
  singleton (``mitmproxy.ctx``) that would not share an interpreter with the service cleanly.
- *Performance.* The proxy's work (TLS on both sides, HTTP parsing) runs on the gateway's own
  core and GIL, not the service's event loop. Start-up costs about a second (imports and
  the CA's load), once per service process.
- *The boundary.* Grants (with their secrets) and events cross an inherited socketpair as JSON
  lines: nothing in argv, the environment or a file, and no listening socket to authenticate.
  :meth:`~.gateway.Gateway.grant` returns when the gateway has applied the grant, so a run
  started after it is never refused for a race.

The gateway listens on loopback TCP (mitmproxy's listener; where ``SKILL_EXECUTOR_EGRESS_LISTEN`` says
for agent-sandbox pods) and on ``<data_dir>/egress/socket/egress.sock`` (each connection handed
to the same listener, in the same process), which is what a sandbox's bridge reaches.  A run's
grant is the policy's (:class:`skill_executor.policy.Grant`): one type from the
rule to the gateway process, its token the run's proxy credential.
"""

from __future__ import annotations

from .gateway import EgressEvent, Gateway, HostQuestion, start, wire

__all__ = ["EgressEvent", "Gateway", "HostQuestion", "start", "wire"]
