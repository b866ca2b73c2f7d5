"""Keybus: the package users import. Re-exports the SDK (`from keybus import Producer`)."""

# ruff: noqa: E402 (grpc must be imported after quiet_grpc_for_cli runs)
from keybus.quiet_grpc import quiet_grpc_for_cli

quiet_grpc_for_cli()  # only for the `keybus` command: its errors stay one line

from sdk import *  # noqa: F403
from sdk import __all__
from sdk.databus import *  # noqa: F403
from sdk.databus import __all__ as _databus_all

__all__ = [*__all__, *_databus_all]
