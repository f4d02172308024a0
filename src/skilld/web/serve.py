"""Serving the panel: on its own (`skilld web`) or inside the daemon (`[web] listen`).

The socket is bound before anything is printed, the one line `skilld web: http://HOST:PORT/`
goes to stdout once the server accepts connections, and SIGINT/SIGTERM stop it cleanly.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator

import anyio
import uvicorn

from skilld.config import Config
from skilld.web.panel import guarded_app
from skilld.web.security import (
    Access,
    allowed_hosts,
    host_names,
    new_secret,
    read_token,
    require_token_off_loopback,
)

#: How long open requests (a live events view) may take to finish once a stop is asked for.
GRACEFUL_SECONDS = 2


def panel_access(config: Config, host: str, port: int) -> Access:
    """The access rules of a panel bound to `host`:`port`. Raises UsageError for a
    non-loopback bind without a token, ConfigError for an unreadable token file."""
    token = read_token(config.web.token_file)
    require_token_off_loopback(host, token)
    return Access(allowed_hosts(host_names(host), port), token, new_secret())


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (port 0: a free one). Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and
    # without it each response's second write waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class PanelServer(uvicorn.Server):
    """uvicorn's server, told when to stop by its owner (signals are the owner's)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_panel(
    config: Config,
    sock: socket.socket,
    access: Access,
    *,
    on_ready: Callable[[], None],
    stop: anyio.Event,
) -> None:
    """Serve on `sock` until `stop` is set; `on_ready` once connections are accepted."""
    server = PanelServer(
        uvicorn.Config(
            guarded_app(config, access),
            log_config=None,  # skilld's logging stays as the command set it up
            log_level="warning",
            lifespan="off",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_SECONDS,
        )
    )

    async def stop_when_asked() -> None:
        await stop.wait()
        server.should_exit = True

    async with anyio.create_task_group() as group:
        group.start_soon(stop_when_asked)

        async def announce() -> None:
            while not server.started:
                if server.should_exit:
                    return
                await anyio.sleep(0.01)
            on_ready()

        group.start_soon(announce)
        await server.serve(sockets=[sock])
        group.cancel_scope.cancel()


def run_panel(config: Config, host: str, port: int, *, open_browser: bool) -> int:
    """`skilld web`: serve until SIGINT or SIGTERM; 0 on a clean stop."""
    import signal

    access_host = host
    sock = bind(host, port)
    port = sock.getsockname()[1]
    access = panel_access(config, access_host, port)
    url = url_of(host if host not in ("0.0.0.0", "::") else "127.0.0.1", port)

    def ready() -> None:
        print(f"skilld web: {url}", flush=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    async def main() -> None:
        stop = anyio.Event()

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    stop.set()
                    return

        async with anyio.create_task_group() as group:
            group.start_soon(watch_signals)
            await serve_panel(config, sock, access, on_ready=ready, stop=stop)
            group.cancel_scope.cancel()

    try:
        anyio.run(main)
    finally:
        sock.close()
    return 0
