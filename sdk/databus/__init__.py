"""The Databus-style callback consumer (the seed's client event model and consumer API).

`DatabusClient.register` runs a consumer, or a group of them, over a topic's
consistency windows: on_start_window, on_start_source, on_event, ...,
on_end_window, with rollback and retry of a failing window and checkpoints
at whole windows only. See docs/databus.md.

Layout: results.py, callbacks.py, bootstrap_callbacks.py, event.py (the
API's values); window.py, runner.py, framing.py (pure cores); executor.py,
registration.py, log_windows.py, log_bootstrap.py, share_windows.py,
client.py (the shell). `register(..., bootstrap=True)` bootstraps a
partition whose checkpoint fell off retention (docs/databus.md).
"""

from sdk.databus.bootstrap_callbacks import (
    BOOTSTRAP_CALLBACK_NAMES,
    DatabusBootstrapConsumer,
    DatabusCombinedConsumer,
    DatabusCombinedConsumerBase,
)
from sdk.databus.callbacks import CALLBACK_NAMES, DatabusConsumer, DatabusConsumerBase
from sdk.databus.client import DatabusClient
from sdk.databus.config import DatabusConfig
from sdk.databus.errors import (
    CheckpointFailed,
    CheckpointOtherIncarnation,
    ConsumerFatal,
    DatabusError,
    WindowRetriesExhausted,
    WindowTooLarge,
)
from sdk.databus.event import DbusEvent, Scn
from sdk.databus.registration import DatabusRegistration
from sdk.databus.results import (
    CHECKPOINT,
    ERROR,
    FATAL,
    SKIP_CHECKPOINT,
    SUCCESS,
    CallbackResult,
)

__all__ = [
    "BOOTSTRAP_CALLBACK_NAMES", "CALLBACK_NAMES", "CHECKPOINT", "ERROR", "FATAL",
    "SKIP_CHECKPOINT", "SUCCESS",
    "CallbackResult", "CheckpointFailed", "CheckpointOtherIncarnation", "ConsumerFatal",
    "DatabusBootstrapConsumer",
    "DatabusClient", "DatabusCombinedConsumer", "DatabusCombinedConsumerBase", "DatabusConfig",
    "DatabusConsumer", "DatabusConsumerBase", "DatabusError", "DatabusRegistration", "DbusEvent",
    "Scn", "WindowRetriesExhausted", "WindowTooLarge",
]
