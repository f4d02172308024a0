"""How the panel answers besides its pages: JSON exactly as the `--json` commands print it, and
the status a refusal is given."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from skilld.errors import NotFound, SkilldError, UsageError


class JSON(Response):
    """What `print_json_line` prints, as a response body."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, default=str).encode("utf-8")


def refusal_status(exc: SkilldError) -> int:
    """404 for what is not there, 400 for a bad request, 409 for what the rules refuse."""
    if isinstance(exc, NotFound):
        return 404
    return 400 if isinstance(exc, UsageError) else 409
