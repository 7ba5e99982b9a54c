"""The HTTP protocol ``serve`` runs uvicorn with: httptools, with malformed requests
refused in the API's error shape.

A request the HTTP parser cannot read (raw non-ASCII bytes in the request target, a
request line or header block over the parser's limits) never reaches the application;
uvicorn answers it with a plain-text 400.  This protocol answers it with the same
``{"error": {"code", "message"}}`` body as every other refusal.
"""

from __future__ import annotations

import json

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
