"""The README's picture of the panel: its overview over the example transcripts.

Let skilld learn from the examples first, with any model (see config.toml), then take it:

    skilld --config examples/config.toml once
    python examples/panel_screenshot.py docs/panel.png

It serves the panel over examples/out (`skilld web` on a free port), opens the overview in
headless chromium (Debian's /usr/bin/chromium, driven by Playwright) and saves a PNG.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
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
    args = parser.parse_args()
    panel = subprocess.Popen(
        [sys.executable, "-m", "skilld", "--config", str(CONFIG), "web", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
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
            page.screenshot(path=str(args.out))
            browser.close()
    finally:
        panel.send_signal(signal.SIGINT)
        panel.wait(timeout=30)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
