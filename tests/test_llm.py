import gzip
import json
import random
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
import respx

from skilld import llm as llm_module
from skilld.llm import (
    LLMClient,
    LLMError,
    LLMReply,
    LLMSettings,
    _tls_context,
    backoff_delay,
    parse_retry_after,
)

BASE_URL = "http://llm.test/v1/"
API_KEY = "sk-test-SECRET-0123456789abcdef"
SCHEMA = {
    "type": "object",
    "properties": {"evolve": {"type": "boolean"}},
    "required": ["evolve"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "TRANSCRIPT-BODY-MARKER"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class MaxJitter(random.Random):
    """Full jitter that always draws the ceiling, so backoff delays become exact."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Harness:
    def __init__(self) -> None:
        self.router = respx.Router(base_url=BASE_URL, assert_all_called=False)
        self.route = self.router.post("/chat/completions")
        self.sleeps: list[float] = []
        self.clock = FakeClock()

    async def fake_sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def client(self, rng: random.Random | None = None, **overrides: Any) -> LLMClient:
        settings = LLMSettings(
            **{"base_url": BASE_URL, "model": "test-model", "api_key": API_KEY} | overrides
        )
        return LLMClient(
            settings,
            transport=httpx.MockTransport(self.router.async_handler),
            clock=self.clock,
            sleep=self.fake_sleep,
            rng=rng or random.Random(7),
        )

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(call.request.content) for call in self.route.calls]


@pytest.fixture
def harness() -> Harness:
    return Harness()


def completion(content: Any = '{"evolve": false, "reason": "r"}', **extra: Any) -> httpx.Response:
    message = {"role": "assistant", "content": content} | extra.pop("message_extra", {})
    body = {
        "id": "chatcmpl-1",
        "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    } | extra
    return httpx.Response(200, json=body)


def error_response(status: int, message: str = "boom", **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message}}, headers=headers)


@pytest.mark.anyio
async def test_success_sends_expected_request_and_extracts_reply(harness: Harness) -> None:
    harness.route.side_effect = [completion()]
    async with harness.client() as client:
        reply = await client.chat(MESSAGES, json_schema=SCHEMA, schema_name="proposal")

    assert reply == LLMReply(
        content='{"evolve": false, "reason": "r"}',
        finish_reason="stop",
        refusal=None,
        usage={"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        model="served-model",
        attempts=1,
    )
    request = harness.route.calls.last.request
    assert str(request.url) == "http://llm.test/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert harness.bodies()[0] == {
        "model": "test-model",
        "messages": MESSAGES,
        "temperature": 0.2,
        "max_tokens": 4096,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "proposal", "strict": True, "schema": SCHEMA},
        },
    }


@pytest.mark.anyio
async def test_no_key_means_no_authorization_and_no_schema_means_no_format(
    harness: Harness,
) -> None:
    harness.route.side_effect = [completion("plain text")]
    async with harness.client(api_key=None) as client:
        reply = await client.chat(MESSAGES)
    assert reply.content == "plain text"
    assert "authorization" not in harness.route.calls.last.request.headers
    assert "response_format" not in harness.bodies()[0]


@pytest.mark.anyio
async def test_content_parts_and_refusal_are_extracted(harness: Harness) -> None:
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]
    harness.route.side_effect = [
        completion(parts, usage={"prompt_tokens": 3}),
        completion(None, message_extra={"refusal": "I can't help with that."}),
    ]
    async with harness.client() as client:
        joined = await client.chat(MESSAGES)
        refused = await client.chat(MESSAGES)
    assert joined.content == "Hello, world"
    assert joined.usage == {"prompt_tokens": 3}
    assert refused.content == ""
    assert refused.refusal == "I can't help with that."


@pytest.mark.anyio
async def test_server_errors_are_retried_until_success(harness: Harness) -> None:
    harness.route.side_effect = [error_response(500), error_response(502), completion()]
    async with harness.client(rng=MaxJitter()) as client:
        reply = await client.chat(MESSAGES)
    assert reply.attempts == 3
    assert harness.route.call_count == 3
    assert harness.sleeps == [1.0, 2.0]


@pytest.mark.anyio
async def test_backoff_uses_full_jitter_within_the_capped_ceiling(harness: Harness) -> None:
    harness.route.side_effect = [error_response(503)] * 5 + [completion()]
    async with harness.client(max_retries=5, backoff_max_seconds=3) as client:
        await client.chat(MESSAGES)
    ceilings = [1.0, 2.0, 3.0, 3.0, 3.0]
    assert len(harness.sleeps) == 5
    assert all(0.0 <= slept <= cap for slept, cap in zip(harness.sleeps, ceilings, strict=True))
    assert len(set(harness.sleeps)) > 1


def test_backoff_delay_is_exponential_and_capped() -> None:
    settings = LLMSettings(base_url=BASE_URL, model="m", backoff_base_seconds=0.5)
    delays = [backoff_delay(index, None, settings, MaxJitter()) for index in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert backoff_delay(0, 7.0, settings, MaxJitter()) == 7.0
    assert backoff_delay(0, 900.0, settings, MaxJitter()) == 60.0


@pytest.mark.anyio
async def test_retry_after_seconds_is_honoured(harness: Harness) -> None:
    harness.route.side_effect = [error_response(429, **{"Retry-After": "7"}), completion()]
    async with harness.client() as client:
        reply = await client.chat(MESSAGES)
    assert reply.attempts == 2
    assert harness.sleeps == [7.0]


@pytest.mark.anyio
async def test_retry_after_ms_wins_over_retry_after(harness: Harness) -> None:
    harness.route.side_effect = [
        error_response(503, **{"retry-after-ms": "1500", "Retry-After": "9"}),
        completion(),
    ]
    async with harness.client() as client:
        await client.chat(MESSAGES)
    assert harness.sleeps == [1.5]


@pytest.mark.anyio
async def test_retry_after_is_capped_at_backoff_max(harness: Harness) -> None:
    harness.route.side_effect = [error_response(429, **{"Retry-After": "600"}), completion()]
    async with harness.client(backoff_max_seconds=20) as client:
        await client.chat(MESSAGES)
    assert harness.sleeps == [20.0]


def test_parse_retry_after_forms() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    in_thirty = format_datetime(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    in_past = format_datetime(datetime(2029, 12, 31, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": in_thirty}, now) == 30.0
    assert parse_retry_after({"retry-after": in_past}, now) == 0.0
    assert parse_retry_after({"retry-after": " 2.5 "}, now) == 2.5
    assert parse_retry_after({"retry-after-ms": "250"}, now) == 0.25
    assert parse_retry_after({"retry-after-ms": "nan", "retry-after": "3"}, now) == 3.0
    assert parse_retry_after({"retry-after": "-4"}, now) is None
    assert parse_retry_after({"retry-after": "soon"}, now) is None
    assert parse_retry_after({}, now) is None


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "kind"), [(401, "auth"), (403, "auth"), (404, "not_found")])
async def test_client_errors_are_not_retried(harness: Harness, status: int, kind: str) -> None:
    harness.route.side_effect = [error_response(status, "nope")] * 3
    async with harness.client() as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert caught.value.kind == kind
    assert caught.value.status == status
    assert caught.value.retryable is False
    assert "nope" in str(caught.value)
    assert harness.route.call_count == 1
    assert harness.sleeps == []


@pytest.mark.anyio
async def test_explicit_format_bad_request_is_not_retried(harness: Harness) -> None:
    harness.route.side_effect = [error_response(400, "messages[1].content must be a string")] * 3
    async with harness.client(response_format="json_object") as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES, json_schema=SCHEMA)
    assert caught.value.kind == "bad_request"
    assert harness.route.call_count == 1
    assert harness.bodies()[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}


@pytest.mark.anyio
@pytest.mark.parametrize("max_retries", [0, 1, 4])
async def test_max_retries_bounds_http_attempts(harness: Harness, max_retries: int) -> None:
    harness.route.side_effect = [error_response(503)] * 10
    async with harness.client(max_retries=max_retries) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert harness.route.call_count == max_retries + 1
    assert len(harness.sleeps) == max_retries
    assert caught.value.kind == "server"
    assert caught.value.status == 503
    assert caught.value.retryable is True


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "kind"), [(408, "timeout"), (409, "server"), (429, "rate_limited")]
)
async def test_retryable_statuses(harness: Harness, status: int, kind: str) -> None:
    harness.route.side_effect = [error_response(status)] * 2
    async with harness.client(max_retries=1) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert caught.value.kind == kind
    assert harness.route.call_count == 2


@pytest.mark.anyio
async def test_spent_quota_is_not_retried(harness: Harness) -> None:
    harness.route.side_effect = [error_response(429, "insufficient_quota")] * 3
    async with harness.client() as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert (caught.value.kind, caught.value.retryable) == ("rate_limited", False)
    assert harness.route.call_count == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (httpx.ConnectError("refused"), "transport"),
        (httpx.RemoteProtocolError("peer closed connection"), "transport"),
        (httpx.ReadError("connection reset by peer"), "transport"),
        (httpx.ConnectTimeout("slow"), "timeout"),
        (httpx.PoolTimeout("busy"), "timeout"),
    ],
)
async def test_transport_failures_are_retried(
    harness: Harness, failure: Exception, kind: str
) -> None:
    harness.route.side_effect = [failure, completion()]
    async with harness.client() as client:
        reply = await client.chat(MESSAGES)
    assert reply.attempts == 2
    assert len(harness.sleeps) == 1

    harness.route.side_effect = [failure] * 3
    async with harness.client(max_retries=2) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert caught.value.kind == kind
    assert caught.value.retryable is True
    assert "3 attempts" in caught.value.message


@pytest.mark.anyio
async def test_html_200_is_the_server_s_fault_and_retried_with_backoff(harness: Harness) -> None:
    page = httpx.Response(200, text="<html>login</html>", headers={"content-type": "text/html"})
    harness.route.side_effect = [page, completion()]
    async with harness.client(rng=MaxJitter(), backoff_base_seconds=2) as client:
        reply = await client.chat(MESSAGES)
    assert (reply.attempts, harness.route.call_count, harness.sleeps) == (2, 2, [2.0])

    harness.route.side_effect = [page] * 3
    async with harness.client(max_retries=2) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert (caught.value.kind, caught.value.status, caught.value.retryable) == (
        "bad_response", 200, True,
    )  # fmt: skip
    assert "text/html" in caught.value.message and "3 attempts" in caught.value.message


#: Bodies no reader should take in: nested 200,000 deep (400 KB), over the bound (sent whole
#: or streamed without a length), and a gzip bomb (8 KB on the wire).
DEEP_BODY = b'{"choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
HUGE = llm_module.MAX_REPLY_BYTES + 1


def streamed(size: int) -> httpx.Response:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(size // 65536 + 1):
            yield b" " * 65536

    return httpx.Response(200, content=chunks(), headers={"content-type": "application/json"})


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (lambda: httpx.Response(200, content=DEEP_BODY), "nested deeper than 64 levels"),
        (lambda: httpx.Response(200, content=b" " * HUGE), "over the limit of 8,388,608"),
        (lambda: streamed(4 * HUGE), "over the limit of 8,388,608"),
        (
            lambda: httpx.Response(
                200, content=gzip.compress(b" " * HUGE), headers={"content-encoding": "gzip"}
            ),
            "gzip-encoded though asked for unencoded",
        ),
    ],
    ids=["200,000 deep", "over the bound", "streamed", "gzip bomb"],
)
async def test_a_reply_that_cannot_be_read_is_the_server_s_fault(
    harness: Harness, reply: Callable[[], httpx.Response], said: str
) -> None:
    harness.route.side_effect = lambda request: reply()
    async with harness.client(max_retries=1, circuit_failures=2) as client:
        for _ in range(2):
            with pytest.raises(LLMError) as caught:
                await client.chat(MESSAGES)
            assert (caught.value.kind, caught.value.retryable) == ("bad_response", True)
            assert said in caught.value.message and "2 attempts" in caught.value.message
        # Two calls that got nothing readable open the circuit: no more requests for a while.
        with pytest.raises(LLMError) as rejected:
            await client.chat(MESSAGES)
    assert rejected.value.kind == "circuit_open"
    assert harness.route.call_count == 4 and len(harness.sleeps) == 2


@pytest.mark.anyio
async def test_an_error_body_nested_deep_or_huge_still_reads_as_its_status(
    harness: Harness,
) -> None:
    deep = httpx.Response(500, content=b'{"error": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    huge = httpx.Response(503, content=b'{"error": {"message": "down"}}' + b" " * HUGE)
    harness.route.side_effect = [deep, huge]
    async with harness.client(max_retries=1) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert (caught.value.kind, caught.value.status) == ("server", 503)
    assert harness.route.call_count == 2


@pytest.mark.anyio
async def test_json_without_choices_is_a_bad_response(harness: Harness) -> None:
    harness.route.side_effect = [
        httpx.Response(200, json={"error": {"message": "upstream overloaded"}}),
        httpx.Response(200, json={"choices": []}),
    ]
    async with harness.client() as client:
        with pytest.raises(LLMError) as first:
            await client.chat(MESSAGES)
        with pytest.raises(LLMError) as second:
            await client.chat(MESSAGES)
    assert first.value.kind == second.value.kind == "bad_response"
    assert "upstream overloaded" in first.value.message


def respond_by_format(
    refusals: dict[str, httpx.Response],
) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        response_format = json.loads(request.content).get("response_format")
        level = response_format["type"] if response_format else "none"
        return refusals.get(level, completion())

    return handler


@pytest.mark.anyio
async def test_auto_format_falls_back_and_remembers(harness: Harness) -> None:
    harness.route.side_effect = respond_by_format(
        {
            "json_schema": error_response(400, "response_format json_schema is not supported"),
            "json_object": error_response(422, "Unsupported response format type json_object"),
        }
    )
    async with harness.client() as client:
        assert client.health()["response_format"] == "json_schema"
        first = await client.chat(MESSAGES, json_schema=SCHEMA)
        assert first.attempts == 3
        assert client.health()["response_format"] == "none"
        second = await client.chat(MESSAGES, json_schema=SCHEMA)

    assert second.attempts == 1
    formats = [body.get("response_format", {}).get("type") for body in harness.bodies()]
    assert formats == ["json_schema", "json_object", None, None]
    assert harness.sleeps == []


@pytest.mark.anyio
async def test_auto_format_stops_at_json_object_when_it_works(harness: Harness) -> None:
    # llama-cpp-python's server: a 500 whose validation error names the format.
    refusal = httpx.Response(
        500,
        json={
            "detail": [
                {
                    "type": "literal_error",
                    "loc": ["body", "response_format", "type"],
                    "msg": "Input should be 'text' or 'json_object'",
                }
            ]
        },
    )
    harness.route.side_effect = respond_by_format({"json_schema": refusal})
    async with harness.client() as client:
        await client.chat(MESSAGES, json_schema=SCHEMA)
        await client.chat(MESSAGES, json_schema=SCHEMA)
        health = client.health()
    formats = [body["response_format"]["type"] for body in harness.bodies()]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert (health["response_format"], health["response_format_confirmed"]) == (
        "json_object",
        True,
    )


@pytest.mark.anyio
async def test_unrelated_bad_request_does_not_downgrade_the_format(harness: Harness) -> None:
    harness.route.side_effect = [error_response(400, "maximum context length exceeded")] * 3
    async with harness.client() as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES, json_schema=SCHEMA)
        assert client.health()["response_format"] == "json_schema"
    assert caught.value.kind == "context"
    assert harness.route.call_count == 1


@pytest.mark.anyio
async def test_confirmed_format_is_kept_on_a_later_bad_request(harness: Harness) -> None:
    harness.route.side_effect = [completion(), error_response(400, "too many tokens")]
    async with harness.client() as client:
        await client.chat(MESSAGES, json_schema=SCHEMA)
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES, json_schema=SCHEMA)
        assert client.health()["response_format"] == "json_schema"
    assert caught.value.kind == "bad_request"
    assert harness.route.call_count == 2


@pytest.mark.anyio
async def test_explicit_json_schema_never_falls_back(harness: Harness) -> None:
    harness.route.side_effect = [error_response(400, "response_format not supported")] * 3
    async with harness.client(response_format="json_schema") as client:
        with pytest.raises(LLMError):
            await client.chat(MESSAGES, json_schema=SCHEMA)
    assert harness.route.call_count == 1


@pytest.mark.anyio
async def test_circuit_opens_rejects_and_half_opens(harness: Harness) -> None:
    harness.route.side_effect = [error_response(503)] * 3 + [completion()]
    async with harness.client(
        max_retries=0, circuit_failures=2, circuit_reset_seconds=300
    ) as client:
        for _ in range(2):
            with pytest.raises(LLMError) as caught:
                await client.chat(MESSAGES)
            assert caught.value.kind == "server"
        with pytest.raises(LLMError) as rejected:
            await client.chat(MESSAGES)
        assert rejected.value.kind == "circuit_open"
        assert harness.route.call_count == 2
        health = client.health()
        assert (health["circuit"], health["consecutive_failures"]) == ("open", 2)
        assert health["last_error"]["kind"] == "server"

        harness.clock.advance(299)
        with pytest.raises(LLMError):
            await client.chat(MESSAGES)
        assert harness.route.call_count == 2

        harness.clock.advance(1)
        with pytest.raises(LLMError) as probe:
            await client.chat(MESSAGES)
        assert probe.value.kind == "server"
        assert harness.route.call_count == 3
        assert client.health()["circuit"] == "open"
        with pytest.raises(LLMError) as reopened:
            await client.chat(MESSAGES)
        assert reopened.value.kind == "circuit_open"

        harness.clock.advance(300)
        reply = await client.chat(MESSAGES)
        assert reply.attempts == 1
        health = client.health()
        assert (health["circuit"], health["consecutive_failures"]) == ("closed", 0)
    assert harness.route.call_count == 4


@pytest.mark.anyio
async def test_half_open_lets_exactly_one_probe_through(harness: Harness) -> None:
    probe_arrived = anyio.Event()
    release_probe = anyio.Event()

    async def slow_probe(request: httpx.Request) -> httpx.Response:
        probe_arrived.set()
        await release_probe.wait()
        return completion()

    harness.route.side_effect = [error_response(500), slow_probe]
    async with harness.client(
        max_retries=0, circuit_failures=1, circuit_reset_seconds=10
    ) as client:
        with pytest.raises(LLMError):
            await client.chat(MESSAGES)
        harness.clock.advance(10)
        replies: list[LLMReply] = []

        async def probe() -> None:
            replies.append(await client.chat(MESSAGES))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(probe)
                await probe_arrived.wait()
                assert client.health()["circuit"] == "half_open"
                with pytest.raises(LLMError) as rejected:
                    await client.chat(MESSAGES)
                assert rejected.value.kind == "circuit_open"
                release_probe.set()
        assert client.health()["circuit"] == "closed"
    assert len(replies) == 1
    assert harness.route.call_count == 2


@pytest.mark.anyio
async def test_cancelled_probe_leaves_the_circuit_open_for_the_next_probe(
    harness: Harness,
) -> None:
    probe_arrived = anyio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        probe_arrived.set()
        await anyio.Event().wait()
        raise AssertionError("unreachable")

    harness.route.side_effect = [error_response(500), hang, completion()]
    async with harness.client(
        max_retries=0, circuit_failures=1, circuit_reset_seconds=10
    ) as client:
        with pytest.raises(LLMError):
            await client.chat(MESSAGES)
        harness.clock.advance(10)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(client.chat, MESSAGES)
                await probe_arrived.wait()
                group.cancel_scope.cancel()
        assert client.health()["circuit"] == "open"
        reply = await client.chat(MESSAGES)
    assert reply.attempts == 1


@pytest.mark.anyio
async def test_auth_failures_open_the_circuit_but_bad_requests_do_not(harness: Harness) -> None:
    harness.route.side_effect = [error_response(400, "bad")] * 3 + [error_response(401)] * 2
    async with harness.client(circuit_failures=2, response_format="none") as client:
        for _ in range(3):
            with pytest.raises(LLMError):
                await client.chat(MESSAGES)
        assert client.health()["circuit"] == "closed"
        assert client.health()["consecutive_failures"] == 0
        for _ in range(2):
            with pytest.raises(LLMError):
                await client.chat(MESSAGES)
        with pytest.raises(LLMError) as rejected:
            await client.chat(MESSAGES)
    assert rejected.value.kind == "circuit_open"
    assert harness.route.call_count == 5


@pytest.mark.anyio
async def test_hourly_budget_counts_attempts_and_slides(harness: Harness) -> None:
    harness.route.side_effect = [completion()] * 3
    async with harness.client(max_calls_per_hour=2) as client:
        await client.chat(MESSAGES)
        harness.clock.advance(1800)
        await client.chat(MESSAGES)
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
        assert (caught.value.kind, caught.value.retryable) == ("budget", True)
        assert harness.route.call_count == 2
        assert client.health()["calls_last_hour"] == 2
        harness.clock.advance(1800)
        assert client.health()["calls_last_hour"] == 1
        await client.chat(MESSAGES)
    assert harness.route.call_count == 3


@pytest.mark.anyio
async def test_retries_spend_budget(harness: Harness) -> None:
    harness.route.side_effect = [error_response(500)] * 10
    async with harness.client(max_calls_per_hour=2, max_retries=5) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert caught.value.kind == "budget"
    assert harness.route.call_count == 2


@pytest.mark.anyio
async def test_zero_budget_is_unlimited(harness: Harness) -> None:
    harness.route.side_effect = [completion()] * 5
    async with harness.client(max_calls_per_hour=0) as client:
        for _ in range(5):
            await client.chat(MESSAGES)
    assert harness.route.call_count == 5


@pytest.mark.anyio
async def test_concurrency_is_limited(harness: Harness) -> None:
    limit = 2
    in_flight = 0
    peak = 0
    limit_reached = anyio.Event()

    async def tracked(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == limit:
            limit_reached.set()
        await limit_reached.wait()
        # Give every other task the chance to barge in while this request is in flight.
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        in_flight -= 1
        return completion()

    harness.route.side_effect = tracked
    async with harness.client(max_concurrency=limit, max_calls_per_hour=0) as client:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                for _ in range(6):
                    group.start_soon(client.chat, MESSAGES)
    assert peak == limit
    assert harness.route.call_count == 6


@pytest.mark.anyio
async def test_api_key_never_leaks_into_errors_or_health(harness: Harness) -> None:
    harness.route.side_effect = [
        error_response(401, f"Incorrect API key provided: {API_KEY}"),
        httpx.ConnectError(f"could not reach proxy with Bearer {API_KEY}"),
        httpx.ConnectError(f"could not reach proxy with Bearer {API_KEY}"),
        httpx.Response(200, json={"error": {"message": f"key {API_KEY} disabled"}}),
    ]
    errors: list[LLMError] = []
    async with harness.client(max_retries=1, circuit_failures=10) as client:
        for _ in range(3):
            with pytest.raises(LLMError) as caught:
                await client.chat(MESSAGES)
            errors.append(caught.value)
        health = json.dumps(client.health())
        settings_repr = repr(client.settings)

    assert [error.kind for error in errors] == ["auth", "transport", "bad_response"]
    texts = [*(str(error) for error in errors), *(repr(error) for error in errors), health]
    for text in [*texts, settings_repr]:
        assert API_KEY not in text
        assert "TRANSCRIPT-BODY-MARKER" not in text
    assert "[REDACTED:api_key]" in str(errors[0])


@pytest.mark.anyio
async def test_a_secret_across_the_error_message_s_cut_is_redacted_not_cut(
    harness: Harness,
) -> None:
    secret = "ghp_" + "A1b2C3d4E5" * 4  # a GitHub token, whole only past the 200th character
    said = "x" * 190 + " " + secret
    harness.route.side_effect = [error_response(400, said)]
    async with harness.client(max_retries=1) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert "x" * 190 in caught.value.message  # the message is kept (a positive control)
    assert "ghp_A1b2" not in caught.value.message and "ghp_" not in json.dumps(client.health())


def test_settings_reject_non_http_base_url() -> None:
    with pytest.raises(ValueError):
        LLMClient(LLMSettings(base_url="file:///etc", model="m"))


class LoopbackServer:
    def __init__(self, behaviour: str) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.release = threading.Event()
        #: Hung requests whose hang ended (released, or after 10 s) before the test looked.
        self.hangs_ended = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                owner.requests.append((dict(self.headers.items()), body))
                if behaviour == "hang":
                    owner.release.wait(10)
                    owner.hangs_ended += 1
                    return
                payload = json.dumps(
                    {"choices": [{"message": {"content": "pong"}, "finish_reason": "stop"}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "LoopbackServer":
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def hanging_server() -> Iterator[LoopbackServer]:
    with LoopbackServer("hang") as server:
        yield server


@pytest.fixture
def answering_server() -> Iterator[LoopbackServer]:
    with LoopbackServer("answer") as server:
        yield server


@pytest.mark.anyio
async def test_real_server_round_trip(answering_server: LoopbackServer) -> None:
    settings = LLMSettings(base_url=answering_server.base_url, model="local", api_key=API_KEY)
    async with LLMClient(settings) as client:
        reply = await client.chat(MESSAGES, json_schema=SCHEMA)
    assert reply.content == "pong"
    headers, body = answering_server.requests[0]
    assert headers["Authorization"] == f"Bearer {API_KEY}"
    assert body["model"] == "local"
    assert body["response_format"]["type"] == "json_schema"


@pytest.mark.anyio
async def test_hanging_real_server_times_out(hanging_server: LoopbackServer) -> None:
    sleeps: list[float] = []

    async def record_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    settings = LLMSettings(
        base_url=hanging_server.base_url, model="local", timeout_seconds=0.3, max_retries=1
    )
    async with LLMClient(settings, sleep=record_sleep) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
        hangs_ended = hanging_server.hangs_ended
    assert caught.value.kind == "timeout"
    assert caught.value.retryable is True
    # Waited out (0.3 s × (1 + 1 retry)), never sent again while the server still held it.
    assert len(hanging_server.requests) == 1
    assert sleeps == []
    # The client gave up while the server still held the request: its own deadline ended the
    # wait, not the server (an unbounded read would end with the 10 s hang).
    assert hangs_ended == 0


@pytest.mark.anyio
async def test_explicit_format_refusal_is_remembered_even_if_the_call_fails(
    harness: Harness,
) -> None:
    harness.route.side_effect = [
        error_response(400, "response_format.json_schema is not supported by this model"),
        error_response(503),
        completion(),
    ]
    async with harness.client(max_retries=0) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES, json_schema=SCHEMA)
        assert caught.value.kind == "server"
        health = client.health()
        assert (health["response_format"], health["response_format_confirmed"]) == (
            "json_object",
            False,
        )
        await client.chat(MESSAGES, json_schema=SCHEMA)
    formats = [body["response_format"]["type"] for body in harness.bodies()]
    assert formats == ["json_schema", "json_object", "json_object"]


@pytest.mark.parametrize(
    ("url", "environ", "bundle"),
    [
        ("https://api.deepseek.com/v1/chat/completions", {}, True),
        ("http://127.0.0.1:11434/v1/chat/completions", {"HTTP_PROXY": "https://proxy:3128"}, True),
        ("http://127.0.0.1:11434/v1/chat/completions", {"all_proxy": "https://proxy:3128"}, True),
        ("http://127.0.0.1:11434/v1/chat/completions", {"HTTPS_PROXY": "https://proxy"}, False),
        ("http://127.0.0.1:11434/v1/chat/completions", {}, False),
    ],
)
def test_plain_http_without_a_proxy_skips_the_ca_bundle_and_fails_closed(
    url: str, environ: dict[str, str], bundle: bool
) -> None:
    context = _tls_context(url, environ)
    if bundle:
        assert context is True  # httpx's default: verify against the CA bundle
    else:
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.cert_store_stats()["x509_ca"] == 0  # trusts nobody
