"""The broker's optional native modules: which ones this process uses.

Job: load a C module built by the install (setup.py), or say why not. Each
module has a pure-Python twin that its caller falls back to, so a missing
module costs speed, never behaviour.

Rules:
1. A module that was not built (no C compiler at install) is not used.
2. A module built from another version of its C source (an install that was
   not rebuilt after an update) is not used; the broker says so once in its log.
3. `KEYBUS_PURE_PYTHON=1` in the environment turns every native module off: to
   compare both, and to rule the C code out when looking for a fault.
"""

from __future__ import annotations

import importlib
import logging
import os
import types

log = logging.getLogger(__name__)


def pure_python() -> bool:
    return os.environ.get("KEYBUS_PURE_PYTHON", "") not in ("", "0")


def load(name: str, version: int) -> types.ModuleType | None:
    """The native module `name` (dotted), if built from the C source of `version`."""
    if pure_python():
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:  # built without a C compiler (rule 1)
        return None
    built = getattr(module, "VERSION", None)
    if built != version:
        log.warning("the native module %s is version %s, this code expects %d: not used "
                    "(reinstall Keybus to rebuild it)", name, built, version)
        return None
    return module
