"""The HTTP protocol and server ``serve`` runs uvicorn with: httptools, with malformed
requests refused in the API's error shape, and a shutdown that drains runs first
(:class:`DrainingServer`).

A request the HTTP parser cannot read (raw non-ASCII bytes in the request target, a
request line or header block over the parser's limits) never reaches the application;
uvicorn answers it with a plain-text 400.  This protocol answers it with the same
``{"error": {"code", "message"}}`` body as every other refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MESSAGE = "the request is not valid HTTP/1.1 (request target, header or size out of the parser's limits)"


class JsonErrorHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": {"code": "invalid_http", "message": MESSAGE}}).encode()
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, shutting down in the order a service with long requests needs.

    uvicorn alone waits for open requests first (up to ``timeout_graceful_shutdown``,
    then cancels them: a plain-text 500 or a reset) and only then runs the lifespan's
    shutdown -- while the requests it waits for wait for runs that only the lifespan's
    shutdown would end.  This server, on SIGTERM/SIGINT: stops listening and closes idle
    connections, then awaits ``app.state.drain()`` (runs may finish for the grace, the
    rest are cancelled, so every waiting client gets its JSON answer), then does
    uvicorn's own shutdown (the remaining responses, the lifespan).  A second SIGINT
    still forces the exit.
    """

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        drain = getattr(getattr(self._app, "state", None), "drain", None)
        if drain is not None and not self.force_exit:
            task = asyncio.ensure_future(drain())
            while not task.done() and not self.force_exit:
                await asyncio.wait([task], timeout=0.1)
            if not task.done():
                task.cancel()
            elif task.exception() is not None:
                logging.getLogger("skill_executor.api").error("draining failed", exc_info=task.exception())
        await super().shutdown(sockets)
