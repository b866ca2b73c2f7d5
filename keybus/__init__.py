"""Keybus: the package users import. Re-exports the SDK (`from keybus import Producer`)."""

from sdk import *  # noqa: F403
from sdk import __all__  # noqa: F401
