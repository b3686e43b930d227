"""Run the app with uvicorn: in the foreground until Ctrl-C/SIGTERM, or in a thread (smoke, tests, chat).

The socket is bound here (port 0 = a free port chosen by the OS) and handed to uvicorn, so the real
port is known before the first request and never silently changed.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

from swiftbox.errors import UserError


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"port: cannot bind {host}:{port} ({exc.strerror or exc}); choose another --port or "
                        "0") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ServerThread:
    """uvicorn serving `app` on an already-bound socket, in a daemon thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import uvicorn

        self.sock = bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5, lifespan="off",
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="swiftbox-http", daemon=True)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()


def serve_forever(app, host: str, port: int, log=print) -> None:
    """Foreground: returns normally after Ctrl-C or SIGTERM, once uvicorn has shut down gracefully
    (uvicorn itself would re-raise the signal afterwards and end the process by it; a step that
    was asked to stop has succeeded, so the runner can write its manifest and exit 0)."""
    import uvicorn

    from swiftbox.compat import uvicorn_server

    sock = bind(host, port)
    real = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    log(f"serving on http://{shown}:{real}/v1  (Ctrl-C stops)")
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)
    config = uvicorn.Config(app, log_level="info", timeout_graceful_shutdown=5, lifespan="off")
    try:
        uvicorn_server(config).run(sockets=[sock])
    finally:
        sock.close()
