"""Command line of the broker process: `keybus broker` and `python -m broker`.

Every Settings field is a flag (`--data-dir`, `--port`, `--no-fsync`, ...),
so the flag list cannot drift from the settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

import uvloop

from broker.config import ConfigError, Settings, load_settings
from broker.server import serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="keybus broker", description="Run a Keybus broker.")
    parser.add_argument("--config", help="TOML config file (keys are the flag names with _)")
    parser.add_argument("--ready-file", help="write the bound port here once serving")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    for f in dataclasses.fields(Settings):
        if str(f.type).startswith("dict"):  # tables: config file only
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=None, help=f"(default {f.default})")
        else:
            parser.add_argument(flag, dest=f.name, default=None,
                                help=f"(default {f.default}, env KEYBUS_{f.name.upper()})")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    options = vars(parser.parse_args(argv))
    config_path = options.pop("config")
    ready_file = options.pop("ready_file")
    logging.basicConfig(level=options.pop("log_level").upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings(config_path, overrides=options)
    except ConfigError as e:
        print(f"keybus broker: {e}", file=sys.stderr)
        return 2
    try:
        uvloop.run(serve(settings, ready_file))
    except OSError as e:
        print(f"keybus broker: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
