"""`keybus filters explain`: Databus range/mod key filters in words (no broker needed)."""

from __future__ import annotations

import click

from keybus.cli.common import FILTER, Group, json_option, print_json
from sdk.core.filters import KeyFilterSpec, explain


@click.group(cls=Group)
def filters() -> None:
    """Server-side key filters (Databus's range and mod filters)."""


@filters.command("explain", short_help="Say in words which keys a filter passes.")
@click.argument("expression")
@json_option
def filters_explain(expression: str, as_json: bool) -> None:
    """Say in words which keys EXPRESSION passes. Forms: range:SIZE:[ids]
    (key // SIZE in ids, e.g. range:5000000:[1,3-6]) and mod:N:[buckets]
    (key % N in buckets, e.g. mod:2:[0]); add @source1,source2 to apply it to
    those sources only."""
    ctx = click.get_current_context()
    argument = next(p for p in ctx.command.params if p.name == "expression")  # named in errors
    spec: KeyFilterSpec = FILTER.convert(expression, argument, ctx)
    text = explain(spec)
    if as_json:
        print_json({"filter": expression, "type": spec.type.name.lower(),
                    "sources": sorted(spec.sources), "explanation": text})
    else:
        click.echo(text)
