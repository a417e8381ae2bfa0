"""The ``http.server`` side of :class:`~kdispatch.testing.httpserver.ApiServerHTTP`.

:class:`Listener` accepts connections (``TCP_NODELAY`` set) and hands each to the
:class:`~kdispatch.testing.httpserver.ApiServerHTTP` to run on its own thread; :class:`Handler`
serves the requests of one HTTP/1.1 connection: it reads the body, checks the token, routes the
path (the version, discovery documents, leases and the audit, or a kind's resource) and answers
every reply, error or not, with a single socket write.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from loguru import logger

from kdispatch.actors.model.errors import ApiError, InvalidInputError, InvalidObjectError

from .audit import request_writer
from .httpserver_wire import (
    VERSION,
    Abort,
    Garbled,
    HttpError,
    Route,
    discovery,
    dumps,
    parse_route,
    status_object,
)

if TYPE_CHECKING:  # the server creates the listener: no import at run time
    from .httpserver import ApiServerHTTP

_MAX_BODY = 16 << 20


class Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection; runs on its connection thread."""

    protocol_version = "HTTP/1.1"
    server_version = "kdispatch-apiserver/1"
    server: Listener

    # ----------------------------------------------------------------- plumbing

    def log_message(self, format: str, *args: Any) -> None:
        logger.opt(lazy=True).trace("http {}", lambda: format % args)

    def _reply(self, code: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
        """Send status line, headers and body in one write."""
        phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
        lines = [
            f"HTTP/1.1 {code} {phrase}",
            "Content-Type: application/json",
            f"Content-Length: {len(payload)}",
        ]
        lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        self.log_request(code)

    def _reply_json(self, code: int, obj: object) -> None:
        self._reply(code, dumps(obj))

    def _reply_error(self, err: HttpError) -> None:
        self._reply(
            err.code,
            dumps(status_object(err.code, err.reason, err.message, err.details)),
            err.headers,
        )

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if not length:
            return None
        try:
            size = int(length)
        except ValueError:
            raise HttpError(400, "BadRequest", "bad Content-Length") from None
        if size < 0 or size > _MAX_BODY:
            raise HttpError(413, "RequestEntityTooLarge", "request body too large")
        raw = self.rfile.read(size)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HttpError(400, "BadRequest", f"request body is not JSON: {exc}") from None

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        writer = request_writer.set(self.headers.get("User-Agent") or "")
        try:
            # the body first: a refused request must not leave it in the keep-alive stream
            body = self._body() if method in ("POST", "PATCH", "DELETE", "PUT") else None
            api._check_auth(self.headers.get("Authorization"))
            url = urlsplit(self.path)
            if api._serve_extra(self, method, url.path, url.query, body):  # leases, audit
                return
            if url.path in ("/version", "/version/") and method == "GET":
                self._reply_json(200, VERSION)
                return
            route = parse_route(api.kinds, url.path)
            if not isinstance(route, Route):
                if method != "GET":
                    raise HttpError(405, "MethodNotAllowed", f"{method} is not supported")
                self._reply_json(200, discovery(api.kinds, route))
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                api._handle(self, method, route, query, body)
            except ApiError as exc:
                raise api._http_error(exc, route, self.connection) from None
            except InvalidObjectError as exc:
                raise HttpError(422, "Invalid", str(exc), details=route.details()) from None
            except InvalidInputError as exc:
                raise HttpError(400, "BadRequest", str(exc)) from None
        except HttpError as err:
            self._reply_error(err)
        except Garbled as garbled:
            self._reply(200, f"garbled: {garbled}".encode())
        except Abort as abort:
            self.close_connection = True
            api._abort_connection(self.connection, reset=abort.reset)
        except OSError:  # the client went away mid-reply
            self.close_connection = True
        except Exception:
            logger.exception("test apiserver: unhandled error on {} {}", method, self.path)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._reply_json(500, status_object(500, "InternalError", "internal error"))
        finally:
            request_writer.reset(writer)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")


class Listener(HTTPServer):
    """Accepts connections and runs each on its own tracked thread."""

    daemon_threads = True
    allow_reuse_address = True
    api: ApiServerHTTP

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        self.api._spawn_connection(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.opt(exception=True).debug("test apiserver: connection error from {}", client_address)
