"""`keybus acl grant|revoke|list|restrict|unrestrict|restrictions|whoami`.

Grants give a principal `produce`, `consume` or `admin` on a topic, a prefix
ending in `*` (`'orders.*'`: quote it for the shell) or `*`. A restriction
closes a subscription (or event processor group) name on a topic to the
principals it lists (broker/security/restrictions.py). Changing and listing
them needs a superuser's credentials; `whoami` shows the principal the broker
sees for yours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from broker.security.permissions import GrantError, check_pattern, check_principal
from broker.security.restrictions import check_subscription_pattern
from keybus.cli.common import (
    Connection,
    Group,
    checked_name,
    connection_options,
    fail,
    json_option,
    print_json,
    run,
    stdout_console,
    wide_option,
)
from keybus.cli.render import fit_table
from sdk.access_admin import PERMISSION_NAMES, AccessAdmin
from sdk.core.pb import keybus_pb2 as pb
from sdk.errors import UNIMPLEMENTED, KeybusError

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


def _principal(value: str) -> str:
    """A principal a grant or restriction can name (the store's key refuses NUL)."""
    if "\x00" in value:
        raise GrantError("a principal may not contain a NUL character")
    return check_principal(value)


def _principals(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
                ) -> tuple[str, ...]:
    for value in values:
        PRINCIPAL(ctx, param, value)
    return values


PRINCIPAL = _grant_rule(_principal)
PATTERN = _grant_rule(check_pattern)
SUBSCRIPTION_PATTERN = _grant_rule(check_subscription_pattern)


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
                    "grants": [entry_dict(e) for e in response.entries],
                    "restrictions": [{"topic": r.topic, "subscription": r.subscription,
                                      "principal": r.principal}
                                     for r in response.restrictions]})
        return
    rows = [(row["principal"], row["topic"], row["permission"])
            for row in map(entry_dict, response.entries)]
    console = stdout_console(wide)
    console.print(fit_table("", ("principal", "topic", "permission"), rows, console.width, wide,
                            numeric_from=3))
    state = "enforced" if response.enforced else "NOT enforced (authentication is off)"
    click.echo(f"{len(response.entries)} grant(s), {state}; superusers: "
               f"{', '.join(response.superusers) or 'none'}")
    if response.restrictions:
        click.echo(f"{len(response.restrictions)} subscription restriction(s): keybus acl "
                   "restrictions")


def _restriction_call(conn: Connection, call: Callable[[AccessAdmin], Any]) -> Any:
    """Run a restriction call; a broker that predates restrictions says so in one line."""
    async def go() -> Any:
        async with _admin(conn) as admin:
            return await call(admin)
    try:
        return run(go())
    except KeybusError as e:
        if e.code != UNIMPLEMENTED:
            raise
        fail(f"the broker at {conn.one_broker} does not know subscription restrictions "
             "(it is older than this keybus); upgrade it to restrict subscriptions")


@acl.command("restrict")
@click.argument("topic", callback=PATTERN)
@click.argument("subscription", callback=SUBSCRIPTION_PATTERN)
@click.argument("principals", nargs=-1, required=True, callback=_principals)
@connection_options
@json_option
def restrict(topic: str, subscription: str, principals: tuple[str, ...], conn: Connection,
             as_json: bool) -> None:
    """Let only PRINCIPALS (and superusers) use SUBSCRIPTION (a name, PREFIX* or *) on TOPIC.

    Covers the event processor group of that name too. Others holding the
    topic's grant are refused it from now on, and their open streams on it end.
    """
    added = _restriction_call(conn, lambda admin: admin.restrict(topic, subscription,
                                                                 principals))
    if as_json:
        print_json({"topic": topic, "subscription": subscription,
                    "principals": list(principals), "new": added})
    else:
        click.echo(f"subscription {subscription} on {topic} restricted to "
                   f"{', '.join(principals)} ({added} new); any other principal (but "
                   "superusers) is refused it")


@acl.command("unrestrict")
@click.argument("topic", callback=PATTERN)
@click.argument("subscription", callback=SUBSCRIPTION_PATTERN)
@click.argument("principals", nargs=-1, callback=_principals)
@connection_options
@json_option
def unrestrict(topic: str, subscription: str, principals: tuple[str, ...], conn: Connection,
               as_json: bool) -> None:
    """Take PRINCIPALS (all when none given) off SUBSCRIPTION on TOPIC (patterns as restricted).

    A name left with no restriction is open again to every principal with the
    topic's grant.
    """
    response = _restriction_call(conn, lambda admin: admin.unrestrict(topic, subscription,
                                                                      principals))
    reopened = [(r.topic, r.subscription) for r in response.reopened]
    if as_json:
        print_json({"topic": topic, "subscription": subscription, "removed": response.removed,
                    "reopened": bool(reopened)})
        return
    click.echo(f"removed {response.removed} restriction(s) of subscription {subscription} "
               f"on {topic}")
    if reopened:
        click.echo(f"subscription {subscription} on {topic} is open again to every principal "
                   "with the topic's grant")


@acl.command("restrictions")
@click.option("--principal", default="", callback=_grant_rule(_principal, empty_is_all=True),
              help="Only the restrictions naming this principal.")
@click.option("--topic", default="", callback=_topic_filter,
              help="Only the restrictions that cover this topic.")
@connection_options
@wide_option
@json_option
def list_restrictions(principal: str, topic: str, conn: Connection, wide: bool,
                      as_json: bool) -> None:
    """List subscription restrictions: who may use which subscription names."""
    response = _restriction_call(conn, lambda admin: admin.list(principal, topic))
    rows = [(r.topic, r.subscription, r.principal) for r in response.restrictions]
    if as_json:
        print_json({"enforced": response.enforced, "restrictions": [
            {"topic": t, "subscription": s, "principal": p} for t, s, p in rows]})
        return
    console = stdout_console(wide)
    console.print(fit_table("", ("topic", "subscription", "principal"), rows, console.width,
                            wide, numeric_from=3))
    state = "enforced" if response.enforced else "NOT enforced (authentication is off)"
    click.echo(f"{len(rows)} restriction(s), {state}; a subscription name no restriction "
               "covers is open to every principal with the topic's grant")


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
