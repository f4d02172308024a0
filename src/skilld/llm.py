"""An async client for OpenAI-compatible chat completion servers.

Works with OpenAI, DeepSeek, vLLM, Ollama, llama.cpp server and LiteLLM: one POST to
``{base_url}/chat/completions`` on plain ``httpx``. The client bounds everything a background
daemon must bound: the time of each attempt, the number of retries, the calls in flight, the
calls per hour, the size and nesting of a reply (`MAX_REPLY_BYTES`, boundedjson), and, through
a circuit breaker, the cost of an outage.

A reply body that cannot be read (over the size bound, nested too deep, not JSON, compressed
though asked for unencoded) is the server's fault, like a 5xx: it is retried with backoff and
counts toward the circuit, so a hostile or broken server is asked a bounded number of times,
never in a loop.

Errors are ``LLMError`` values whose message never contains the API key or the request body.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self
from urllib.parse import urlsplit

import anyio

from skilld import __version__
from skilld.boundedjson import JSONRefused
from skilld.boundedjson import loads as bounded_loads
from skilld.log import get_logger

if TYPE_CHECKING:
    import ssl

    import httpx

ResponseFormatSetting = Literal["auto", "json_schema", "json_object", "none"]
FormatLevel = Literal["json_schema", "json_object", "none"]
ErrorKind = Literal[
    "transport",
    "timeout",
    "auth",
    "not_found",
    "bad_request",
    "server",
    "rate_limited",
    "circuit_open",
    "budget",
    "bad_response",
    "context",
]
CircuitState = Literal["closed", "open", "half_open"]

_LEVELS: Final[tuple[FormatLevel, ...]] = ("json_schema", "json_object", "none")
_FALLBACK_AFTER: Final[dict[FormatLevel, FormatLevel]] = {
    "json_schema": "json_object",
    "json_object": "none",
}
# Words with which servers name the structured output feature they refuse.
_FORMAT_WORDS: Final = (
    "response_format",
    "response format",
    "json_schema",
    "json_object",
    "structured output",
)
# Words that say something is unsupported without naming it: "unsupported parameter:
# temperature" must not cost the run its structured output.
_UNSUPPORTED_WORDS: Final = ("not supported", "unsupported")
_CIRCUIT_KINDS: Final[frozenset[str]] = frozenset(
    {"transport", "timeout", "server", "rate_limited", "auth", "bad_response"}
)
_HOUR_SECONDS: Final = 3600.0
#: A key shorter than this is a placeholder (`x`, `EMPTY`: local servers need none), not a
#: secret: masking it would mangle every word it occurs in.
MIN_SECRET_KEY_CHARS: Final = 8
#: What servers say when a request is longer than the model's context, and where the number
#: is: OpenAI, vLLM and llama-cpp-python ("This model's maximum context length is 8192
#: tokens"), llama-cpp-python's own ("exceed context window of 4096"), llama.cpp's
#: `llama-server` ("exceeds the available context size", with `n_ctx` in the body).
_CONTEXT_PATTERNS: Final = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"context window of (\d+)"),
    re.compile(r"context (?:size|length) (?:of |is )?\(?(\d+)"),
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),
)
_CONTEXT_WORDS: Final = (
    "maximum context length",
    "context window",
    "context size",
    "context length",
    "exceed_context_size",
)
#: Characters per token assumed when fitting a window to a context: conservative (English
#: prose runs about four; code, JSON and other scripts fewer), lowered on each refusal.
CHARS_PER_TOKEN: Final = 3.0
_MIN_CHARS_PER_TOKEN: Final = 1.0
#: The smallest window a fitted split makes: below it a window says nothing.
MIN_WINDOW_CHARS: Final = 600
#: Tokens kept free besides the reply: chat templates and role markers.
_TEMPLATE_TOKENS: Final = 64
_SERVER_MESSAGE_LIMIT: Final = 200
#: The largest reply body read. A chat completion of `max_tokens` tokens is a few KB; what a
#: server sends beyond this (400 MB of whitespace, say) is never read, and the reply is the
#: server's fault.
MAX_REPLY_BYTES: Final = 8 << 20
#: How much of an error's body is read for its message (and for a `response_format` refusal).
_ERROR_BODY_BYTES: Final = 64 << 10

_log = get_logger(__name__)


@dataclass(frozen=True)
class LLMSettings:
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_seconds: float = 60
    max_retries: int = 3
    response_format: ResponseFormatSetting = "auto"
    max_concurrency: int = 2
    max_calls_per_hour: int = 120  # 0 means unlimited
    max_tokens_per_day: int = 0  # 0 means unlimited
    context_tokens: int = 0  # 0: learn it from the server
    temperature: float = 0.2
    max_tokens: int = 4096
    circuit_failures: int = 3
    circuit_reset_seconds: float = 300
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 60


@dataclass(frozen=True)
class LLMReply:
    content: str
    finish_reason: str | None
    refusal: str | None
    usage: Mapping[str, int]
    model: str | None
    attempts: int


class LLMError(Exception):
    """A chat call that produced no usable reply.

    ``retryable`` says whether the same request may succeed later unchanged. The client has
    already retried transport, timeout, server and rate-limit failures ``max_retries`` times;
    ``budget`` and ``circuit_open`` are retryable because they clear with time.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        unanswered: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.status = status
        self.retryable = retryable
        #: A request sent and not answered in time: the server may still be computing it, so
        #: it is not sent again within the call.
        self.unanswered = unanswered

    def __str__(self) -> str:
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.kind}{status}: {self.message}"


def backoff_delay(
    retry_index: int, retry_after: float | None, settings: LLMSettings, rng: random.Random
) -> float:
    """Seconds to wait before retry number ``retry_index`` (0 for the first retry).

    A server-sent delay is honoured as given up to ``backoff_max_seconds``; otherwise the
    delay is drawn with full jitter so that many clients recovering at once do not stampede.
    """
    if retry_after is not None:
        return min(retry_after, settings.backoff_max_seconds)
    ceiling = min(settings.backoff_max_seconds, settings.backoff_base_seconds * 2.0**retry_index)
    return rng.uniform(0.0, ceiling)


def parse_retry_after(headers: Mapping[str, str], now_wall: float) -> float | None:
    """The delay a server asks for in ``retry-after-ms`` or ``Retry-After``, in seconds."""
    milliseconds = _non_negative_number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000.0
    header = headers.get("retry-after")
    if header is None:
        return None
    seconds = _non_negative_number(header)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(header.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now_wall)


def response_format_payload(
    level: FormatLevel, json_schema: Mapping[str, Any], schema_name: str
) -> dict[str, Any] | None:
    if level == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "strict": True, "schema": dict(json_schema)},
        }
    if level == "json_object":
        # llama-cpp-python constrains its grammar to a schema given here; other servers that
        # accept json_object ignore the extra key.
        return {"type": "json_object", "schema": dict(json_schema)}
    return None


def format_refusal(status: int, body_text: str) -> Literal["explicit", "ambiguous", "no"]:
    """Whether an error response means the server refuses the requested ``response_format``,
    read from what the body says whatever the status: llama-cpp-python answers 500 with a
    validation error naming `response_format`, others 400 or 422.

    ``explicit``: the error names the feature, so the level is known not to work.
    ``ambiguous``: a 4xx saying only "not supported"; the cause may be the format or something
    else, so a lower level is tried but is only remembered once it succeeds. A 400 that says
    neither (a context too long, a bad message) is no refusal of the format.
    """
    if status < 400 or status in (401, 403, 404, 408, 429):
        return "no"
    lowered = body_text.lower()
    if context_limit(lowered) is not None or any(w in lowered for w in _CONTEXT_WORDS):
        return "no"
    if any(word in lowered for word in _FORMAT_WORDS):
        return "explicit"
    if status < 500 and any(word in lowered for word in _UNSUPPORTED_WORDS):
        return "ambiguous"
    return "no"


def is_context_refusal(status: int, body_text: str) -> bool:
    """Whether an error says the request is longer than the model's context."""
    if status < 400:
        return False
    lowered = body_text.lower()
    return any(word in lowered for word in _CONTEXT_WORDS)


def context_limit(text: str) -> int | None:
    """The model's context in tokens, as a context-length refusal names it."""
    lowered = text.lower()
    for pattern in _CONTEXT_PATTERNS:
        if (found := pattern.search(lowered)) is not None:
            value = int(found.group(1))
            if value > 0:
                return value
    return None


def context_from_server(path: str, document: object, model: str) -> int | None:
    """The context length a server reports at `path`: llama.cpp `/props` (`n_ctx`, also under
    `default_generation_settings`), vLLM `/v1/models` (`max_model_len` of the model), Ollama
    `/api/show` (`model_info` `<arch>.context_length`, or a `num_ctx` parameter)."""
    if not isinstance(document, dict):
        return None
    found: object = None
    if path.endswith("/props"):
        settings = document.get("default_generation_settings")
        found = document.get("n_ctx")
        if found is None and isinstance(settings, dict):
            found = settings.get("n_ctx")
    elif path.endswith("/models"):
        entries = document.get("data")
        if isinstance(entries, list):
            matching = [e for e in entries if isinstance(e, dict) and e.get("id") == model]
            for entry in matching or [e for e in entries if isinstance(e, dict)][:1]:
                found = entry.get("max_model_len")
    elif path.endswith("/api/show"):
        parameters = document.get("parameters")
        num_ctx = re.search(r"num_ctx\s+(\d+)", parameters) if isinstance(parameters, str) else None
        if num_ctx is not None:
            found = int(num_ctx.group(1))
        info = document.get("model_info")
        if found is None and isinstance(info, dict):
            lengths = [v for k, v in info.items() if str(k).endswith(".context_length")]
            found = lengths[0] if lengths else None
    if isinstance(found, int) and not isinstance(found, bool) and found > 0:
        return found
    return None


def error_for_status(status: int, server_message: str) -> LLMError:
    detail = f": {server_message}" if server_message else ""
    if status in (401, 403):
        return LLMError("auth", f"the server rejected the credentials{detail}", status=status)
    if status == 404:
        return LLMError("not_found", f"endpoint or model not found{detail}", status=status)
    if status == 408:
        return LLMError(
            "timeout", f"the server timed out the request{detail}", status=status, retryable=True
        )
    if status == 429:
        # A spent quota answers 429 too, but waiting does not refill it.
        quota_spent = "insufficient_quota" in server_message
        return LLMError(
            "rate_limited", f"rate limited{detail}", status=status, retryable=not quota_spent
        )
    if status == 409 or status >= 500:
        return LLMError("server", f"server error{detail}", status=status, retryable=True)
    if 400 <= status < 500:
        return LLMError("bad_request", f"the server rejected the request{detail}", status=status)
    return LLMError("bad_response", f"unexpected HTTP status{detail}", status=status)


def parse_completion(document: object, attempts: int) -> LLMReply:
    """Turn a decoded chat completion body into an ``LLMReply``; raise ``bad_response``."""
    if not isinstance(document, dict):
        raise LLMError("bad_response", "the response body is not a JSON object")
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = document.get("error")
        hint = f": {_error_text(error)}" if error else ""
        raise LLMError("bad_response", f"the response has no choices{hint}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise LLMError("bad_response", "the first choice has no message")
    finish_reason = choice.get("finish_reason")
    refusal = message.get("refusal")
    usage = document.get("usage")
    model = document.get("model")
    return LLMReply(
        content=_message_text(message.get("content")),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        refusal=refusal if isinstance(refusal, str) and refusal else None,
        usage=_usage(usage),
        model=model if isinstance(model, str) else None,
        attempts=attempts,
    )


class _CircuitBreaker:
    """Stops calling a server that keeps failing; lets one probe through after a pause."""

    def __init__(self, failure_threshold: int, reset_seconds: float) -> None:
        self.failure_threshold = max(1, failure_threshold)
        self.reset_seconds = reset_seconds
        self.state: CircuitState = "closed"
        self.consecutive_failures = 0
        self.opened_at: float | None = None

    def admit(self, now: float) -> bool:
        """Return True when this call is the half-open probe; raise when the circuit is open."""
        if self.state == "closed":
            return False
        if self.state == "open" and self.opened_at is not None:
            remaining = self.opened_at + self.reset_seconds - now
            if remaining <= 0:
                self.state = "half_open"
                return True
            raise LLMError(
                "circuit_open",
                f"{self.consecutive_failures} consecutive failures; "
                f"next attempt allowed in {remaining:.0f}s",
                retryable=True,
            )
        raise LLMError("circuit_open", "a probe call is already in flight", retryable=True)

    def record_success(self) -> None:
        self.state = "closed"
        self.consecutive_failures = 0
        self.opened_at = None

    def record_failure(self, kind: str, now: float) -> None:
        if kind in _CIRCUIT_KINDS:
            self.consecutive_failures += 1
            if self.state == "half_open" or self.consecutive_failures >= self.failure_threshold:
                self.state = "open"
                self.opened_at = now
        elif self.state == "half_open":
            # A budget stop never reached the server, so the probe is still owed; any other
            # failure came from a server that answered, so it is reachable again.
            self.state = "open" if kind == "budget" else "closed"

    def abandon_probe(self) -> None:
        """A cancelled probe proves nothing; the next call may probe again."""
        if self.state == "half_open":
            self.state = "open"


class _HourlyBudget:
    """Sliding one-hour window of HTTP attempts; a spend cap, not a rate smoother."""

    def __init__(self, limit: int, spent: list[float] | None = None) -> None:
        self.limit = limit
        self._attempt_times: deque[float] = deque(sorted(spent or ()))

    def times(self, now: float) -> list[float]:
        self.count(now)
        return list(self._attempt_times)

    def count(self, now: float) -> int:
        while self._attempt_times and self._attempt_times[0] <= now - _HOUR_SECONDS:
            self._attempt_times.popleft()
        return len(self._attempt_times)

    def spend(self, now: float) -> None:
        if self.limit > 0 and self.count(now) >= self.limit:
            wait = self._attempt_times[0] + _HOUR_SECONDS - now
            raise LLMError(
                "budget",
                f"max_calls_per_hour={self.limit} reached; next call allowed in {wait:.0f}s",
                retryable=True,
            )
        self._attempt_times.append(now)


class _DailyTokens:
    """Tokens the server reported (`usage`) per UTC day; a spend cap, like `_HourlyBudget`."""

    def __init__(self, limit: int, record: Mapping[str, Any] | None = None) -> None:
        self.limit = limit
        record = record if isinstance(record, Mapping) else {}
        day, tokens = record.get("day"), record.get("tokens")
        self.day = day if isinstance(day, str) else _utc_day(time.time())
        self.tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0

    def today(self, wall: float) -> int:
        day = _utc_day(wall)
        if day != self.day:
            self.day, self.tokens = day, 0
        return self.tokens

    def check(self, wall: float) -> None:
        if self.limit > 0 and self.today(wall) >= self.limit:
            midnight = (math.floor(wall / 86400) + 1) * 86400
            raise LLMError(
                "budget",
                f"max_tokens_per_day={self.limit} reached ({self.tokens} tokens today);"
                f" next call allowed in {midnight - wall:.0f}s",
                retryable=True,
            )

    def spend(self, wall: float, tokens: int) -> None:
        self.today(wall)
        self.tokens += tokens


def _utc_day(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%d")


class LLMClient:
    def __init__(
        self,
        settings: LLMSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rng: random.Random | None = None,
        spent: Sequence[float] = (),
        tokens_today: Mapping[str, Any] | None = None,
        learned: Mapping[str, Any] | None = None,
    ) -> None:
        """`spent`: wall-clock times of the calls of the last hour (`spend_record()` of an
        earlier client), so that the spend cap survives a reload or a restart; `tokens_today`
        likewise for the daily token cap (`token_record()`); `learned`: an earlier client's
        `health()`, whose learned context and fit this one starts from."""
        self._url = settings.base_url.rstrip("/") + "/chat/completions"
        self._host = _host_of(self._url)
        self.settings = settings
        self._clock = clock
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._transport = transport
        # Made at the first call: httpx and its TLS set-up cost a tenth of a second of CPU, which
        # a `skilld once` with nothing to reflect need not pay.
        self._http: httpx.AsyncClient | None = None
        self._in_flight = anyio.Semaphore(max(1, settings.max_concurrency))
        now, wall = clock(), time.time()
        self._budget = _HourlyBudget(
            settings.max_calls_per_hour, [now - (wall - moment) for moment in spent]
        )
        self._tokens = _DailyTokens(settings.max_tokens_per_day, tokens_today)
        self._circuit = _CircuitBreaker(settings.circuit_failures, settings.circuit_reset_seconds)
        #: The model's context in tokens: configured, else learned (None: not known yet).
        self._context_tokens: int | None = settings.context_tokens or None
        self._context_source = "config" if settings.context_tokens else None
        self._context_asked = bool(settings.context_tokens)
        self._chars_per_token = CHARS_PER_TOKEN
        learned = learned if isinstance(learned, Mapping) else {}
        if learned.get("endpoint") != self._endpoint():
            learned = {}  # another server or model: what was learned of it says nothing here
        known, ratio = learned.get("context_tokens"), learned.get("chars_per_token")
        if self._context_tokens is None and isinstance(known, int) and known > 0:
            self._context_tokens, self._context_source = known, learned.get("context_source")
        if isinstance(ratio, int | float) and _MIN_CHARS_PER_TOKEN <= ratio <= CHARS_PER_TOKEN:
            self._chars_per_token = float(ratio)
        self._format_level: FormatLevel = (
            "json_schema" if settings.response_format == "auto" else settings.response_format
        )
        self._format_confirmed = False
        level = learned.get("response_format")
        if settings.response_format == "auto" and level in _LEVELS:
            # The level this server was negotiated to: not asked again for what it refused.
            self._format_level = level
            self._format_confirmed = learned.get("response_format_confirmed") is True
        # The last failure with the monotonic and the wall-clock time it happened at.
        self._last_failure: tuple[LLMError, float, float] | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            # Unencoded: a compressed body may expand a thousandfold in one piece, before any
            # bound could look at it (`_read_at_most`).
            headers = {
                "Accept": "application/json",
                "Accept-Encoding": "identity",
                "User-Agent": f"skilld/{__version__}",
            }
            if self.settings.api_key:
                headers["Authorization"] = f"Bearer {self.settings.api_key}"
            self._http = httpx.AsyncClient(
                transport=self._transport,
                headers=headers,
                timeout=httpx.Timeout(self._patience(), connect=self.settings.timeout_seconds),
                follow_redirects=False,
                verify=_tls_context(self._url, os.environ),
            )
        return self._http

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        json_schema: Mapping[str, Any] | None = None,
        schema_name: str = "skill_proposal",
    ) -> LLMReply:
        """One chat completion. ``json_schema`` asks for structured output; without it the
        request carries no ``response_format`` at all."""
        is_probe = self._circuit.admit(self._clock())
        try:
            reply = await self._chat_with_retries(messages, json_schema, schema_name)
        except LLMError as error:
            self._remember_failure(error)
            raise
        else:
            self._circuit.record_success()
            return reply
        finally:
            if is_probe:
                self._circuit.abandon_probe()

    def _endpoint(self) -> str:
        """Whose model the learned facts are about: the URL and the model name."""
        return f"{self._url} {self.settings.model}"

    def _patience(self) -> float:
        """How long a request once sent is waited for. A slow server is waited out, never asked
        again while it may still compute the first request (a single-threaded local server
        would then compute both, each slower): the retries a timeout would have spent are
        spent waiting for the same answer."""
        return self.settings.timeout_seconds * (1 + self.settings.max_retries)

    @property
    def context_tokens(self) -> int | None:
        """The model's context in tokens, configured or learned; None while unknown."""
        return self._context_tokens

    def reply_tokens(self) -> int:
        """The `max_tokens` a request asks for: the configured one, within a quarter of a
        known context so that a window still fits beside it."""
        if self._context_tokens is None:
            return self.settings.max_tokens
        return max(1, min(self.settings.max_tokens, max(256, self._context_tokens // 4)))

    def window_chars(self, prompt_chars: int) -> int | None:
        """The most characters of transcript a window may hold beside a prompt of
        `prompt_chars` and room for the reply, for the model's context; None while the
        context is unknown."""
        if self._context_tokens is None:
            return None
        ratio = self._chars_per_token
        free = self._context_tokens - self.reply_tokens() - _TEMPLATE_TOKENS
        free -= math.ceil(prompt_chars / ratio)
        return max(MIN_WINDOW_CHARS, int(free * ratio))

    async def learn_context(self) -> int | None:
        """Ask the server once per client for its model's context (`context_tokens` = 0):
        llama.cpp `/props`, vLLM `/v1/models`, Ollama `/api/show`. What none of them tell is
        learned from the first context-length refusal instead."""
        if self._context_asked:
            return self._context_tokens
        self._context_asked = True
        base = self.settings.base_url.rstrip("/")
        root = base.removesuffix("/v1")
        probes: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", root + "/props", None),
            ("GET", base + "/models", None),
            ("POST", root + "/api/show", {"model": self.settings.model}),
        ]
        import httpx

        http = self._client()
        for method, url, body in probes:
            try:
                with anyio.fail_after(min(10.0, self.settings.timeout_seconds)):
                    async with http.stream(method, url, json=body) as response:
                        raw = await _read_at_most(response, 1 << 20)
                        ok = response.is_success
                document = bounded_loads(raw or b"", limit=1 << 20) if ok else None
            except (TimeoutError, httpx.HTTPError, ValueError):
                continue
            found = context_from_server(urlsplit(url).path, document, self.settings.model)
            if found is not None:
                self._context_tokens, self._context_source = found, urlsplit(url).path
                _log.info("llm.context_learned", context_tokens=found, source=self._context_source)
                break
        return self._context_tokens

    def token_record(self) -> dict[str, Any]:
        """The tokens spent today (UTC), for the next client's `tokens_today`."""
        return {"day": self._tokens.day, "tokens": self._tokens.today(time.time())}

    def health(self) -> dict[str, Any]:
        now = self._clock()
        last_error: dict[str, Any] | None = None
        if self._last_failure is not None:
            error, failed_at, failed_at_wall = self._last_failure
            last_error = {
                "kind": error.kind,
                "status": error.status,
                "message": error.message,
                "at": datetime.fromtimestamp(failed_at_wall, UTC).isoformat(),
                "seconds_ago": round(now - failed_at, 3),
            }
        circuit = self._circuit
        reopens_in = None
        if circuit.state == "open" and circuit.opened_at is not None:
            reopens_in = round(max(0.0, circuit.opened_at + circuit.reset_seconds - now), 3)
        return {
            "circuit": circuit.state,
            "consecutive_failures": circuit.consecutive_failures,
            "circuit_reopens_in_seconds": reopens_in,
            "last_error": last_error,
            "calls_last_hour": self._budget.count(now),
            "max_calls_per_hour": self.settings.max_calls_per_hour,
            "response_format": self._format_level,
            "response_format_confirmed": self._format_confirmed,
            "endpoint": self._endpoint(),
            "tokens_today": self._tokens.today(time.time()),
            "max_tokens_per_day": self.settings.max_tokens_per_day,
            "context_tokens": self._context_tokens,
            "context_source": self._context_source,
            "chars_per_token": self._chars_per_token,
        }

    def spend_record(self) -> list[float]:
        """Wall-clock times of the calls counted against the spend cap (the last hour)."""
        now, wall = self._clock(), time.time()
        return [round(wall - (now - moment), 3) for moment in self._budget.times(now)]

    def _remember_failure(self, error: LLMError) -> None:
        if error.kind == "circuit_open":
            return
        now = self._clock()
        self._circuit.record_failure(error.kind, now)
        self._last_failure = (error, now, time.time())
        _log.warning(
            "llm.call_failed",
            kind=error.kind,
            status=error.status,
            error=error.message,
            circuit=self._circuit.state,
        )

    async def _chat_with_retries(
        self,
        messages: list[dict[str, Any]],
        json_schema: Mapping[str, Any] | None,
        schema_name: str,
    ) -> LLMReply:
        level: FormatLevel = self._format_level if json_schema is not None else "none"
        attempts = 0
        retries_used = 0
        while True:
            body: dict[str, Any] = {
                "model": self.settings.model,
                "messages": messages,
                "temperature": self.settings.temperature,
                "max_tokens": self.reply_tokens(),
            }
            if json_schema is not None:
                response_format = response_format_payload(level, json_schema, schema_name)
                if response_format is not None:
                    body["response_format"] = response_format
            attempts += 1
            try:
                response, raw = await self._send(body)
                reply = self._decode(response, raw, attempts) if response.is_success else None
            except LLMError as error:
                resend = error.kind in ("transport", "timeout", "bad_response") and error.retryable
                if resend and not error.unanswered:
                    if retries_used < self.settings.max_retries:
                        await self._wait_before_retry(retries_used, None, error)
                        retries_used += 1
                        continue
                    raise self._exhausted(error, attempts) from None
                raise
            if reply is not None:
                if json_schema is not None:
                    self._format_level = level
                    self._format_confirmed = True
                self._tokens.spend(time.time(), _tokens_of(reply, body))
                return reply
            text = _text_of(response, raw)
            server_message = self._server_message(raw, text)
            if is_context_refusal(response.status_code, text):
                raise self._refit(response.status_code, text, server_message, body)
            fallback = _FALLBACK_AFTER.get(level) if json_schema is not None else None
            if fallback is not None and self.settings.response_format == "auto":
                refusal = format_refusal(response.status_code, text[:_ERROR_BODY_BYTES])
                if refusal != "no":
                    _log.info(
                        "llm.response_format_fallback",
                        refused=level,
                        trying=fallback,
                        status=response.status_code,
                        explicit=refusal == "explicit",
                    )
                    if refusal == "explicit":
                        self._format_level = fallback
                        self._format_confirmed = False
                    level = fallback
                    continue
            failure = error_for_status(response.status_code, server_message)
            if not failure.retryable:
                raise failure
            if retries_used >= self.settings.max_retries:
                raise self._exhausted(failure, attempts)
            retry_after = parse_retry_after(response.headers, time.time())
            await self._wait_before_retry(retries_used, retry_after, failure)
            retries_used += 1

    def _refit(
        self, status: int, text: str, server_message: str, body: Mapping[str, Any]
    ) -> LLMError:
        """A request longer than the model's context: the model's limit, not the window's
        fault. A context it names is learned; a refusal at a context already known fits
        windows smaller (fewer characters a token); one naming none, with none known, fits
        them to well under what was sent."""
        limit = context_limit(text)
        configured = self.settings.context_tokens > 0
        if limit is not None and not configured and limit != self._context_tokens:
            self._context_tokens, self._context_source = limit, "refusal"
        elif self._context_tokens is not None:
            self._chars_per_token = max(_MIN_CHARS_PER_TOKEN, self._chars_per_token * 0.75)
        else:
            sent = sum(len(str(m.get("content", ""))) for m in body.get("messages", ()))
            self._context_tokens = max(512, int(sent / CHARS_PER_TOKEN * 0.75))
            self._context_source = "estimate"
        _log.info(
            "llm.context_refusal",
            status=status,
            context_tokens=self._context_tokens,
            chars_per_token=self._chars_per_token,
        )
        return LLMError(
            "context",
            f"the request is longer than the model's context: {server_message}",
            status=status,
            retryable=True,
        )

    async def _send(self, body: dict[str, Any]) -> tuple[httpx.Response, bytes | None]:
        """The response to one POST of `body`, and its body: all of it for a success (None
        when it is over `MAX_REPLY_BYTES`, read no further), the start of it for an error."""
        http = self._client()
        import httpx  # loaded by `_client`

        async with self._in_flight:
            self._tokens.check(time.time())
            self._budget.spend(self._clock())
            try:
                with anyio.fail_after(self._patience()):
                    async with http.stream("POST", self._url, json=body) as response:
                        return response, await self._body_of(response)
            except (httpx.ConnectTimeout, httpx.PoolTimeout):  # nothing was sent: ask again
                raise LLMError(
                    "timeout",
                    f"no connection to {self._host} within {self.settings.timeout_seconds:g}s",
                    retryable=True,
                ) from None
            except (TimeoutError, httpx.TimeoutException):
                raise LLMError(
                    "timeout",
                    f"no reply from {self._host} within {self._patience():g}s"
                    " (waited out, not sent again while the server may still compute it)",
                    retryable=True,
                    unanswered=True,
                ) from None
            except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as error:
                raise LLMError(
                    "transport",
                    self._scrub(f"{type(error).__name__} talking to {self._host}: {error}"),
                    retryable=True,
                ) from None
            except httpx.TransportError as error:
                raise LLMError(
                    "transport",
                    self._scrub(f"{type(error).__name__} talking to {self._host}: {error}"),
                ) from None
            except httpx.InvalidURL as error:  # a base_url only httpx's stricter parser refuses
                raise LLMError("bad_request", self._scrub(f"llm.base_url: {error}")) from None

    async def _body_of(self, response: httpx.Response) -> bytes | None:
        """All of a success's body (None past `MAX_REPLY_BYTES`), the start of an error's. A
        body in an encoding (gzip, say) though none was asked for is not read: a success's is
        the server's fault, an error's reads as empty."""
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            if not response.is_success:
                return b""
            raise LLMError(
                "bad_response",
                f"the reply is {encoding}-encoded though asked for unencoded, and was not read",
                status=response.status_code,
                retryable=True,
            )
        if response.is_success:
            return await _read_at_most(response, MAX_REPLY_BYTES)
        return await _read_at_most(response, _ERROR_BODY_BYTES, cut=True)

    async def _wait_before_retry(
        self, retry_index: int, retry_after: float | None, error: LLMError
    ) -> None:
        delay = backoff_delay(retry_index, retry_after, self.settings, self._rng)
        _log.info(
            "llm.retry",
            kind=error.kind,
            status=error.status,
            retry=retry_index + 1,
            of=self.settings.max_retries,
            delay_seconds=round(delay, 3),
            server_asked=retry_after is not None,
        )
        await self._sleep(delay)

    def _decode(self, response: httpx.Response, raw: bytes | None, attempts: int) -> LLMReply:
        """The reply in a success's body. A body that cannot be read is the server's fault,
        retryable; one that reads but is no chat completion is not retried."""
        status = response.status_code
        if raw is None:
            raise LLMError(
                "bad_response",
                f"the reply is over the limit of {MAX_REPLY_BYTES:,} bytes and was not read",
                status=status,
                retryable=True,
            )
        try:
            document = bounded_loads(raw, limit=MAX_REPLY_BYTES)
        except JSONRefused as exc:
            raise LLMError(
                "bad_response", f"the reply was not read: {exc}", status=status, retryable=True
            ) from None
        except ValueError:  # not JSON, or not text
            content_type = response.headers.get("content-type", "unknown")
            raise LLMError(
                "bad_response",
                f"the server answered with a non-JSON body (content-type {content_type})",
                status=status,
                retryable=True,
            ) from None
        try:
            return parse_completion(document, attempts)
        except LLMError as error:
            raise LLMError("bad_response", self._scrub(error.message), status=status) from None

    def _exhausted(self, error: LLMError, attempts: int) -> LLMError:
        return LLMError(
            error.kind,
            f"{error.message} (gave up after {attempts} attempt{'s' if attempts > 1 else ''})",
            status=error.status,
            retryable=True,
        )

    def _server_message(self, raw: bytes | None, text: str) -> str:
        """What an error's body says, in a line: its `error` message when it is JSON."""
        try:
            document = bounded_loads(raw or b"", limit=_ERROR_BODY_BYTES)
        except ValueError:  # not JSON (or cut short), or too deep to read
            document = None
        if isinstance(document, dict) and "error" in document:
            text = _error_text(document["error"])
        elif isinstance(document, dict) and isinstance(document.get("message"), str):
            text = document["message"]
        # Redacted whole, then cut: a cut first could leave a secret's head unrecognised.
        return self._scrub(" ".join(text.split()))[:_SERVER_MESSAGE_LIMIT]

    def _scrub(self, text: str) -> str:
        """Servers and libraries sometimes echo credentials, or the window's text (a 400 quoting
        the request); none may reach a log line, an event or `status`."""
        from skilld.redact import redact  # loaded by the failures that need it

        key = self.settings.api_key
        if key and len(key) >= MIN_SECRET_KEY_CHARS:
            text = text.replace(key, "[REDACTED:api_key]")
        return redact(text).text


async def _read_at_most(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes | None:
    """`response`'s body as it came up to `limit` bytes: past it, with `cut` the first `limit`
    bytes, else None. Nothing past the limit is read."""
    if response.is_stream_consumed:  # read whole already, by an in-memory transport
        content = response.content
        return content if len(content) <= limit else content[:limit] if cut else None
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit] if cut else None
    return b"".join(chunks)


def _text_of(response: httpx.Response, raw: bytes | None) -> str:
    """An error's body as text, in the charset its Content-Type names (else UTF-8)."""
    try:
        return (raw or b"").decode(response.charset_encoding or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return (raw or b"").decode("utf-8", "replace")


def _non_negative_number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) or value < 0 else value


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) else str(error)
    return str(error)


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def _usage(usage: object) -> dict[str, int]:
    if not isinstance(usage, dict):
        return {}
    return {
        key: value
        for key in ("prompt_tokens", "completion_tokens", "total_tokens")
        if isinstance(value := usage.get(key), int) and not isinstance(value, bool)
    }


def _tokens_of(reply: LLMReply, body: Mapping[str, Any]) -> int:
    """The tokens a call cost as the server reports them (`usage`), else estimated."""
    usage = reply.usage
    if "total_tokens" in usage:
        return usage["total_tokens"]
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    sent = sum(len(str(m.get("content", ""))) for m in body.get("messages", ()))
    return math.ceil((sent + len(reply.content)) / CHARS_PER_TOKEN)


def _host_of(url: str) -> str:
    """The host of an absolute http(s) URL; ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("LLM base_url must be an absolute http:// or https:// URL")
    _ = parts.port  # raises ValueError for a port that is not a number in range
    return parts.hostname


_PROXY_VARIABLES = ("http_proxy", "all_proxy")


def _tls_context(url: str, environ: Mapping[str, str]) -> ssl.SSLContext | bool:
    """httpx's default (verify against the CA bundle) unless no TLS can ever be used: a model
    server on plain http, reached without a proxy. Then a context that trusts no CA at all,
    so that TLS, were it ever asked for, fails closed; it spares the 50 ms it takes to load
    the bundle in every `skilld once` that talks to a local model."""
    proxied = any(environ.get(name) or environ.get(name.upper()) for name in _PROXY_VARIABLES)
    if urlsplit(url).scheme != "http" or proxied:
        return True
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
