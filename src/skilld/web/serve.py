"""Serving the panel: on its own (`skilld web`) or inside the daemon (`[web] listen`).

The socket is bound before anything is printed, the one line
`skilld web: http://NAME.localhost:PORT/?token=TOKEN` goes to stdout once the server accepts
connections (and the URL to `<state_dir>/panels/`, for `skilld web --url`), and SIGINT/SIGTERM
stop it. Bound to one address that is not loopback, the URL names that address: the panel's own
name reaches loopback only.

Slow clients (slowloris) cannot starve it: a connection that has not sent a whole request head
within `HEAD_SECONDS` is closed, an idle keep-alive one after `KEEP_ALIVE_SECONDS`, the process
may hold as many sockets as its hard file limit allows, and uvicorn's concurrency limit keeps
room below that for the files a request opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from skilld.config import Config
from skilld.errors import UsageError
from skilld.web.login import (
    is_loopback,
    login_url,
    panel_name,
    panel_token,
    record_listening,
    require_token_off_loopback,
)
from skilld.web.panel import guarded_app
from skilld.web.security import (
    Access,
    access_rules,
    host_names,
    interface_addresses,
    is_wildcard,
    new_secret,
)

#: How long open requests (a live events view) may take to finish once a stop is asked for.
GRACEFUL_SECONDS = 2
#: A connection must send a whole request head within this long of opening (or of its last
#: answer), else it is closed.
HEAD_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5
#: File descriptors kept free of connections, for the files and the database a request opens.
SPARE_FILES = 64
#: The file limit asked for (soft), up to the hard one.
WANTED_FILES = 65536
#: The loopback binds a browser reaches by a name under `.localhost` (which it resolves to
#: 127.0.0.1 and ::1).
BY_NAME = ("localhost", "127.0.0.1", "::1")


def panel_access(config: Config, host: str, port: int) -> Access:
    """The access rules of a panel bound to `host`:`port`. Raises UsageError for a
    non-loopback bind without a configured token, or a loopback one the panel's own name does
    not reach; ConfigError for a bad token or name file."""
    token = panel_token(config.web.token_file, config.state.dir)
    require_token_off_loopback(host, token)
    own_name = panel_name(config.state.dir)
    by_name = is_wildcard(host) or host in BY_NAME
    if is_loopback(host) and not by_name:
        raise UsageError(
            f"refusing to serve the panel on {host}: browsers reach its own name at"
            f" {' and '.join(BY_NAME[1:])} only (a session on a loopback address would reach"
            " every local server): use --host 127.0.0.1"
        )
    interfaces = interface_addresses() if is_wildcard(host) else []
    # A browser on this machine reaches the panel by its own name; one elsewhere, by the
    # address it is bound to.
    login_host = own_name if by_name else host
    names = host_names(host, interfaces)
    return access_rules(names, own_name, login_host, port, token.token, new_secret())


class TimelyH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 connection, closed when no whole request head arrives within
    `HEAD_SECONDS` (uvicorn's own keep-alive timer restarts with every byte: a client sending
    one byte at a time would hold its connection forever)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_overdue)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_timer.cancel()
        self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_overdue)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        super().connection_lost(exc)

    def _head_overdue(self) -> None:
        answering = self.cycle is not None and not self.cycle.response_complete
        if not answering and not self.transport.is_closing():
            self.transport.close()


def file_limit() -> int:
    """Raise this process's soft limit on open files as far as allowed (up to WANTED_FILES);
    the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    return soft if soft != resource.RLIM_INFINITY else WANTED_FILES


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
    """Serve on `sock` until `stop` is set; `on_ready` once connections are accepted, when
    the panel's URL is recorded in the state dir too (until it stops)."""
    server = PanelServer(
        uvicorn.Config(
            guarded_app(config, access),
            log_config=None,  # skilld's logging stays as the command set it up
            log_level="warning",
            lifespan="off",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_SECONDS,
            http=TimelyH11Protocol,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            limit_concurrency=max(SPARE_FILES, file_limit() - SPARE_FILES),
        )
    )

    async def stop_when_asked() -> None:
        await stop.wait()
        server.should_exit = True

    async with anyio.create_task_group() as group:
        group.start_soon(stop_when_asked)

        record: list[Path] = []

        async def announce() -> None:
            while not server.started:
                if server.should_exit:
                    return
                await anyio.sleep(0.01)
            record.append(record_listening(config.state.dir, access.origin + "/"))
            on_ready()

        group.start_soon(announce)
        try:
            await server.serve(sockets=[sock])
        finally:
            for path in record:
                path.unlink(missing_ok=True)
        group.cancel_scope.cancel()


def run_panel(config: Config, host: str, port: int, *, open_browser: bool) -> int:
    """`skilld web`: serve until SIGINT or SIGTERM; 0 on a clean stop."""
    import signal

    sock = bind(host, port)
    access = panel_access(config, host, sock.getsockname()[1])

    def ready() -> None:
        url = login_url(access.origin + "/", access.token)
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
