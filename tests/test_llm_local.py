"""A local model as a peer (docs/local-models.md): refusals read by what the body says, the
context learned and windows fitted to it, a slow server waited out, the daily token cap, and
a placeholder key left unmasked."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import respx

from skilld.llm import (
    LLMClient,
    LLMError,
    LLMSettings,
    context_from_server,
    context_limit,
    format_refusal,
    is_context_refusal,
)

BASE_URL = "http://llm.test/v1"
MESSAGES = [{"role": "user", "content": "hello"}]
SCHEMA = {"type": "object", "properties": {"evolve": {"type": "boolean"}}}

#: llama-cpp-python's server, asked for json_schema (its validation error, as it sends it).
LLAMA_CPP_PYTHON_500 = json.dumps(
    {
        "detail": [
            {
                "type": "literal_error",
                "loc": ["body", "response_format", "type"],
                "msg": "Input should be 'text' or 'json_object'",
                "input": "json_schema",
                "ctx": {"expected": "'text' or 'json_object'"},
            }
        ]
    }
)
CONTEXT_400 = json.dumps(
    {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, you "
            "requested 20489 tokens (16393 in the messages, 4096 in the completion).",
            "type": "invalid_request_error",
        }
    }
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- refusal shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, LLAMA_CPP_PYTHON_500, "explicit"),
        (400, '{"error": {"message": "response_format json_schema is not supported"}}', "explicit"),
        (422, '{"detail": "Unsupported response format type json_object"}', "explicit"),
        (422, '{"detail": "unsupported parameter"}', "ambiguous"),
        (400, '{"error": {"message": "bad request"}}', "no"),
        (400, CONTEXT_400, "no"),
        (500, '{"error": "internal error"}', "no"),
        (503, '{"error": "loading model"}', "no"),
        (401, '{"error": "response_format needs a paid key"}', "no"),
    ],
)
def test_format_refusal_is_read_from_the_body(status: int, body: str, expected: str) -> None:
    assert format_refusal(status, body) == expected


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        (CONTEXT_400, 8192),
        ("Requested tokens (9000) exceed context window of 4096", 4096),
        (
            '{"error": {"code": 400, "message": "the request exceeds the available context size,'
            ' try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000,'
            ' "n_ctx": 4096}}',
            4096,
        ),
        ("context length exceeded", None),
    ],
)
def test_context_refusals_and_their_numbers(body: str, limit: int | None) -> None:
    assert is_context_refusal(400, body)
    assert context_limit(body) == limit


def test_an_unspecific_400_is_no_context_refusal() -> None:
    assert not is_context_refusal(400, '{"error": {"message": "bad request"}}')
    assert not is_context_refusal(200, CONTEXT_400)


class Harness:
    def __init__(self) -> None:
        self.router = respx.Router(base_url=BASE_URL, assert_all_called=False)
        self.route = self.router.post("/chat/completions")
        self.sleeps: list[float] = []

    async def fake_sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def client(self, tokens_today: dict[str, Any] | None = None, **overrides: Any) -> LLMClient:
        settings = LLMSettings(**{"base_url": BASE_URL, "model": "m", "api_key": "x"} | overrides)
        return LLMClient(
            settings,
            transport=httpx.MockTransport(self.router.async_handler),
            sleep=self.fake_sleep,
            rng=random.Random(3),
            tokens_today=tokens_today,
        )

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(call.request.content) for call in self.route.calls]


def completion(total_tokens: int | None = 16) -> httpx.Response:
    body: dict[str, Any] = {
        "choices": [
            {"message": {"content": '{"evolve": false, "reason": "r"}'}, "finish_reason": "stop"}
        ]
    }
    if total_tokens is not None:
        body["usage"] = {"prompt_tokens": total_tokens - 1, "completion_tokens": 1}
        body["usage"]["total_tokens"] = total_tokens
    return httpx.Response(200, json=body)


def by_format(refusal: httpx.Response) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        response_format = json.loads(request.content).get("response_format")
        return refusal if response_format["type"] == "json_schema" else completion()

    return handler


@pytest.mark.anyio
async def test_llama_cpp_python_500_steps_down_to_json_object_with_the_schema() -> None:
    harness = Harness()
    harness.route.side_effect = by_format(httpx.Response(500, text=LLAMA_CPP_PYTHON_500))
    async with harness.client() as client:
        reply = await client.chat(MESSAGES, json_schema=SCHEMA)
        await client.chat(MESSAGES, json_schema=SCHEMA)
        health = client.health()
    bodies = harness.bodies()
    assert [b["response_format"]["type"] for b in bodies] == [
        "json_schema",
        "json_object",
        "json_object",
    ]
    assert bodies[1]["response_format"]["schema"] == SCHEMA
    # A refusal of the format is neither an outage nor a retry: no backoff, no circuit.
    assert harness.sleeps == []
    assert reply.attempts == 2
    assert (health["response_format"], health["response_format_confirmed"]) == (
        "json_object",
        True,
    )
    assert (health["circuit"], health["consecutive_failures"]) == ("closed", 0)


@pytest.mark.anyio
async def test_an_unspecific_400_keeps_the_format_and_is_not_retried() -> None:
    harness = Harness()
    harness.route.side_effect = [httpx.Response(400, json={"error": {"message": "bad"}})]
    async with harness.client() as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES, json_schema=SCHEMA)
        assert client.health()["response_format"] == "json_schema"
    assert caught.value.kind == "bad_request"
    assert harness.route.call_count == 1


@pytest.mark.anyio
async def test_a_context_refusal_teaches_the_context_and_fits_windows_to_it() -> None:
    harness = Harness()
    harness.route.side_effect = [httpx.Response(400, text=CONTEXT_400)] * 2
    async with harness.client() as client:
        assert client.window_chars(3000) is None  # unknown yet: window_max_chars alone
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES, json_schema=SCHEMA)
        assert (caught.value.kind, caught.value.retryable) == ("context", True)
        assert client.context_tokens == 8192
        assert client.reply_tokens() == 2048  # a quarter of the context, below max_tokens
        first = client.window_chars(3000)
        assert first is not None
        # The window, the prompt and the reply fit in 8192 tokens at 3 characters a token.
        assert 2048 + 1000 + first / 3 <= 8192
        # Refused again at the same context: the estimate was optimistic, fit smaller.
        with pytest.raises(LLMError):
            await client.chat(MESSAGES, json_schema=SCHEMA)
        second = client.window_chars(3000)
        assert second is not None and second < first
        health = client.health()
    assert (health["context_tokens"], health["context_source"]) == (8192, "refusal")
    assert harness.sleeps == []
    assert harness.bodies()[1]["max_tokens"] == 2048


def test_a_learned_context_survives_into_the_next_client() -> None:
    settings = LLMSettings(base_url=BASE_URL, model="m")
    learned = LLMClient(settings).health() | {
        "context_tokens": 4096,
        "context_source": "refusal",
        "chars_per_token": 2.25,
        "response_format": "json_object",
        "response_format_confirmed": True,
    }
    client = LLMClient(settings, learned=learned)
    assert client.context_tokens == 4096
    health = client.health()
    assert health["chars_per_token"] == 2.25
    assert (health["response_format"], health["response_format_confirmed"]) == ("json_object", True)
    configured = LLMClient(LLMSettings(base_url=BASE_URL, model="m", context_tokens=32768))
    assert LLMClient(configured.settings, learned=learned).context_tokens == 32768
    # Learned of another server or model: nothing carries over.
    other = LLMClient(LLMSettings(base_url=BASE_URL, model="other"), learned=learned)
    assert other.context_tokens is None
    assert other.health()["response_format"] == "json_schema"


# -- context sources --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "document", "expected"),
    [
        ("/props", {"n_ctx": 4096}, 4096),
        ("/props", {"default_generation_settings": {"n_ctx": 2048}}, 2048),
        (
            "/v1/models",
            {"data": [{"id": "other", "max_model_len": 1}, {"id": "m", "max_model_len": 32768}]},
            32768,
        ),
        ("/v1/models", {"data": [{"id": "gpt", "owned_by": "openai"}]}, None),
        ("/api/show", {"model_info": {"gemma3.context_length": 32768}}, 32768),
        ("/api/show", {"parameters": "num_ctx 8192\ntemperature 1", "model_info": {}}, 8192),
        ("/props", {"n_ctx": True}, None),
    ],
)
def test_context_from_each_server(path: str, document: object, expected: int | None) -> None:
    assert context_from_server(path, document, "m") == expected


class ContextServer:
    """A loopback server that answers one of the context endpoints (and 404 elsewhere)."""

    def __init__(self, answers: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.seen: list[tuple[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                owner.seen.append((method, self.path))
                document = answers.get((method, self.path))
                payload = json.dumps(document or {"error": "not found"}).encode()
                self.send_response(200 if document is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self.answer("GET")

            def do_POST(self) -> None:
                self.answer("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"


@pytest.fixture
def context_server(request: pytest.FixtureRequest) -> Iterator[ContextServer]:
    server = ContextServer(request.param)
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("context_server", "expected", "source"),
    [
        ({("GET", "/props"): {"default_generation_settings": {"n_ctx": 4096}}}, 4096, "/props"),
        (
            {("GET", "/v1/models"): {"data": [{"id": "m", "max_model_len": 16384}]}},
            16384,
            "/v1/models",
        ),
        (
            {("POST", "/api/show"): {"model_info": {"llama.context_length": 8192}}},
            8192,
            "/api/show",
        ),
        ({}, None, None),
    ],
    indirect=["context_server"],
)
async def test_context_learned_from_a_real_server(
    context_server: ContextServer, expected: int | None, source: str | None
) -> None:
    settings = LLMSettings(base_url=context_server.base_url, model="m")
    async with LLMClient(settings) as client:
        assert await client.learn_context() == expected
        asked = len(context_server.seen)
        assert await client.learn_context() == expected  # asked once per client
        health = client.health()
    assert len(context_server.seen) == asked
    assert (health["context_tokens"], health["context_source"]) == (expected, source)


@pytest.mark.anyio
async def test_a_configured_context_asks_the_server_nothing() -> None:
    server = ContextServer({("GET", "/props"): {"n_ctx": 4096}})
    server.thread.start()
    try:
        settings = LLMSettings(base_url=server.base_url, model="m", context_tokens=2048)
        async with LLMClient(settings) as client:
            assert await client.learn_context() == 2048
    finally:
        server.server.shutdown()
        server.server.server_close()
    assert server.seen == []


# -- a slow server, the token cap, the key ------------------------------------------------------


@pytest.mark.anyio
async def test_a_read_timeout_is_waited_out_never_sent_twice() -> None:
    harness = Harness()
    harness.route.side_effect = [httpx.ReadTimeout("slow"), completion()]
    async with harness.client() as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert caught.value.kind == "timeout"
    assert harness.route.call_count == 1
    assert harness.sleeps == []


@pytest.mark.anyio
async def test_the_daily_token_cap_stops_calls_and_survives_a_new_client() -> None:
    harness = Harness()
    harness.route.side_effect = [completion(600), completion(600), completion(600)]
    async with harness.client(max_tokens_per_day=1000) as client:
        await client.chat(MESSAGES)
        await client.chat(MESSAGES)  # under the cap when sent: 600 < 1000
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
        record = client.token_record()
        health = client.health()
    assert (caught.value.kind, caught.value.retryable) == ("budget", True)
    assert "max_tokens_per_day=1000" in caught.value.message
    assert harness.route.call_count == 2
    assert record["tokens"] == 1200
    assert (health["tokens_today"], health["max_tokens_per_day"]) == (1200, 1000)
    # A restart reads the record back: still at the cap.
    again = Harness()
    async with again.client(max_tokens_per_day=1000, tokens_today=record) as client:
        with pytest.raises(LLMError):
            await client.chat(MESSAGES)
    assert again.route.call_count == 0
    # Yesterday's spend does not count today.
    async with again.client(
        max_tokens_per_day=1000, tokens_today={"day": "2000-01-01", "tokens": 10**9}
    ) as client:
        again.route.side_effect = [completion(5)]
        await client.chat(MESSAGES)


@pytest.mark.anyio
async def test_tokens_are_estimated_when_the_server_sends_no_usage() -> None:
    harness = Harness()
    harness.route.side_effect = [completion(None)]
    async with harness.client() as client:
        await client.chat([{"role": "user", "content": "a" * 3000}])
        assert client.token_record()["tokens"] >= 1000


@pytest.mark.anyio
@pytest.mark.parametrize(("key", "masked"), [("x", False), ("EMPTY", False), ("sk-local-1", True)])
async def test_the_key_is_masked_only_when_long_enough_to_be_a_secret(
    key: str, masked: bool
) -> None:
    harness = Harness()
    message = f"unexpected {key} in text; tex{key}t"
    harness.route.side_effect = [httpx.Response(400, json={"error": {"message": message}})]
    async with harness.client(api_key=key) as client:
        with pytest.raises(LLMError) as caught:
            await client.chat(MESSAGES)
    assert ("[REDACTED:api_key]" in caught.value.message) is masked
    if not masked:
        assert f"tex{key}t" in caught.value.message
