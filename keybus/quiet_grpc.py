"""Keep gRPC's own log lines off the terminal of the `keybus` command.

gRPC's C core logs each failed TLS handshake on stderr ("I1123 ...
ssl_transport_security.cc ... Handshake failed"), beside the one line the CLI
prints for the failure (sdk/core/connect_hints.py). It reads GRPC_VERBOSITY
once, when grpc is first imported, so this runs before that import (from
keybus/__init__.py; it imports grpc by importing the SDK, which first
chooses grpcio's engine) and only when the program is the `keybus` command:

- not for a program that imports the `keybus` package as a library;
- not for `keybus broker`, whose log should show failed handshakes;
- not when the user set GRPC_VERBOSITY, or grpc is imported already;
- and the variable is removed again once grpc has read it, so brokers the
  command starts (`keybus demo`, the dev cluster) keep their own logs.
"""

from __future__ import annotations

import importlib
import os
import sys

QUIET = "ERROR"


def cli_arguments(argv: list[str], orig_argv: list[str]) -> list[str] | None:
    """The arguments after the command when the program is `keybus` (the
    console script or `python -m keybus`), else None."""
    if os.path.basename(argv[0]) == "keybus":
        return argv[1:]
    if "-m" in orig_argv:
        at = orig_argv.index("-m")
        if orig_argv[at + 1:at + 2] == ["keybus"]:
            return orig_argv[at + 2:]
    return None


def quiet_grpc_for_cli() -> None:
    """Import grpc with GRPC_VERBOSITY=ERROR when the `keybus` command (not
    `keybus broker`) runs; see the module docstring."""
    if "grpc" in sys.modules or "GRPC_VERBOSITY" in os.environ:
        return
    arguments = cli_arguments(sys.argv, getattr(sys, "orig_argv", []))
    if arguments is None or arguments[:1] == ["broker"]:
        return
    os.environ["GRPC_VERBOSITY"] = QUIET
    try:  # the SDK chooses grpcio's engine, then imports grpc (sdk/core/grpc_engine.py)
        importlib.import_module("sdk")
    finally:
        del os.environ["GRPC_VERBOSITY"]
