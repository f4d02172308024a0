from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from skilld.config import (
    ConfigError,
    backfill_cutoff,
    build_config,
    load_config,
    parse_duration,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing"))
    monkeypatch.delenv("SKILLD_CONFIG", raising=False)
    config = load_config(environ={})
    assert config.path is None
    assert config.evolve.interval_seconds == 60
    assert config.skills.max_managed == 50
    assert config.skills.dialect == "dsh"
    assert config.skills.layout == "dir"
    assert config.curator.stale_after_days == 30
    assert config.curator.archive_after_days == 90
    assert config.origins["evolve.interval_seconds"] == "default"


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "skilld").mkdir(parents=True)
    write(xdg / "skilld" / "config.toml", "[evolve]\ninterval_seconds = 7\n")
    from_env = write(tmp_path / "env.toml", "[evolve]\ninterval_seconds = 8\n")
    explicit = write(tmp_path / "explicit.toml", "[evolve]\ninterval_seconds = 9\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("SKILLD_CONFIG", raising=False)
    assert load_config(environ={}).evolve.interval_seconds == 7
    monkeypatch.setenv("SKILLD_CONFIG", str(from_env))
    assert load_config(environ={}).evolve.interval_seconds == 8
    assert load_config(explicit, environ={}).evolve.interval_seconds == 9


def test_env_overrides_scalars_and_records_origin(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", '[llm]\nbase_url = "http://file/v1"\nmax_retries = 1\n')
    env = {
        "SKILLD_LLM_BASE_URL": "http://env/v1",
        "SKILLD_EVOLVE_INTERVAL_SECONDS": "15",
        "SKILLD_CURATOR_ENABLED": "false",
    }
    config = load_config(path, environ=env)
    assert config.llm.base_url == "http://env/v1"
    assert config.llm.max_retries == 1
    assert config.evolve.interval_seconds == 15
    assert config.curator.enabled is False
    assert config.origins["llm.base_url"] == "env"
    assert config.origins["llm.max_retries"] == "file"
    assert config.origins["llm.model"] == "default"


def test_paths_expand_home_vars_and_resolve_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MY_ROOT", str(tmp_path / "root"))
    folder = tmp_path / "conf"
    folder.mkdir()
    path = write(
        folder / "c.toml",
        '[skills]\ndir = "~/skills"\nextra_dirs = ["$MY_ROOT/extra", "rel"]\n'
        '[state]\ndir = "state"\n[[sources]]\nkind = "jsonl"\npath = "sessions"\n',
    )
    config = load_config(path, environ={})
    assert config.skills.dir == tmp_path / "home" / "skills"
    assert config.skills.extra_dirs == (tmp_path / "root" / "extra", folder.resolve() / "rel")
    assert config.state.dir == folder.resolve() / "state"
    assert config.sources[0].path == folder.resolve() / "sessions"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[evolve]\ninterval_seconds = -1\n", "evolve.interval_seconds"),
        ('[skills]\ndialect = "yaml"\n', "skills.dialect"),
        ("[skills]\nmystery = 1\n", "skills.mystery"),
        ('[evolve]\nmin_messages = "four"\n', "evolve.min_messages"),
        ("[nonsense]\na = 1\n", "nonsense"),
        ('[[sources]]\nkind = "telepathy"\n', "sources[0].kind"),
        ('[evolve]\nbackfill = "soon"\n', "evolve.backfill"),
        ("[curator]\nstale_after_days = 50\narchive_after_days = 10\n", "curator.archive"),
        ("[llm]\nmax_retries = true\n", "llm.max_retries"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert key in str(caught.value)


def test_unknown_env_key_in_a_known_section_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"llm\.colour"):
        build_config({}, environ={"SKILLD_LLM_COLOUR": "blue"})


def test_cli_exits_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", '[skills]\ndialect = "yaml"\n')
    result = subprocess.run(
        [sys.executable, "-m", "skilld", "--config", str(path), "skills", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "skills.dialect" in lines[0]


def test_broken_toml_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "[skills\n")
    result = subprocess.run(
        [sys.executable, "-m", "skilld", "--config", str(path), "events"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "not valid TOML" in result.stderr


#: What a duration is, as a regular expression: `parse_duration` reads it without one.
DURATION = r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)"


@given(
    st.from_regex(DURATION, fullmatch=True)
    | st.text(alphabet=st.sampled_from("0123456789.٣ \tsmhdwxSH-+e_"), max_size=8)
)
@example("1.h")
@example(".5h")
@example("1.5.2h")
@example("1e3s")
def test_a_duration_is_what_its_pattern_says(text: str) -> None:
    cleaned = text.strip().lower()
    match = re.fullmatch(DURATION, cleaned)
    if match is None:
        with pytest.raises(ValueError):
            parse_duration(text)
        return
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    assert parse_duration(text) == float(match.group(1)) * units[match.group(2)]


def test_durations_and_backfill_cutoff() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("24h") == 86400
    assert parse_duration("7d") == 7 * 86400
    with pytest.raises(ValueError):
        parse_duration("tomorrow")
    assert backfill_cutoff("all", 1000.0) is None
    assert backfill_cutoff("none", 1000.0) == float("inf")
    assert backfill_cutoff("1h", 10_000.0) == 10_000.0 - 3600


def test_example_config_documents_every_key() -> None:
    from skilld.config import ARRAYS, SECTIONS, section_keys

    text = (Path(__file__).parent.parent / "config.example.toml").read_text(encoding="utf-8")
    for section, cls in SECTIONS.items():
        assert f"[{section}]" in text
        for key in section_keys(cls):
            assert f"{key} =" in text, f"{section}.{key} missing from example"
    for array, cls in ARRAYS.items():
        assert f"[[{array}]]" in text
        for key in section_keys(cls):
            assert f"{key} =" in text, f"{array}.{key} missing from example"


def test_example_config_loads_and_equals_the_defaults(tmp_path: Path) -> None:
    example = Path(__file__).parent.parent / "config.example.toml"
    config = load_config(example, environ={})
    defaults = build_config({}, environ={})
    assert config.evolve == defaults.evolve
    assert config.llm == defaults.llm
    assert config.curator == defaults.curator
    assert config.skills.max_managed == defaults.skills.max_managed


# -- the decoded-config cache ----------------------------------------------------------------

LOAD_PROBE = """
import json, sys
from skilld.config import load_config
config = load_config(sys.argv[1])
print(json.dumps({"parsed": "tomllib" in sys.modules, "max_managed": config.skills.max_managed,
                  "interval": config.evolve.interval_seconds, "dir": str(config.skills.dir)}))
"""


def _load_in_a_process(config: Path, cache: Path) -> dict[str, object]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    result = subprocess.run(
        [sys.executable, "-c", LOAD_PROBE, str(config)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(result.stdout)


def test_an_unchanged_config_is_loaded_without_the_toml_parser(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[skills]\ndir = "skills"\nmax_managed = 7\n[evolve]\n'
                      "interval_seconds = 30\n", encoding="utf-8")  # fmt: skip
    first = _load_in_a_process(config, tmp_path / "cache")
    second = _load_in_a_process(config, tmp_path / "cache")
    assert first["parsed"] is True and second["parsed"] is False
    assert {**first, "parsed": None} == {**second, "parsed": None}
    assert second == {"parsed": False, "max_managed": 7, "interval": 30.0,
                      "dir": str(tmp_path / "skills")}  # fmt: skip
    assert (tmp_path / "cache" / "skilld" / "config.json").stat().st_mode & 0o077 == 0


def test_an_edit_is_seen_at_once_even_at_the_same_size_and_time(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[skills]\nmax_managed = 50\n", encoding="utf-8")
    stamp = config.stat()
    assert load_config(config, environ={}).skills.max_managed == 50
    config.write_text("[skills]\nmax_managed = 60\n", encoding="utf-8")
    os.utime(config, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # nothing but the text differs
    assert load_config(config, environ={}).skills.max_managed == 60


def test_a_damaged_or_unwritable_cache_costs_only_a_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[skills]\nmax_managed = 5\n", encoding="utf-8")
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    load_config(config, environ={})
    entry = cache / "skilld" / "config.json"
    for damage in (b"", b"{not json", b'{"text": "[skills]\\nmax_managed = 5\\n", "table": 3}'):
        entry.write_bytes(damage)
        assert load_config(config, environ={}).skills.max_managed == 5
        assert json.loads(entry.read_bytes())["table"] == {"skills": {"max_managed": 5}}
    monkeypatch.setenv("XDG_CACHE_HOME", str(config))  # a file: no cache dir can be made there
    assert load_config(config, environ={}).skills.max_managed == 5


def test_a_table_json_cannot_hold_is_parsed_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = tmp_path / "config.toml"
    config.write_text("[sync]\nhost = 1979-05-27\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"sync\.host: must be a string"):
            load_config(config, environ={})
    assert not (tmp_path / "cache" / "skilld" / "config.json").exists()


def test_a_cache_others_could_write_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = tmp_path / "config.toml"
    text = "[skills]\nmax_managed = 5\n"
    config.write_text(text, encoding="utf-8")
    load_config(config, environ={})
    entry = tmp_path / "cache" / "skilld" / "config.json"
    forged = {"text": text, "table": {"skills": {"max_managed": 9}}}
    entry.write_text(json.dumps(forged), encoding="utf-8")
    entry.chmod(0o600)
    assert load_config(config, environ={}).skills.max_managed == 9  # the cache is used ...
    entry.write_text(json.dumps(forged), encoding="utf-8")
    entry.chmod(0o666)
    assert load_config(config, environ={}).skills.max_managed == 5  # ... unless others may write it
