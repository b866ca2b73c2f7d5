"""`keybus acl grant|revoke|list|whoami`: per-topic permissions on the broker.

Grants give a principal `produce`, `consume` or `admin` on a topic, a prefix
ending in `*` (`'orders.*'`: quote it for the shell) or `*`. Changing and
listing grants needs a superuser's credentials; `whoami` shows the principal
the broker sees for yours.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from broker.security.permissions import GrantError, check_pattern, check_principal
from keybus.cli.common import (
    Connection,
    Group,
    checked_name,
    connection_options,
    json_option,
    print_json,
    run,
    stdout_console,
    wide_option,
)
from keybus.cli.render import fit_table
from sdk.access_admin import PERMISSION_NAMES, AccessAdmin
from sdk.core.pb import keybus_pb2 as pb

Callback = Callable[[click.Context, click.Parameter, str], str]
PERMISSION_CHOICE = click.Choice(["produce", "consume", "admin"], case_sensitive=False)


def _admin(conn: Connection) -> AccessAdmin:
    return AccessAdmin(conn.one_broker, request_timeout_ms=conn.request_timeout_ms)


def _grant_rule(check: Callable[[str], str], empty_is_all: bool = False) -> Callback:
    """A click callback applying the broker's grant rule `check`: a value it refuses
    is bad usage (exit 2) before any connection, in the broker's words. With
    empty_is_all, '' (a filter's default: every one) passes."""
    def callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
        if empty_is_all and value == "":
            return value
        try:
            return check(value)
        except GrantError as e:
            raise click.BadParameter(str(e), ctx, param) from None
    return callback


def _topic_filter(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """`acl list --topic`: a topic name (the grants covering it), '' for all."""
    return value if value == "" else checked_name(ctx, param, value) or ""


PRINCIPAL = _grant_rule(check_principal)
PATTERN = _grant_rule(check_pattern)


def entry_dict(entry: pb.AclEntry) -> dict[str, str]:
    return {"principal": entry.principal, "topic": entry.topic,
            "permission": PERMISSION_NAMES.get(entry.permission, str(entry.permission))}


@click.group(cls=Group)
def acl() -> None:
    """Grant, revoke and list per-topic permissions (superusers)."""


@acl.command("grant")
@click.argument("principal", callback=PRINCIPAL)
@click.argument("topic", callback=PATTERN)
@click.argument("permissions", nargs=-1, required=True, type=PERMISSION_CHOICE)
@connection_options
@json_option
def grant(principal: str, topic: str, permissions: tuple[str, ...], conn: Connection,
          as_json: bool) -> None:
    """Give PRINCIPAL PERMISSIONS (produce, consume, admin) on TOPIC (a name, PREFIX* or *)."""
    async def go() -> int:
        async with _admin(conn) as admin:
            return await admin.grant(principal, topic, permissions)
    added = run(go())
    if as_json:
        print_json({"principal": principal, "topic": topic, "granted": list(permissions),
                    "new": added})
    else:
        click.echo(f"granted {', '.join(permissions)} on {topic} to {principal} ({added} new)")


@acl.command("revoke")
@click.argument("principal", callback=PRINCIPAL)
@click.argument("topic", callback=PATTERN)
@click.argument("permissions", nargs=-1, required=True, type=PERMISSION_CHOICE)
@connection_options
@json_option
def revoke(principal: str, topic: str, permissions: tuple[str, ...], conn: Connection,
           as_json: bool) -> None:
    """Take PERMISSIONS on TOPIC (exactly as granted) away from PRINCIPAL."""
    async def go() -> int:
        async with _admin(conn) as admin:
            return await admin.revoke(principal, topic, permissions)
    removed = run(go())
    if as_json:
        print_json({"principal": principal, "topic": topic, "revoked": removed})
    else:
        click.echo(f"revoked {removed} grant(s) of {principal} on {topic}")


@acl.command("list")
@click.option("--principal", default="", callback=_grant_rule(check_principal, empty_is_all=True),
              help="Only this principal's grants.")
@click.option("--topic", default="", callback=_topic_filter,
              help="Only the grants that cover this topic.")
@connection_options
@wide_option
@json_option
def list_grants(principal: str, topic: str, conn: Connection, wide: bool, as_json: bool) -> None:
    """List grants, and whether this broker enforces them."""
    async def go() -> pb.ListPermissionsResponse:
        async with _admin(conn) as admin:
            return await admin.list(principal, topic)
    response = run(go())
    if as_json:
        print_json({"enforced": response.enforced, "superusers": list(response.superusers),
                    "grants": [entry_dict(e) for e in response.entries]})
        return
    rows = [(row["principal"], row["topic"], row["permission"])
            for row in map(entry_dict, response.entries)]
    console = stdout_console(wide)
    console.print(fit_table("", ("principal", "topic", "permission"), rows, console.width, wide,
                            numeric_from=3))
    state = "enforced" if response.enforced else "NOT enforced (authentication is off)"
    click.echo(f"{len(response.entries)} grant(s), {state}; superusers: "
               f"{', '.join(response.superusers) or 'none'}")


@acl.command("whoami")
@connection_options
@json_option
def whoami(conn: Connection, as_json: bool) -> None:
    """Show the principal the broker sees for these credentials."""
    async def go() -> pb.WhoAmIResponse:
        async with _admin(conn) as admin:
            return await admin.whoami()
    response = run(go())
    if as_json:
        print_json({"principal": response.principal, "superuser": response.superuser,
                    "tls": response.tls})
    else:
        who = response.principal or "(anonymous: authentication is off)"
        click.echo(f"{who}{' (superuser)' if response.superuser else ''}, "
                   f"{'TLS' if response.tls else 'plain text'}")


def register(cli: click.Group) -> None:
    cli.add_command(acl)
