"""Redaction through the real CLI: what `skilld once` sends to a loopback model, and what it keeps
of the model's own text.

- Secrets in a tool call's arguments (JSON escaped inside them, in the shapes issue 39 found)
  never reach a request body; the text around them does.
- Secrets in what the model says back (a decline's reason, a proposal's reason, a broken reply,
  a 400's body) are in none of `skilld events --json`, `skilld status --json`, the log lines or
  any file of the state dir (state.db's bytes and every text column included).

The secrets are fake: random bodies behind real prefixes, assembled at run time.
"""

from __future__ import annotations

import json
import random
import sqlite3
import string
from typing import Any

from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, Reply, completion, skill_reply, skip_reply

ALNUM = string.ascii_letters + string.digits
BASE64 = ALNUM + "+/"
HEX = "0123456789abcdef"


def _chars(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def _password(rng: random.Random) -> str:
    return _chars(rng, ALNUM, 14) + rng.choice("!#%+") + rng.choice(string.digits)


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style tool call: its arguments a JSON string, as agents write them."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def _planted_calls(rng: random.Random) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(tool, arguments) of calls that hold the secrets, and the secrets. Each call also holds a
    marker that is no secret: `marker-<n>`."""
    secrets = {
        "password": _password(rng),
        "api_key": _chars(rng, ALNUM, 32),
        "client_secret": _chars(rng, ALNUM + "_-", 32),
        "secret_access_key": _chars(rng, BASE64, 40),
        "session_token": "IQoJb3JpZ2luX2Vj" + _chars(rng, BASE64, 120) + "==",
        "configure_secret": _chars(rng, BASE64, 40),
        "mysql": _password(rng),
        "curl_user": _password(rng),
        "sshpass": _password(rng),
        "token_scheme": _chars(rng, ALNUM, 40),
        "sendgrid": "SG." + _chars(rng, ALNUM + "_-", 22) + "." + _chars(rng, ALNUM + "_-", 43),
        "azure": _chars(rng, BASE64, 86) + "==",
        "github_hex": _chars(rng, HEX, 40),
    }
    s = secrets
    commands = [
        f"""curl -d '{{"user":"ci","password":"{s["password"]}"}}' https://api.test/login""",
        "aws sts get-session-token > creds.json && echo '"
        + json.dumps(
            {
                "Credentials": {
                    "SecretAccessKey": s["secret_access_key"],
                    "SessionToken": s["session_token"],
                }
            }
        )
        + "'",
        f"aws configure set aws_secret_access_key {s['configure_secret']}",
        f"mysql -h db -uroot -p{s['mysql']} app < dump.sql",
        f"curl -u deploy:{s['curl_user']} https://api.test/v1/me",
        f"sshpass -p '{s['sshpass']}' ssh deploy@host uptime",
        f"""curl -H "Authorization: Token {s["token_scheme"]}" https://api.test/v1/me""",
        f"curl -H 'Authorization: Bearer {s['sendgrid']}' https://api.sendgrid.com/v3/mail/send",
        "az storage blob list --connection-string 'DefaultEndpointsProtocol=https;"
        f"AccountName=acct;AccountKey={s['azure']};EndpointSuffix=core.windows.net'",
        f"git clone https://{s['github_hex']}@github.com/acme/app.git",
    ]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"cmd": f"{command} # marker-{index}"}) for index, command in enumerate(commands)
    ]
    config = json.dumps(
        {"api_key": s["api_key"], "client_secret": s["client_secret"], "note": "marker-file"},
        indent=2,
    )
    calls.append(("write", {"file_path": "conf.json", "content": config}))
    return calls, list(secrets.values())


def test_no_secret_in_tool_call_arguments_reaches_the_model(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    calls, secrets = _planted_calls(random.Random(39))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Set up the deploy."}]
    for index, (tool, arguments) in enumerate(calls):
        call_id = f"c{index}"
        messages.append(
            {"role": "assistant", "content": "", "tool_calls": [_call(call_id, tool, arguments)]}
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "ok"})
    messages.append({"role": "assistant", "content": "The deploy is set up."})
    workspace.add_session("deploy", messages)
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()

    result = workspace.cli("once")

    assert result.returncode == 0, result.stderr
    sent = fake_llm.all_request_text
    window = "\n".join(
        message["content"] for request in fake_llm.requests for message in request["messages"]
    )
    assert fake_llm.requests, "the window was never sent"
    leaked = [secret for secret in secrets if secret in sent or secret in window]
    assert leaked == []
    # The control: the arguments did reach the model, redacted where the secrets were.
    assert [f"marker-{n}" for n in range(len(calls) - 1) if f"marker-{n}" not in window] == []
    assert "marker-file" in window
    assert window.count("[REDACTED:") >= len(secrets)


def _stored_text(workspace: Workspace) -> dict[str, str]:
    """Everything skilld keeps or shows: the event log and status as the CLI prints them,
    every file of the state dir as bytes, and every text column of state.db."""
    events = workspace.cli("events", "--json")
    status = workspace.cli("status", "--json")
    assert events.returncode == 0 and status.returncode == 0, events.stderr + status.stderr
    found = {"skilld events --json": events.stdout, "skilld status --json": status.stdout}
    for path in sorted(workspace.state.rglob("*")):
        if path.is_file():
            found[str(path)] = path.read_bytes().decode("utf-8", "replace")
    with sqlite3.connect(workspace.state / "state.db") as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for column, value in enumerate(row):
                    if isinstance(value, str):
                        found[f"state.db {table}[{column}]"] = (
                            found.get(f"state.db {table}[{column}]", "") + "\n" + value
                        )
    return found


def test_secrets_in_the_model_s_replies_are_stored_nowhere(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    rng = random.Random(3900)
    aws = ["AKIA" + _chars(rng, string.ascii_uppercase + string.digits, 16) for _ in range(2)]
    github = ["ghp_" + _chars(rng, ALNUM, 36) for _ in range(2)]
    passwords = [_password(rng) for _ in range(3)]
    replies = {
        "case-skip": skip_reply(f"Nothing reusable: key {aws[0]}, password={passwords[0]}."),
        "case-propose": skill_reply("deploy-notes", reason=f"Reusable; it used {github[0]}."),
        "case-invalid": Reply(
            body=completion(f"I cannot comply. password={passwords[1]} and {github[1]}")
        ),
        "case-error": Reply(
            status=400,
            body={"error": {"message": f"bad input near password={passwords[2]} {aws[1]}"}},
        ),
    }

    def answer(request: dict[str, Any]) -> Reply:
        text = json.dumps(request["messages"])
        return next((reply for case, reply in replies.items() if case in text), skip_reply())

    fake_llm.responder = answer
    for case in replies:
        workspace.add_session(case, conversation(case))
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()

    result = workspace.cli("once")

    assert result.returncode == 0, result.stderr
    stored = _stored_text(workspace)
    stored["log lines"] = result.stderr
    secrets = [*aws, *github, *passwords]
    leaks = [
        (secret, where) for secret in secrets for where, text in stored.items() if secret in text
    ]
    assert leaks == []
    # The control: every reply was kept where it belongs, with its secrets replaced.
    events = [json.loads(line) for line in stored["skilld events --json"].splitlines()]
    by_kind = {event["kind"]: event for event in events}
    assert "Nothing reusable: key [REDACTED:aws_access_key_id]" in by_kind["skipped"]["reason"]
    assert by_kind["created"]["skill"] == "deploy-notes"
    assert "Reusable; it used [REDACTED:github_token]." in by_kind["created"]["reason"]
    assert "I cannot comply. password=[REDACTED:password]" in by_kind["invalid"]["detail"]["raw"]
    assert "bad input near password=[REDACTED:password]" in by_kind["error"]["reason"]
    status = json.loads(stored["skilld status --json"])
    assert "bad input near password=[REDACTED:password]" in status["llm"]["last_error"]["message"]


def test_secrets_in_the_curator_s_plan_are_stored_nowhere(
    workspace: Workspace, fake_llm: FakeLLM
) -> None:
    rng = random.Random(3901)
    github, password = "ghp_" + _chars(rng, ALNUM, 36), _password(rng)
    for name in ("lint-python", "lint-js", "old-trick"):
        workspace.cli_here(
            "skills", "write", name, "--description", f"How to {name}.", "--content", "1. Go.\n"
        )
    merge = {
        "action": "merge",
        "name": "",
        "into": "lint",
        "from": ["lint-python", "lint-js"],
        "description": "How to lint.",
        "whenToUse": "When linting.",
        "content": "1. Lint.\n",
        "reason": f"They overlap; both push with {github}.",
    }
    archive = {"action": "archive", "name": "old-trick", "reason": f"Stale: password={password}."}
    fake_llm.responder = lambda _request: Reply(
        body=completion(json.dumps({"actions": [merge, archive]}))
    )
    workspace.llm_url = fake_llm.base_url
    workspace.write_config()

    result = workspace.cli("curate", "--consolidate")

    assert result.returncode == 0, result.stderr
    stored = _stored_text(workspace)
    leaks = [(s, where) for s in (github, password) for where, text in stored.items() if s in text]
    assert leaks == []
    # The control: the plan was applied and its report kept, its rationale redacted.
    assert (workspace.skills / "lint" / "SKILL.md").is_file()
    (report,) = (workspace.state / "reports").glob("curate-*.json")
    assert "They overlap; both push with [REDACTED:github_token]." in report.read_text()
