"""sd_notify without a systemd library: one datagram per message to `$NOTIFY_SOCKET`.

Silent when not under systemd (no socket set). Abstract socket names (`@…`) are supported.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        address = environ.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address or None
        watchdog_usec = environ.get("WATCHDOG_USEC", "")
        watchdog_pid = environ.get("WATCHDOG_PID", "")
        is_for_us = not watchdog_pid or watchdog_pid == str(os.getpid())
        #: Seconds between WATCHDOG=1 pings (half of what systemd allows), or None.
        self.watchdog_interval: float | None = (
            int(watchdog_usec) / 2_000_000
            if watchdog_usec.isdigit() and int(watchdog_usec) > 0 and is_for_us
            else None
        )

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        if self.address is None:
            return False
        payload = "\n".join(lines).encode("utf-8", errors="replace")
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            # A listener that reads slowly fills its queue: a status is dropped then, rather
            # than the daemon's loop (and its signal handling) blocking on a send.
            sock.setblocking(False)
            sock.sendto(payload, self.address)
            return True
        return False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text.splitlines()[0] if text else ''}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        return self.send("RELOADING=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")
