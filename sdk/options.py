"""Keyword settings a client passes on to another: an unknown one is named with the
allowed ones, as ProducerConfig and ConsumerConfig do.

The Sync wrappers (and TopicReader) take `**options` and hand them to the class
that owns them; without this check a misspelt setting surfaced as Python's
`TypeError: __init__() got an unexpected keyword argument`, from a class the
caller never named and without the settings that exist.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def keyword_settings(target: Callable[..., Any], leave_out: Iterable[str] = ()) -> list[str]:
    """The keyword parameters of `target` (a class: its __init__), in their order, but
    `self`, *args/**kwargs and the names in `leave_out` (those the caller sets itself)."""
    skip = {"self", *leave_out}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [name for name, p in inspect.signature(target).parameters.items()
            if p.kind in kinds and name not in skip]


def check_settings(what: str, options: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Raise ValueError naming the unknown settings in `options` and the allowed ones."""
    names = list(allowed)
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ValueError(f"unknown {what} setting(s) {', '.join(unknown)}; allowed: "
                         f"{', '.join(names)}")
