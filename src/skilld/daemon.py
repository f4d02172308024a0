"""The daemon: ticks that never overlap, signals, sd_notify, heartbeat, and the curator's turn.

SIGTERM/SIGINT cancel an in-flight tick at its next await. Every write in a tick is synchronous
(no await between writing a file and committing its event), so cancellation can only land
between settlements: nothing is half-written, and unsettled windows stay pending.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from skilld.app import App, open_app
from skilld.config import Config, ConfigError
from skilld.errors import LibraryError, UsageError
from skilld.evolve.report import HEALTH_KEY, SPEND_KEY, TOKENS_KEY, TickReport
from skilld.evolve.supervisor import Evolver
from skilld.evolve.wiring import bind_sources, llm_settings
from skilld.llm import LLMClient
from skilld.log import configure_logging, get_logger
from skilld.notify import Notifier
from skilld.routing import AGENTS, default_path, default_sources, resolve
from skilld.skills.outcomes import Origin
from skilld.skills.trigger_repair import break_shell_triggers
from skilld.state.lock import DaemonLock
from skilld.team import record_round, set_up, sync_round, team_libraries

if TYPE_CHECKING:
    from skilld.web.security import Access

#: Hook the curator registers: (app, llm, now) -> None, run inside the loop when due.
CuratorPass = Callable[[App, LLMClient], Any]
#: Who breaks an older skilld's shell triggers at start-up, for the event log.
STARTUP = Origin(source="daemon")


#: How long a stopping daemon waits for its panel's open requests (a live events view).
PANEL_STOP_SECONDS = 5


@dataclass
class DaemonResult:
    exit_code: int
    ticks: int


def summary_line(report: TickReport, app: App) -> str:
    outcomes = ", ".join(f"{k}={v}" for k, v in sorted(report.outcomes.items())) or "no windows"
    libraries = ", ".join(
        f"{library.name} {len(library.managed_names())}/{library.max_managed}"
        for library in app.libraries.values()
    )
    return (
        f"tick {report.duration:.1f}s: {report.messages_read} new messages, {outcomes};"
        f" managed skills: {libraries or 'no library'}"
    )


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        reload_config: Callable[[], Config] | None = None,
        curator_pass: CuratorPass | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        self.reload_config = reload_config
        self.curator_pass = curator_pass
        self.notifier = notifier or Notifier()
        self.log = get_logger("skilld.daemon")
        self._stop = anyio.Event()
        self._wake = anyio.Event()
        self._reload_requested = False
        self._tick_scope: anyio.CancelScope | None = None
        self._stopping_announced = False
        self._said_nothing_to_read = False
        #: Agents found whose routing fails (a library dir clash): not looked for again.
        self._unroutable: set[str] = set()

    async def run(self, *, once: bool = False) -> DaemonResult:
        # Libraries that do not resolve are bad usage: said here, plainly, not from inside the
        # task group below (which would wrap the ConfigError into a traceback).
        resolve(self.config)
        lock = DaemonLock(self.config.state.dir)
        lock.acquire()  # StateError names the holder; the CLI turns it into exit 2
        panel = None
        try:
            panel = None if once or not self.config.web.listen else self._bind_panel()
            return await self._run_locked(once=once, panel=panel)
        finally:
            if panel is not None:
                panel[0].close()
            lock.release()

    def _bind_panel(self) -> tuple[socket.socket, Access]:
        """The panel's socket on `[web] listen`, bound before the first tick, so that a port in
        use, or a non-loopback address without a token, stops the daemon at start (exit 2)
        instead of failing unseen. Raises ConfigError."""
        from skilld.config import split_listen
        from skilld.web.serve import bind, panel_access

        host, port = split_listen(self.config.web.listen)
        try:
            access = panel_access(self.config, host, port)
            return bind(host, port), access
        except (UsageError, OSError) as exc:
            raise ConfigError(f"cannot serve the panel: {exc}", "web.listen") from None

    async def _run_locked(
        self, *, once: bool, panel: tuple[socket.socket, Access] | None
    ) -> DaemonResult:
        ticks = 0
        failed = False
        panel_stop, panel_done = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as signal_group:
            if not once:
                # Handlers are in place before READY=1 and stay in place across reloads:
                # systemd may send SIGTERM the moment it reads READY=1, and the default action
                # would kill the daemon instead of stopping it.
                await signal_group.start(self._watch_signals)
                if panel is not None:
                    signal_group.start_soon(self._serve_panel, *panel, panel_stop, panel_done)
            while True:
                with open_app(self.config, prepare=True) as app:
                    self._say_if_nothing_to_read(app)
                    self._set_up_teams(app)
                    self._break_shell_triggers(app)
                    async with LLMClient(
                        llm_settings(self.config),
                        spent=app.state.get_meta(SPEND_KEY, []),
                        tokens_today=app.state.get_meta(TOKENS_KEY, None),
                        learned=app.state.get_meta(HEALTH_KEY, None),
                    ) as llm:
                        evolver = Evolver(app, llm, bind_sources(self.config, app.routing))
                        async with anyio.create_task_group() as group:
                            if not once:
                                group.start_soon(self._heartbeat, app)
                                if team_libraries(app):
                                    group.start_soon(self._sync_loop, app)
                                if self.notifier.watchdog_interval:
                                    group.start_soon(self._watchdog)
                            self.notifier.ready("first tick scheduled")
                            while not self._stop.is_set() and not self._reload_requested:
                                if not once and self._agents_found(app):
                                    break  # opened again below: its routing reads them
                                ok = await self._one_tick(evolver, app, llm)
                                ticks += 1
                                failed = failed or not ok
                                if once:
                                    self._stop.set()
                                    break
                                await self._sleep(self.config.evolve.interval_seconds)
                            group.cancel_scope.cancel()
                if self._stop.is_set():
                    break
                if self._reload_requested:
                    self._apply_reload()
            if panel is not None:
                panel_stop.set()  # open requests get a moment to finish
                with anyio.move_on_after(PANEL_STOP_SECONDS):
                    await panel_done.wait()
            signal_group.cancel_scope.cancel()
        self._announce_stopping()
        return DaemonResult(1 if once and failed else 0, ticks)

    def _say_if_nothing_to_read(self, app: App) -> None:
        """Once, at start: with no `[[sources]]` and no agent on this machine, nothing is read
        until an agent's transcripts appear; say where skilld looks for them."""
        if self._said_nothing_to_read or not app.routing.detected or app.routing.routes:
            return
        self._said_nothing_to_read = True
        self.log.warning(
            "no_agent_found",
            reason="no [[sources]] configured and no agent's transcripts found; an agent"
            " installed later is read from its first session, without a restart",
            watching=[str(default_path(kind)) for kind in AGENTS],
        )

    def _agents_found(self, app: App) -> bool:
        """With no `[[sources]]`: whether an agent appeared since `app` was opened (its
        transcript location now exists), recorded as `agent_found`. A few `stat`s a tick."""
        if not app.routing.detected:
            return False
        known = {route.source.kind for route in app.routing.routes} | self._unroutable
        found = [source for source in default_sources() if source.kind not in known]
        if not found:
            return False
        try:
            resolve(self.config)
        except ConfigError as exc:  # its library clashes with a configured one: said once
            self._unroutable.update(source.kind for source in found)
            self.log.error("agent_not_read", agents=[s.kind for s in found], error=str(exc))
            return False
        with app.state.transaction():
            for source in found:
                app.state.add_event(
                    "agent_found",
                    library=AGENTS[source.kind].library,
                    source=source.kind,
                    detail={"path": str(source.path)},
                )
        return True

    def _break_shell_triggers(self, app: App) -> None:
        """Skills an older skilld wrote may run a command as an agent loads them: at start-up
        their triggers are broken (docs/security.md). A library that cannot be rewritten now
        is an error event, and learning goes on."""
        for library in app.libraries.values():
            try:
                break_shell_triggers(library, STARTUP)
            except (LibraryError, OSError) as exc:
                reason = f"could not break load-time shell triggers: {exc}"
                app.state.add_event("error", library=library.name, source="daemon", reason=reason)

    def _set_up_teams(self, app: App) -> None:
        """Team libraries become work trees of their remotes (no network); what needs a person
        is an error event with its repair command, and learning goes on locally."""
        for library in team_libraries(app):
            for problem in set_up(library):
                self.log.error("sync_setup_problem", library=library.name, problem=problem)
                app.state.add_event("error", library=library.name, source="sync", reason=problem)

    async def _sync_loop(self, app: App) -> None:
        """Every `sync.interval_seconds`, one round per team library; git runs in a thread so
        a slow remote never holds up a tick."""
        while True:
            for library in team_libraries(app):
                report = await anyio.to_thread.run_sync(sync_round, library)
                record_round(library, app.state, report)
            await anyio.sleep(self.config.sync.interval_seconds)

    async def _one_tick(self, evolver: Evolver, app: App, llm: LLMClient) -> bool:
        with anyio.CancelScope() as scope:
            self._tick_scope = scope
            try:
                report = await evolver.tick()
                self.notifier.status(summary_line(report, app))
                if self.curator_pass is not None:
                    await self.curator_pass(app, llm)
                self._holdout_step(app)
                return True
            except Exception as exc:  # a bug or an environment failure must not kill the loop
                self.log.error("tick_failed", error=repr(exc), traceback=traceback.format_exc())
                self.notifier.status(f"last tick failed ({type(exc).__name__}); see the log")
                app.state.add_event("error", reason=f"tick failed: {exc!r}")
                return False
            finally:
                self._tick_scope = None
        return True  # cancelled by a stop request: not a failure

    def _holdout_step(self, app: App) -> None:
        """The switchback holdout (DESIGN.md §14): withhold or put back the learned skills
        whose block began, after settling a move a killed daemon left in flight."""
        from skilld.clock import utc_now
        from skilld.curator.holdout import run_holdout

        # What each skill targets decides whether it can be held out: the versions written
        # before targets were recorded are worked out first (once; a no-op after).
        app.backfill_targets()
        report = run_holdout(app, utc_now())
        if report.withheld or report.restored or report.repaired:
            self.log.info(
                "holdout_step",
                withheld=report.withheld,
                restored=report.restored,
                repaired=report.repaired,
                decided=report.decided,
                ended=report.ended,
            )

    async def _sleep(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        self._wake = anyio.Event()

    def _apply_reload(self) -> None:
        self._reload_requested = False
        if self.reload_config is None:
            return
        self.notifier.reloading()
        try:
            config = self.reload_config()
            resolve(config)  # libraries that do not resolve are refused like bad TOML
        except ConfigError as exc:
            self.log.error("reload_failed", error=str(exc), kept="previous configuration")
            return
        if config.state.dir != self.config.state.dir:
            self.log.error("reload_refused", reason="state.dir cannot change while running")
            return
        configure_logging(config.log.format, config.log.level)
        self.config = config
        self.log.info("reloaded", path=str(config.path))

    def request_stop(self) -> None:
        self._announce_stopping()
        self._stop.set()
        self._wake.set()
        if self._tick_scope is not None:
            self._tick_scope.cancel()

    def _announce_stopping(self) -> None:
        """STOPPING=1 when shutdown begins (not after it), once."""
        if not self._stopping_announced:
            self._stopping_announced = True
            self.notifier.stopping()

    async def _watch_signals(self, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    self._reload_requested = True
                    self._wake.set()
                    self.log.info("reload_requested")
                else:
                    self.log.info("stopping", signal=signal.Signals(signum).name)
                    self.request_stop()

    async def _serve_panel(
        self, sock: socket.socket, access: Access, stop: anyio.Event, done: anyio.Event
    ) -> None:
        """The web panel in this process until `stop` (the sidecar)."""
        from skilld.web.serve import serve_panel

        try:
            await serve_panel(
                self.config,
                sock,
                access,
                on_ready=lambda: self.log.info("panel_listening", url=access.origin + "/"),
                stop=stop,
            )
        finally:
            done.set()

    async def _heartbeat(self, app: App) -> None:
        """The loop is alive even while a long tick waits on the LLM."""
        period = min(self.config.evolve.interval_seconds, 30.0)
        while True:
            app.state.set_meta("heartbeat", time.time())
            app.state.set_meta(
                "daemon", {"pid": os.getpid(), "interval": self.config.evolve.interval_seconds}
            )
            await anyio.sleep(period)

    async def _watchdog(self) -> None:
        assert self.notifier.watchdog_interval is not None
        while True:
            self.notifier.watchdog()
            await anyio.sleep(self.notifier.watchdog_interval)
