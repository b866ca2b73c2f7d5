"""Command line of the broker process: `keybus broker` and `python -m broker`.

One click command built from the Settings dataclass: every field is a flag
(`--data-dir`, `--port`, `--fsync/--no-fsync`, ...) whose help is the field's
description and shows its default and environment variable, so the flags
cannot drift from the settings. Precedence, lowest to highest: defaults, the
`--config` TOML file, `KEYBUS_<NAME>` environment variables, flags.

The `keybus` CLI registers this same command as `keybus broker` (the CLI sits
on top and may import the broker; the broker never imports the CLI).
Failures are one line: exit 1 when the broker cannot start (port taken, data
directory in use), 2 for a bad flag or setting, 74 (sysexits' EX_IOERR) when
its storage failed (a full disk: broker/log/store_failure.py), at start or
while serving.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click
import uvloop
from click.core import ParameterSource

from broker.config import ConfigError, Settings, load_settings
from broker.errors import BrokerError
from broker.log.store_failure import EXIT_STORE_FAILED
from broker.server import StartError, StoreFailedStop, StoreUnusable, serve

# Tables, not flags: set in the --config file (named in the command's description).
FILE_ONLY = tuple(f.name for f in dataclasses.fields(Settings) if str(f.type).startswith("dict"))
TYPES: dict[str, Any] = {"int": click.INT, "str": click.STRING}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line (`--json`), for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": self.formatTime(record), "level": record.levelname,
                "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def _setting_option(f: dataclasses.Field[Any]) -> Callable[[Any], Any]:
    """The click option of one Settings field."""
    flag = "--" + f.name.replace("_", "-")
    description = f.metadata.get("help", "")
    env = f"KEYBUS_{f.name.upper()}"
    if f.type == "bool":
        return click.option(f"{flag}/--no-{flag[2:]}", f.name, default=f.default,
                            show_default=True, envvar=env, show_envvar=True, help=description)
    return click.option(flag, f.name, type=TYPES[str(f.type)], default=f.default,
                        show_default=True, envvar=env, show_envvar=True, help=description)


def _given(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
    """The settings set by a flag or env var (a default must not override the file)."""
    return {name: value for name, value in values.items()
            if ctx.get_parameter_source(name) != ParameterSource.DEFAULT}


def _configure_logging(level: str, as_json: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if as_json else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])


@click.pass_context
def _run(ctx: click.Context, /, config: str | None, ready_file: str | None, log_level: str,
         as_json: bool, **values: Any) -> None:
    """Run a Keybus broker until Ctrl-C (SIGINT) or SIGTERM.

    Every setting below can also be set in the --config TOML file (keys are
    the setting names: data_dir = "/var/lib/keybus") or as KEYBUS_<NAME>.
    Server-side filters per source (serversidefilter.*) and per-topic
    replication ([replication.TOPIC] tables, docs/cluster.md) are set in the file.
    """
    try:
        settings = load_settings(config, overrides=_given(ctx, values))
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    _configure_logging(log_level, as_json)
    try:
        uvloop.run(serve(settings, ready_file))
    except (StartError, OSError) as e:
        click.echo(f"keybus broker: error: {e}", err=True)
        ctx.exit(EXIT_STORE_FAILED if isinstance(e, StoreUnusable) else 1)
    except StoreFailedStop as e:
        click.echo(f"keybus broker: stopped: its storage in {settings.data_dir} failed ({e}); "
                   "everything it acknowledged is kept: fix the cause (free space on the "
                   "disk when it is full) and start it again", err=True)
        ctx.exit(EXIT_STORE_FAILED)
    except BrokerError as e:  # the store failed or read damaged data while the broker started
        if e.kind.name not in ("store_failed", "store_unreadable"):
            raise
        click.echo(f"keybus broker: error: cannot start: {e}", err=True)
        ctx.exit(EXIT_STORE_FAILED)
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        ctx.exit(130)


def build_command() -> click.Command:
    """The `broker` command: its own options, then one per Settings field."""
    callback: Any = _run
    for f in reversed([f for f in dataclasses.fields(Settings) if f.name not in FILE_ONLY]):
        callback = _setting_option(f)(callback)
    callback = click.option("--json", "as_json", is_flag=True,
                            help="Log one JSON object per line.")(callback)
    callback = click.option("--log-level", default="INFO", show_default=True,
                            type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                              case_sensitive=False),
                            help="Least severe log level printed.")(callback)
    callback = click.option("--ready-file", type=click.Path(dir_okay=False),
                            help="Write the bound port to this file once serving (for "
                                 "scripts and tests).")(callback)
    callback = click.option("--config", type=click.Path(dir_okay=False),
                            help="TOML file of settings (keys are the setting names, "
                                 "e.g. port = 6651).")(callback)
    return click.command("broker", short_help="Run a broker (--help lists every setting).",
                         context_settings={"help_option_names": ["-h", "--help"],
                                                     "max_content_width": 100})(callback)


command = build_command()


def main(argv: list[str] | None = None) -> int:
    """`python -m broker`: the same command, with one-line usage errors (exit 2)."""
    try:
        code = command.main(argv, prog_name="python -m broker", standalone_mode=False)
    except click.UsageError as e:
        hint = " (see --help)" if e.ctx is not None else ""
        click.echo(f"keybus broker: error: {e.format_message()}{hint}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.Abort:
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
