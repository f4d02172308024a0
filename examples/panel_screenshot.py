"""The README's picture of the panel: its overview over the example transcripts.

    export DEEPSEEK_API_KEY=sk-...      # or any OpenAI-compatible server (see config.toml)
    python examples/panel_screenshot.py docs/panel.png
    python examples/panel_screenshot.py docs/failures.png --page failures

It lets skilld learn from the examples (`skilld once` with examples/config.toml) into a demo
folder, `/tmp/skilld-demo` unless `--demo DIR` says otherwise, so the picture shows the folders
a user would have rather than this checkout's; then it starts the daemon (`skilld run`) and
serves the panel over it (`skilld web` on a free port), opens the overview (or the page
`--page` names, e.g. `failures`) in headless chromium (Debian's /usr/bin/chromium, driven by
Playwright) and saves a PNG.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

CONFIG = Path(__file__).resolve().parent / "config.toml"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=760)
    parser.add_argument("--demo", type=Path, default=Path("/tmp/skilld-demo"))
    parser.add_argument("--page", default="", help="the page to show (default: the overview)")
    args = parser.parse_args()
    demo = args.demo.resolve()
    env = {
        **os.environ,
        "SKILLD_SKILLS_DIR": str(demo / "skills"),
        "SKILLD_STATE_DIR": str(demo / "state"),
    }
    skilld = [sys.executable, "-m", "skilld", "--config", str(CONFIG)]
    if subprocess.run([*skilld, "once"], env=env).returncode != 0:
        print("panel_screenshot: skilld once failed (is the LLM reachable?)", file=sys.stderr)
        return 1
    # A running daemon, as a user has one: the overview shows its heartbeat, not a problem.
    daemon = subprocess.Popen([*skilld, "run"], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while subprocess.run([*skilld, "status", "--check"], env=env, capture_output=True).returncode:
        if time.monotonic() > deadline or daemon.poll() is not None:
            break
        time.sleep(0.5)
    panel = subprocess.Popen(
        [*skilld, "web", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert panel.stdout is not None
    try:
        url = panel.stdout.readline().removeprefix("skilld web: ").strip()
        if not url.startswith("http://"):
            print("panel_screenshot: skilld web did not start", file=sys.stderr)
            return 1
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.emulate_media(color_scheme="light")
            page.goto(url)
            if args.page:
                page.goto(url.split("?", 1)[0] + args.page.lstrip("/"))
            page.screenshot(path=str(args.out))
            browser.close()
    finally:
        for process in (panel, daemon):
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
