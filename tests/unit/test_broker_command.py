"""`keybus broker` / `python -m broker`: one click command built from Settings.

Goal: every setting is a flag whose help describes it and shows its default
and environment variable (so flags and settings cannot drift); flags beat
the config file only when given; bad values are one usage line (exit 2).
Method: click's CliRunner on the command object; Settings' field metadata.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker import main as broker_main
from broker.config import ConfigError, Settings, load_settings


def help_text() -> str:
    result = CliRunner().invoke(broker_main.command, ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_setting_is_described() -> None:
    for f in dataclasses.fields(Settings):
        description = f.metadata.get("help", "")
        assert len(description) > 15 and description.endswith((".", ")")), f.name


def test_every_setting_flag_shows_its_help_default_and_env() -> None:
    text = "".join(help_text().split())  # without spaces: click wraps long words at hyphens
    for f in dataclasses.fields(Settings):
        if f.name in broker_main.FILE_ONLY:
            assert f.name in text  # named in the command's description
            continue
        flag = "--" + f.name.replace("_", "-")
        assert flag in text, flag
        after = text[text.index(flag):]
        assert "".join(f.metadata["help"].split()) in after[:600], f.name
        name = f.name.replace("_", "-")
        shown = (name if f.default else f"no-{name}") if f.type == "bool" else \
            str(f.default) if f.default != "" else '""'
        assert f"envvar:KEYBUS_{f.name.upper()};default:{shown}]" in after[:700], f.name


def test_defaults_do_not_override_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    seen: dict[str, Settings] = {}

    async def fake_serve(settings: Settings, ready_file: str | None) -> None:
        seen["settings"] = settings

    monkeypatch.setattr(broker_main, "serve", fake_serve)
    config = tmp_path / "keybus.toml"
    config.write_text("port = 7001\nfsync = false\nread_events_max = 77\n")
    result = CliRunner().invoke(broker_main.command, ["--config", str(config), "--port", "7002"],
                                env={"KEYBUS_READ_EVENTS_MAX": "88"})
    assert result.exit_code == 0, result.output
    settings = seen["settings"]
    assert (settings.port, settings.fsync, settings.read_events_max) == (7002, False, 88)


@pytest.mark.parametrize(("args", "text"), [
    (["--port", "70000"], "port=70000 is out of range; allowed 0..65535"),
    (["--port", "x"], "'x' is not a valid integer"),
    (["--prot", "1"], "No such option '--prot'"),
    (["--read-events-max", "0"], "read_events_max=0 must be > 0"),
])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], text: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert broker_main.main(args) == 2
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_port_message_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"^metrics_port=-5 is out of range; allowed 0..65535"):
        load_settings(None, env={}, overrides={"metrics_port": -5})
    with pytest.raises(ConfigError, match=r"^port=70000 is out of range; allowed 0..65535"):
        load_settings(None, env={}, overrides={"port": 70000})
