"""`keybus acl grant|revoke|list|whoami`: per-topic permissions on the broker.

Grants give a principal `produce`, `consume` or `admin` on a topic, a prefix
ending in `*` (`'orders.*'`: quote it for the shell) or `*`. Changing and
listing grants needs a superuser's credentials; `whoami` shows the principal
the broker sees for yours.
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from keybus.cli.common import Group, broker_option, json_option, print_json, run
from sdk.access_admin import PERMISSION_NAMES, AccessAdmin
from sdk.core.pb import keybus_pb2 as pb

console = Console()
PERMISSION_CHOICE = click.Choice(["produce", "consume", "admin"], case_sensitive=False)


def _admin(broker: str) -> AccessAdmin:
    return AccessAdmin(broker)


def entry_dict(entry: pb.AclEntry) -> dict[str, str]:
    return {"principal": entry.principal, "topic": entry.topic,
            "permission": PERMISSION_NAMES.get(entry.permission, str(entry.permission))}


@click.group(cls=Group)
def acl() -> None:
    """Grant, revoke and list per-topic permissions (superusers)."""


@acl.command("grant")
@click.argument("principal")
@click.argument("topic")
@click.argument("permissions", nargs=-1, required=True, type=PERMISSION_CHOICE)
@broker_option
def grant(principal: str, topic: str, permissions: tuple[str, ...], broker: str) -> None:
    """Give PRINCIPAL PERMISSIONS (produce, consume, admin) on TOPIC (a name, PREFIX* or *)."""
    async def go() -> int:
        async with _admin(broker) as admin:
            return await admin.grant(principal, topic, permissions)
    added = run(go())
    click.echo(f"granted {', '.join(permissions)} on {topic} to {principal} ({added} new)")


@acl.command("revoke")
@click.argument("principal")
@click.argument("topic")
@click.argument("permissions", nargs=-1, required=True, type=PERMISSION_CHOICE)
@broker_option
def revoke(principal: str, topic: str, permissions: tuple[str, ...], broker: str) -> None:
    """Take PERMISSIONS on TOPIC (exactly as granted) away from PRINCIPAL."""
    async def go() -> int:
        async with _admin(broker) as admin:
            return await admin.revoke(principal, topic, permissions)
    removed = run(go())
    click.echo(f"revoked {removed} grant(s) of {principal} on {topic}")


@acl.command("list")
@click.option("--principal", default="", help="Only this principal's grants.")
@click.option("--topic", default="", help="Only the grants that cover this topic.")
@broker_option
@json_option
def list_grants(principal: str, topic: str, broker: str, as_json: bool) -> None:
    """List grants, and whether this broker enforces them."""
    async def go() -> pb.ListPermissionsResponse:
        async with _admin(broker) as admin:
            return await admin.list(principal, topic)
    response = run(go())
    if as_json:
        print_json({"enforced": response.enforced, "superusers": list(response.superusers),
                    "grants": [entry_dict(e) for e in response.entries]})
        return
    table = Table("principal", "topic", "permission")
    for entry in response.entries:
        row = entry_dict(entry)
        table.add_row(row["principal"], row["topic"], row["permission"])
    console.print(table)
    state = "enforced" if response.enforced else "NOT enforced (authentication is off)"
    click.echo(f"{len(response.entries)} grant(s), {state}; superusers: "
               f"{', '.join(response.superusers) or 'none'}")


@acl.command("whoami")
@broker_option
@json_option
def whoami(broker: str, as_json: bool) -> None:
    """Show the principal the broker sees for these credentials."""
    async def go() -> pb.WhoAmIResponse:
        async with _admin(broker) as admin:
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
