"""Keybus: the package users import. Re-exports the SDK (`from keybus import Producer`)."""

from sdk import *  # noqa: F403
from sdk import __all__
from sdk.databus import *  # noqa: F403
from sdk.databus import __all__ as _databus_all

__all__ = [*__all__, *_databus_all]
