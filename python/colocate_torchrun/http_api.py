"""Master protocol v1.2 over HTTP (docs/master-protocol.md): ``GET /v1/status``,
``POST /v1/scale`` and ``POST /v1/checkpoint``, with the optional bearer token.

Status codes as the protocol states them: 202 for an accepted command, 400 naming the field of a
malformed body, 409 with the bounds for a target outside them, 401 without the token, 404 for any
other path.
"""

from __future__ import annotations

import hmac
import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .ledger import BadCommand, ScaleRefused, parse_checkpoint_command, parse_scale_command
from .master import Master

MAX_BODY = 64 * 1024
log = logging.getLogger("colocate_torchrun.http")


def make_server(master: Master, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if master.token is None:
                return True
            given = self.headers.get("Authorization", "")
            if hmac.compare_digest(given.encode(), f"Bearer {master.token}".encode()):
                return True
            self._send(401, {"error": "missing or wrong bearer token"})
            return False

        def _body(self) -> object:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise BadCommand("body", f"larger than {MAX_BODY} bytes")
            try:
                return json.loads(self.rfile.read(length) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise BadCommand("body", f"not JSON: {e}") from None

        def do_GET(self) -> None:
            if not self._authorized():
                return
            if self.path == "/v1/status":
                self._send(200, master.status())
            else:
                self._send(404, {"error": f"no such path: {self.path}"})

        def do_POST(self) -> None:
            if not self._authorized():
                return
            try:
                if self.path == "/v1/scale":
                    answer = master.scale(parse_scale_command(self._body()))
                    self._send(202, {"accepted_target": answer.accepted_target, "generation": answer.generation})
                elif self.path == "/v1/checkpoint":
                    self._send(202, master.checkpoint(parse_checkpoint_command(self._body())))
                else:
                    self._send(404, {"error": f"no such path: {self.path}"})
            except BadCommand as e:
                self.close_connection = True  # the body may be unread
                self._send(400, {"error": str(e), "field": e.field})
            except ScaleRefused as e:
                self._send(e.status, {"error": str(e), **e.details})

    return ThreadingHTTPServer((host, port), Handler)
