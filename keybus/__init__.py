"""Keybus: the package users import. Re-exports the SDK (`from keybus import Producer`)."""

import os

# gRPC's C core logs each failed TLS handshake at INFO on stderr, beside the one
# line the `keybus` command prints for it. It reads GRPC_VERBOSITY once, when
# grpc is imported (the import below), so the default is set here; set
# GRPC_VERBOSITY yourself to see more.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from sdk import *  # noqa: F403
from sdk import __all__
from sdk.databus import *  # noqa: F403
from sdk.databus import __all__ as _databus_all

__all__ = [*__all__, *_databus_all]
