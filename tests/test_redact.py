"""Secret redaction: every planted secret is replaced and counted, ordinary text is left alone.

The secrets below are fake: random bodies behind real prefixes, assembled at run time so that
no complete token appears in this file.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skilld.redact import KINDS, Redaction, merge_counts, redact

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
BASE64URL = ALNUM + "_-"


def _chars(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def _password(rng: random.Random) -> str:
    return _chars(rng, ALNUM, 14) + rng.choice("!#%+") + rng.choice(string.digits)


def _pem(label: str, rng: random.Random, *, newline: str = "\n") -> str:
    body = newline.join(_chars(rng, ALNUM + "+/", 64) for _ in range(4))
    return f"-----BEGIN {label}-----{newline}{body}{newline}-----END {label}-----"


def _base64(rng: random.Random, length: int) -> str:
    return _chars(rng, ALNUM + "+/", length - 2) + "=="


def _session_token(rng: random.Random) -> str:
    return "IQoJb3JpZ2luX2Vj" + _chars(rng, ALNUM + "+/", 300) + "=="


def _escaped(text: str) -> str:
    """`text` as it is inside a JSON string (a tool call's arguments hold JSON in a command)."""
    return json.dumps(text)[1:-1]


def _jwt(rng: random.Random) -> str:
    def segment(payload: str) -> str:
        return base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode()

    header = segment('{"alg":"HS256","typ":"JWT"}')
    payload = segment(f'{{"sub":"{rng.randrange(10**9)}","name":"Jane Doe"}}')
    return f"{header}.{payload}.{_chars(rng, BASE64URL, 43)}"


@dataclass(frozen=True)
class Planted:
    """A secret in context: redacting `before + secret + after` must give
    `before + [REDACTED:kind] + after`."""

    kind: str
    before: str
    secret: str
    after: str

    @property
    def text(self) -> str:
        return self.before + self.secret + self.after

    @property
    def expected(self) -> str:
        return f"{self.before}[REDACTED:{self.kind}]{self.after}"


Factory = Callable[[random.Random], Planted]

# One factory per detected shape or context; several per kind where the brief names variants.
FACTORIES: dict[str, Factory] = {
    "aws access key id": lambda r: Planted(
        "aws_access_key_id", "export AWS_ACCESS_KEY_ID=", "AKIA" + _chars(r, UPPER_DIGITS, 16), "\n"
    ),
    "aws temporary key id": lambda r: Planted(
        "aws_access_key_id", '"AccessKeyId": "', "ASIA" + _chars(r, UPPER_DIGITS, 16), '",'
    ),
    "aws secret in credentials file": lambda r: Planted(
        "aws_secret_access_key",
        "[default]\naws_secret_access_key = ",
        _chars(r, ALNUM + "/+", 40),
        "\nregion = eu-west-1",
    ),
    "aws secret in sts json": lambda r: Planted(
        "aws_secret_access_key", '"SecretAccessKey": "', _chars(r, ALNUM + "/+", 40), '",'
    ),
    "aws secret in env": lambda r: Planted(
        "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY=", _chars(r, ALNUM + "/+", 40), " aws s3 ls"
    ),
    "aws configure prompt": lambda r: Planted(
        "aws_secret_access_key",
        "AWS Secret Access Key [None]: ",
        _chars(r, ALNUM + "/+", 40),
        "\nDefault region name [None]:",
    ),
    **{
        f"github {prefix}": (
            lambda r, prefix=prefix: Planted(
                "github_token", "GITHUB_TOKEN=", prefix + _chars(r, ALNUM, 36), " gh pr list"
            )
        )
        for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    },
    "github fine-grained pat": lambda r: Planted(
        "github_token",
        "token: ",
        "github_pat_" + _chars(r, ALNUM, 22) + "_" + _chars(r, ALNUM, 59),
        "\n",
    ),
    "gitlab pat": lambda r: Planted(
        "gitlab_token", "PRIVATE-TOKEN: ", "glpat-" + _chars(r, BASE64URL, 20), "\n"
    ),
    "openai legacy key": lambda r: Planted(
        "openai_api_key",
        "client = OpenAI(api_key='",
        "sk-" + _chars(r, ALNUM, 20) + "T3BlbkFJ" + _chars(r, ALNUM, 20),
        "')",
    ),
    "openai project key": lambda r: Planted(
        "openai_api_key",
        'OPENAI_API_KEY="',
        "sk-proj-" + _chars(r, BASE64URL, 74) + "T3BlbkFJ" + _chars(r, BASE64URL, 74),
        '"',
    ),
    "anthropic key": lambda r: Planted(
        "anthropic_api_key",
        "-H 'x-api-key: ",
        "sk-ant-api03-" + _chars(r, BASE64URL, 93) + "AA",
        "'",
    ),
    **{
        f"slack {prefix}": (
            lambda r, prefix=prefix: Planted(
                "slack_token",
                "SLACK_BOT_TOKEN=",
                f"{prefix}{r.randrange(10**11, 10**12)}-{r.randrange(10**12, 10**13)}-"
                + _chars(r, ALNUM, 24),
                "\n",
            )
        )
        for prefix in ("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-")
    },
    "slack webhook": lambda r: Planted(
        "slack_webhook",
        "curl -X POST ",
        "https://hooks.slack.com/services/T"
        + _chars(r, UPPER_DIGITS, 8)
        + "/B"
        + _chars(r, UPPER_DIGITS, 10)
        + "/"
        + _chars(r, ALNUM, 24),
        ' -d \'{"text": "deployed"}\'',
    ),
    "gcp api key": lambda r: Planted(
        "gcp_api_key",
        "https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key=",
        "AIza" + _chars(r, BASE64URL, 35),
        "\n",
    ),
    "gcp service account": lambda r: Planted(
        "gcp_service_account_key",
        '{"type": "service_account", "private_key_id": "'
        + _chars(r, "0123456789abcdef", 40)
        + '", "private_key": "',
        _pem("PRIVATE KEY", r, newline="\\n") + "\\n",
        '", "client_email": "ci@project.iam.gserviceaccount.com"}',
    ),
    "hugging face token": lambda r: Planted(
        "huggingface_token", "huggingface-cli login --token ", "hf_" + _chars(r, ALNUM, 34), "\n"
    ),
    **{
        f"stripe {prefix}": (
            lambda r, prefix=prefix: Planted(
                "stripe_key", "stripe.api_key = ", prefix + _chars(r, ALNUM, 24), "\n"
            )
        )
        for prefix in ("sk_live_", "sk_test_", "rk_live_", "pk_live_")
    },
    "npm token": lambda r: Planted(
        "npm_token", "//registry.npmjs.org/:_authToken=", "npm_" + _chars(r, ALNUM, 36), "\n"
    ),
    "pypi token": lambda r: Planted(
        "pypi_token",
        "password = ",
        "pypi-AgEIcHlwaS5vcmc" + _chars(r, BASE64URL, 60),
        "\n",
    ),
    "jwt": lambda r: Planted("jwt", "Authorization: Bearer ", _jwt(r), "\r\n"),
    **{
        f"pem {label}": (
            lambda r, label=label: Planted("private_key", "$ cat id\n", _pem(label, r), "\n$ ls")
        )
        for label in (
            "PRIVATE KEY",
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
        )
    },
    "pem encrypted rsa headers": lambda r: Planted(
        "private_key",
        "key.pem:\n",
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        "DEK-Info: AES-128-CBC,"
        + _chars(r, "0123456789ABCDEF", 32)
        + "\n\n"
        + _chars(r, ALNUM + "+/", 64)
        + "\n-----END RSA PRIVATE KEY-----",
        "\n",
    ),
    "pem cut off by truncation": lambda r: Planted(
        "private_key",
        "output:\n",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n" + _chars(r, ALNUM + "+/", 70),
        "\n[… 2048 characters truncated]",
    ),
    "password assignment": lambda r: Planted("password", "password=", _password(r), " ./run.sh"),
    "password json": lambda r: Planted(
        "password", '{"user": "admin", "password": "', _password(r), '"}'
    ),
    "password yaml": lambda r: Planted(
        "password", "database:\n  host: db\n  password: ", _password(r), "\n  port: 5432"
    ),
    "passwd colon": lambda r: Planted("password", "passwd: ", _password(r), "\n"),
    "db pass env": lambda r: Planted("password", "DB_PASS=", _password(r), "\n"),
    "password flag": lambda r: Planted(
        "password", "mysql --db-password '", _password(r), "' -e 'select 1'"
    ),
    "secret export": lambda r: Planted(
        "secret", "export SECRET_KEY=", _chars(r, ALNUM, 50), "\npython manage.py runserver"
    ),
    "client secret yaml": lambda r: Planted(
        "secret", "client_secret: ", _chars(r, BASE64URL, 32), "\n"
    ),
    "token assignment": lambda r: Planted("token", "token=", _chars(r, ALNUM, 32), "&page=2"),
    "access token json": lambda r: Planted(
        "token", '{"access_token": "', _chars(r, BASE64URL, 40), '", "expires_in": 3600}'
    ),
    "annotated token": lambda r: Planted("token", "token: str = '", _chars(r, ALNUM, 24), "'\n"),
    "token flag": lambda r: Planted("token", "deploy --token ", _chars(r, ALNUM, 32), " --prod"),
    "api key assignment": lambda r: Planted("api_key", "api_key=", _chars(r, ALNUM, 32), "\n"),
    "api key header": lambda r: Planted(
        "api_key", "curl -H 'X-API-Key: ", _chars(r, ALNUM, 32), "' https://api.test"
    ),
    "bearer token": lambda r: Planted(
        "bearer_token",
        'curl -H "Authorization: Bearer ',
        _chars(r, BASE64URL + ".~", 40),
        '" https://api.test/v1/models',
    ),
    "basic auth": lambda r: Planted(
        "basic_auth",
        "Authorization: Basic ",
        base64.b64encode(f"deploy:{_password(r)}".encode()).decode(),
        "\n",
    ),
    "url password": lambda r: Planted(
        "url_password", "DATABASE_URL=postgres://app:", _password(r), "@db.internal:5432/app"
    ),
    # Tool-call arguments are JSON: JSON in a command or a file's content is escaped there.
    "password as escaped json in a command": lambda r: Planted(
        "password",
        '{"cmd":"curl -d \'{\\"password\\":\\"',
        _password(r),
        '\\"}\' https://api.test"}',
    ),
    "api key as escaped json in a file": lambda r: Planted(
        "api_key",
        '{"file_path":"conf.json","content":"{\\n  \\"api_key\\": \\"',
        _chars(r, ALNUM, 32),
        '\\"\\n}"}',
    ),
    "client secret as escaped json": lambda r: Planted(
        "secret",
        '{\\"client_id\\":\\"app\\",\\"client_secret\\":\\"',
        _chars(r, BASE64URL, 32),
        '\\"}',
    ),
    "aws secret as escaped sts json": lambda r: Planted(
        "aws_secret_access_key",
        '{\\"Credentials\\":{\\"SecretAccessKey\\":\\"',
        _chars(r, ALNUM + "/+", 40),
        '\\",',
    ),
    "aws session token as escaped sts json": lambda r: Planted(
        "token", ',\\"SessionToken\\":\\"', _session_token(r), '\\"}}'
    ),
    "password json escaped twice": lambda r: Planted(
        "password",
        '{"content":"' + _escaped('{"body": "{\\"password\\": \\"'),
        _password(r),
        _escaped('\\"}"}') + '"}',
    ),
    "a token glued to an escaped line break": lambda r: Planted(
        "aws_access_key_id", '{"content":"id\\n', "AKIA" + _chars(r, UPPER_DIGITS, 16), '\\n"}'
    ),
    "aws session token env": lambda r: Planted(
        "aws_session_token", "export AWS_SESSION_TOKEN=", _session_token(r), "\n"
    ),
    "aws configure set secret": lambda r: Planted(
        "aws_secret_access_key",
        "aws configure set aws_secret_access_key ",
        _chars(r, ALNUM + "/+", 40),
        " --profile ci",
    ),
    "aws configure set session token": lambda r: Planted(
        "aws_session_token", "aws configure set default.aws_session_token ", _session_token(r), "\n"
    ),
    "mysql -p": lambda r: Planted(
        "password", "mysql -h db -uroot -p", _password(r), " app < d.sql"
    ),
    "mariadb-dump -p quoted": lambda r: Planted(
        "password", "mariadb-dump -u app -p'", _password(r), "' app > dump.sql"
    ),
    "sshpass -p": lambda r: Planted("password", "sshpass -p ", _password(r), " ssh deploy@host"),
    "docker login -p": lambda r: Planted(
        "password", "docker login -u ci -p ", _password(r), " registry.example.com"
    ),
    "curl -u": lambda r: Planted("password", "curl -u admin:", _password(r), " https://api.test"),
    "curl --user quoted": lambda r: Planted(
        "password", 'curl --user "deploy:', _password(r), '" https://api.test/v1'
    ),
    "authorization token scheme": lambda r: Planted(
        "authorization_token",
        "curl -H 'Authorization: Token ",
        _chars(r, ALNUM, 40),
        "' https://api.test/v1/me",
    ),
    "sendgrid key": lambda r: Planted(
        "sendgrid_api_key",
        "SENDGRID_API_KEY=",
        "SG." + _chars(r, BASE64URL, 22) + "." + _chars(r, BASE64URL, 43),
        "\n",
    ),
    "azure storage connection string": lambda r: Planted(
        "azure_key",
        "AZURE_STORAGE_CONNECTION_STRING='DefaultEndpointsProtocol=https;AccountName=acct;"
        "AccountKey=",
        _base64(r, 88),
        ";EndpointSuffix=core.windows.net'",
    ),
    "azure service bus connection string": lambda r: Planted(
        "azure_key",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=",
        _base64(r, 44),
        "\n",
    ),
    "az --account-key": lambda r: Planted(
        "azure_key",
        "az storage blob list --account-name acct --account-key ",
        _base64(r, 88),
        " -c logs",
    ),
    "github hex token as a url's user": lambda r: Planted(
        "github_token",
        "git clone https://",
        _chars(r, "0123456789abcdef", 40),
        "@github.com/acme/app.git",
    ),
}

_CASES = list(FACTORIES.items())


@pytest.mark.parametrize(("label", "factory"), _CASES, ids=[label for label, _ in _CASES])
def test_each_planted_secret_is_replaced_and_counted(label: str, factory: Factory) -> None:
    planted = factory(random.Random(label))

    result = redact(planted.text)

    assert result.text == planted.expected
    assert dict(result.counts) == {planted.kind: 1}
    assert planted.secret not in result.text


@pytest.mark.parametrize(("label", "factory"), _CASES, ids=[label for label, _ in _CASES])
def test_redacting_twice_changes_nothing(label: str, factory: Factory) -> None:
    once = redact(factory(random.Random(label)).text)

    twice = redact(once.text)

    assert twice.text == once.text
    assert dict(twice.counts) == {}


def test_every_kind_has_a_planted_case() -> None:
    planted_kinds = {factory(random.Random(0)).kind for factory in FACTORIES.values()}
    assert planted_kinds == set(KINDS)


def test_kinds_are_unique_snake_case_names() -> None:
    assert len(set(KINDS)) == len(KINDS)
    assert all(re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*", kind) for kind in KINDS)


def test_a_secret_inside_a_secret_context_keeps_its_specific_kind_and_the_key_name() -> None:
    rng = random.Random(7)
    github = "ghp_" + _chars(rng, ALNUM, 36)
    text = f"token={github}\nurl=https://x-access-token:{github}@github.com/o/r.git"

    result = redact(text)

    assert result.text == (
        "token=[REDACTED:github_token]\n"
        "url=https://x-access-token:[REDACTED:github_token]@github.com/o/r.git"
    )
    assert dict(result.counts) == {"github_token": 2}


def test_a_context_value_around_a_shaped_secret_is_replaced_whole() -> None:
    github = "ghp_" + _chars(random.Random(8), ALNUM, 36)

    result = redact(f"password=prefix-{github} next")

    assert result.text == "password=[REDACTED:github_token] next"
    assert dict(result.counts) == {"github_token": 1}


_VALUE = "Xk2mP9qLzz4w!"


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("dbPass", "password"),
        ("DB_PW", "password"),
        ("MYSQL_PWD", "password"),
        ("PGPASSWORD", "password"),
        ("http_auth", "secret"),
        ("SigningKey", "secret"),
        ("apiKey", "api_key"),
        ("refreshToken", "token"),
        ("bypass", None),
        ("compass", None),
        ("oauth", None),
        ("PWD", None),
        ("private_key", None),
        ("primary_key", None),
    ],
)
def test_the_whole_key_name_decides_whether_a_value_is_secret(key: str, kind: str | None) -> None:
    result = redact(f"{key}={_VALUE}")

    if kind is None:
        assert result.text == f"{key}={_VALUE}"
        assert dict(result.counts) == {}
    else:
        assert result.text == f"{key}=[REDACTED:{kind}]"
        assert dict(result.counts) == {kind: 1}


def test_surrounding_text_and_non_ascii_offsets_survive() -> None:
    rng = random.Random(9)
    key = "AKIA" + _chars(rng, UPPER_DIGITS, 16)
    password = _password(rng)
    # U+0130 lower-cases to two characters; every other character keeps its offset.
    text = f"İstanbul ünïcödé → {key} ✓\nİİ PASSWORD={password} 日本語 İ"

    result = redact(text)

    assert result.text == (
        "İstanbul ünïcödé → [REDACTED:aws_access_key_id] ✓\n"
        "İİ PASSWORD=[REDACTED:password] 日本語 İ"
    )


def test_only_one_character_changes_length_when_lower_cased() -> None:
    # The keyword detectors run on a lower-cased copy and rely on equal offsets.
    longer = [code for code in range(sys.maxunicode + 1) if len(chr(code).lower()) != 1]
    assert longer == [0x130]


@pytest.mark.parametrize(
    "text",
    [
        "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 (HEAD -> main)",
        "git checkout 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "request id 550e8400-e29b-41d4-a716-446655440000 took 12 ms",
        "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "token=None",
        "token=abc",
        "token: expired",
        "password=<placeholder>",
        "password: ${DB_PASSWORD}",
        'password: "changeme"',
        "api_key: YOUR_API_KEY",
        '"api_key": "<your-api-key>"',
        "secret=xxxxxxxxxxxxxxxx",
        "password=********",
        "api_key = os.environ['OPENAI_API_KEY']",
        "password = getpass.getpass()",
        "token = self.access_token",
        "headers = {token: accessToken}",
        "password: Optional[str] = None",
        "token: str",
        "max_tokens=4096 total_tokens: 123456",
        "tokenizer = AutoTokenizer.from_pretrained('gpt2')",
        "a desk-top app with task-management, risk-assessment and sk-learn",
        "sk-this-is-only-hyphenated-prose-without-digits",
        "Bearer token authentication is configured in the gateway.",
        "Basic Authentication and digest authentication",
        "clone https://user:pass@example.com/repo.git",
        "postgres://postgres:postgres@localhost:5432/postgres",
        "bypass: Xk2mP9qLzz4w and monkey: Xk2mP9qLzz4w",
        "key: Xk2mP9qLzz4w",
        "OLDPWD=/home/dev/project PWD=/home/dev/project2",
        "secret_name: my-app-secret-v2\nkind: Secret",
        "password_file: /run/secrets/db_password",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
        "the file starts with a -----BEGIN OPENSSH PRIVATE KEY----- line",
        '_START = b"-----BEGIN OPENSSH PRIVATE KEY-----\\n"\n'
        '_END = b"-----END OPENSSH PRIVATE KEY-----"',
        "The client uses HTTP Basic authentication.",
        "- Basic formatting: **bold**, *italic*",
        "auth: httpx2.Auth | None = None",
        "def refresh(token: OAuthToken) -> RefreshTokenT:",
        "ghp_short and AKIA1234 and xoxb-1 and hf_abc are not tokens",
        "The password: required for login.",
        "--token --verbose",
        "See the password reset docs before you rotate the api key.",
        '{"cmd":"grep -rn \\"password reset docs\\" docs/"}',
        '{\\"token\\": \\"None\\", \\"api_key\\": \\"$API_KEY\\"}',
        '{"content":"{\\n  \\"password\\": \\"<your-password>\\"\\n}"}',
        "https://github.com/acme/app/commit/9fceb02d0ae598e95dc970b74767f19372d61af8",
        "https://github.com/acme/app/compare/9fceb02d0ae598e95dc970b74767f19372d61af8...main",
        "git@github.com:acme/app.git at 9fceb02d0ae598e95dc970b74767f19372d61af8",
        '{"cmd":"git show 9fceb02d0ae598e95dc970b74767f19372d61af8\\nAKIA is a prefix"}',
        "mkdir -p src/Xk2mP9qLzz4w/build && ssh -p 2222 deploy@host",
        "docker run -p 8080:80 -u 1000:1000 app",
        "mysql -u root -p app_production_Xk2mP9 < dump.sql",
        "mysql -h db -P 33061234 -uroot",
        "git push -u origin feature/login-page",
        "curl -u $API_USER:$API_PASSWORD https://api.test",
        'sshpass -p "$SSH_PASSWORD" ssh host',
        'Authorization: Digest username="Mufasa", realm="testrealm@host.com"',
        "Authorization: Token authentication is enabled for the API.",
        "AccountKey=<storage-account-key>;EndpointSuffix=core.windows.net",
        "aws configure set region eu-west-1",
        "SG.forms and SG.short.words are not keys",
        "C:\\new\\table\\password_reset.txt",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    result = redact(text)

    assert result.text == text
    assert dict(result.counts) == {}


def test_escaped_lines_among_plain_lines_map_back_to_their_own_offsets() -> None:
    rng = random.Random(11)
    password, key, token = _password(rng), _chars(rng, ALNUM, 32), _chars(rng, ALNUM, 24)
    # Lines without an escape are left out of the unescaped reading; every line keeps its text.
    text = (
        "[user] deploy it\n"
        f'  -> tool call Bash({{"cmd":"curl -d \'{{\\"password\\":\\"{password}\\"}}\'"}})\n'
        "[tool result] ok\nplain\nlines\n"
        f'  -> tool call Write({{"content":"\\u0022api_key\\u0022: \\u0022{key}\\u0022\\n'
        f'\\"token\\":\\"{token}\\""}})\n'
        "[assistant] done"
    )

    result = redact(text)

    assert result.text == (
        "[user] deploy it\n"
        '  -> tool call Bash({"cmd":"curl -d \'{\\"password\\":\\"[REDACTED:password]\\"}\'"})\n'
        "[tool result] ok\nplain\nlines\n"
        '  -> tool call Write({"content":"\\u0022api_key\\u0022: '
        "\\u0022[REDACTED:api_key]\\u0022\\n"
        '\\"token\\":\\"[REDACTED:token]\\""})\n'
        "[assistant] done"
    )
    assert dict(result.counts) == {"password": 1, "token": 1, "api_key": 1}


@pytest.mark.parametrize(
    "label",
    [label for label in FACTORIES if FACTORIES[label](random.Random(0)).text.startswith('{"')],
)
def test_redacted_tool_call_arguments_stay_json(label: str) -> None:
    planted = FACTORIES[label](random.Random(label))
    json.loads(planted.text)

    redacted = json.loads(redact(planted.text).text)

    assert planted.secret not in json.dumps(redacted)


def test_a_hundred_mixed_secrets_do_not_survive() -> None:
    rng = random.Random(100)
    labels = sorted(FACTORIES)
    prose = [
        "Ran the test suite; 3 failures in test_api.py.",
        "Let me check the configuration file next.",
        "The deploy finished in 41s (commit 9fceb02d0ae5).",
        "$ ls -la ~/.config",
        "token=None means the client falls back to the environment.",
    ]
    planted = [FACTORIES[labels[index % len(labels)]](rng) for index in range(100)]
    chunks = []
    for secret in planted:
        chunks.append(rng.choice(prose))
        chunks.append(secret.text)
    text = "\n".join(chunks)

    result = redact(text)

    assert len({secret.kind for secret in planted}) >= 12
    assert [s.secret for s in planted if s.secret in result.text] == []
    assert dict(result.counts) == dict(Counter(secret.kind for secret in planted))
    assert sum(result.counts.values()) == 100
    for line in prose:
        assert line in result.text


_FRAGMENTS = [
    "password=",
    "token: ",
    '"api_key": "',
    "Authorization: Bearer ",
    "https://u:",
    "@",
    '"',
    "'",
    " ",
    "\n",
    "=",
    ":",
    "-----BEGIN PRIVATE KEY-----\n",
    "-----END PRIVATE KEY-----",
    "[REDACTED:token]",
    "sk-",
    "eyJ",
    "ghp_",
    "İ",
    '\\"',
    "\\n",
    "\\u0022",
    '\\"password\\":\\"',
    "mysql -p",
    "sshpass -p ",
    "curl -u a:",
    "://",
    "Authorization: Token ",
    "AccountKey=",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_FRAGMENTS),
            st.text(alphabet=ALNUM + "/+_-.", min_size=1, max_size=40),
        ),
        max_size=30,
    )
)
def test_redaction_is_idempotent_on_arbitrary_mixtures(parts: list[str]) -> None:
    once = redact("".join(parts))

    twice = redact(once.text)

    assert twice.text == once.text
    assert dict(twice.counts) == {}


def test_counts_are_read_only_and_redaction_is_frozen() -> None:
    result = redact("password=" + _password(random.Random(3)))

    with pytest.raises(TypeError):
        result.counts["password"] = 5  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        result.text = "changed"  # type: ignore[misc]
    assert result == Redaction(text="password=[REDACTED:password]", counts={"password": 1})


def test_empty_text() -> None:
    assert redact("") == Redaction(text="", counts={})


def test_merge_counts_sums_per_kind_in_kinds_order_and_drops_zeros() -> None:
    merged = merge_counts({"token": 1, "jwt": 2}, {"jwt": 1, "password": 0}, {}, {"custom": 4})

    assert merged == {"jwt": 3, "token": 1, "custom": 4}
    assert list(merged) == ["jwt", "token", "custom"]
    assert merge_counts() == {}


def test_merge_counts_accepts_redaction_counts() -> None:
    rng = random.Random(4)
    first = redact("password=" + _password(rng))
    second = redact(f"password={_password(rng)} token={_chars(rng, ALNUM, 30)}")

    assert merge_counts(first.counts, second.counts) == {"password": 2, "token": 1}


_FIVE_MB = 5_000_000


def _repeat(unit: str) -> str:
    return (unit * (_FIVE_MB // len(unit) + 1))[:_FIVE_MB]


# Inputs that make a naive pattern backtrack: long runs that almost match, openings that never
# close, and prefixes repeated back to back.
_ADVERSARIAL = {
    "one letter": lambda: "a" * _FIVE_MB,
    "dashes": lambda: "-" * _FIVE_MB,
    "pem begin without end": lambda: _repeat("-----BEGIN RSA PRIVATE KEY-----\nMIIE"),
    "pem begin then base64": lambda: "-----BEGIN PRIVATE KEY-----\n" + "A" * _FIVE_MB,
    "service account without end": lambda: _repeat('"private_key": "-----BEGIN PRIVATE KEY-----'),
    "unclosed quoted values": lambda: _repeat('password="aaaaaaaaa'),
    "separators": lambda: _repeat("token: "),
    "assignment chain": lambda: _repeat("pass="),
    "flags": lambda: _repeat("--token "),
    "jwt-like dots": lambda: _repeat("eyJaaaaaaaaa."),
    "url userinfo": lambda: _repeat("://user:pass"),
    "sk prefixes": lambda: _repeat("sk-a.") + "sk-" + "a" * 1000,
    "escaped json pairs": lambda: _repeat('\\"password\\":\\"aaaaaaaaa'),
    "a short escaped line after another": lambda: _repeat('a\\"b\n'),
    "unicode escapes": lambda: _repeat("\\u0041"),
    "password flags": lambda: _repeat("mysql -pXk2mP9qLzz4w "),
    "user flags": lambda: _repeat(" -u a:Xk2mP9qLzz4w"),
    "random printable": lambda: _repeat(
        "".join(random.Random(5).choices(string.printable, k=65_536))
    ),
}


@pytest.mark.parametrize("make_text", list(_ADVERSARIAL.values()), ids=list(_ADVERSARIAL))
def test_adversarial_five_megabytes_take_linear_time(make_text: Callable[[], str]) -> None:
    """Five megabytes cost about five times the first megabyte (linear; backtracking that
    grows with the square would cost 25 times, and minutes). A ratio of CPU times in this
    one process, so a busy machine, which slows both, fails nothing."""
    text = make_text()
    fifth = cpu_seconds(redact, text[: len(text) // 5])
    whole = cpu_seconds(redact, text)
    assert whole < 10 * max(fifth, 0.01), f"{whole:.2f} s of CPU for 5 MB, {fifth:.2f} s for 1"


def cpu_seconds(work: Callable[[str], object], text: str) -> float:
    started = time.process_time()
    work(text)
    return time.process_time() - started


def test_a_broken_reply_is_redacted_before_it_is_cut() -> None:
    from skilld.evolve._judge import Invalid, Rules, judge_reply
    from skilld.evolve.contract import RAW_REPLY_LIMIT

    github = "ghp_" + _chars(random.Random(12), ALNUM, 36)
    # Not JSON; the cut an `invalid` event makes goes through the token.
    reply = "x" * (RAW_REPLY_LIMIT - 20) + " " + github + " and more"

    judged = judge_reply(reply, finish_reason="stop", refusal=None, rules=Rules("claude", 1000))

    assert isinstance(judged.verdict, Invalid)
    assert judged.verdict.raw == "x" * (RAW_REPLY_LIMIT - 20) + " "
    assert github[:12] not in judged.verdict.raw
    assert judged.redactions == {"github_token": 1}
