"""Access control RPCs: grant, revoke and list permissions; restrict and
unrestrict subscriptions; who am I.

Who may call them is decided by the auth interceptor (superusers only,
except WhoAmI). With authentication off the grants are still kept, so they
can be set up before it is turned on (ListPermissions says `enforced`).
"""

from __future__ import annotations

import asyncio

import grpc

from broker.errors import BrokerError
from broker.rpc.auth import current_principal
from broker.rpc.status import unary
from broker.security.acl_store import AclStore
from broker.security.permissions import Grant, GrantError, Permission, check_pattern
from broker.security.restrictions import Restriction, check_subscription_pattern
from sdk.core.pb import keybus_pb2 as pb


def grants_of(entries: list[pb.AclEntry]) -> list[Grant]:
    grants = []
    for i, entry in enumerate(entries):
        if int(entry.permission) not in tuple(Permission):
            raise BrokerError("grant_invalid", detail=f"entries[{i}].permission={entry.permission} "
                              "is not set or unknown; allowed: produce, consume, admin")
        grants.append(Grant(entry.principal, entry.topic, Permission(entry.permission)))
    if not grants:
        raise BrokerError("grant_invalid", detail="entries is empty; name at least one grant")
    return grants


def entry_of(grant: Grant) -> pb.AclEntry:
    return pb.AclEntry(principal=grant.principal, topic=grant.topic,
                       permission=int(grant.permission))  # type: ignore[arg-type]


def restrictions_of(entries: list[pb.SubscriptionRestriction], unrestrict: bool = False
                    ) -> list[Restriction]:
    """Restrictions of a request; in Unrestrict an empty principal is every principal."""
    if not entries:
        raise BrokerError("grant_invalid", detail="entries is empty; name at least one "
                          "subscription restriction (topic, subscription, principal)")
    for i, entry in enumerate(entries):
        if not entry.principal and not unrestrict:
            raise BrokerError("grant_invalid", detail=f"entries[{i}].principal is empty; name "
                              "who may use the subscription")
        try:  # a pattern no restriction can have is a mistake, not "0 removed"
            check_pattern(entry.topic)
            check_subscription_pattern(entry.subscription)
        except GrantError as e:
            raise BrokerError("grant_invalid", detail=f"entries[{i}]: {e}") from None
    return [Restriction(e.topic, e.subscription, e.principal) for e in entries]


def restriction_entry(restriction: Restriction) -> pb.SubscriptionRestriction:
    return pb.SubscriptionRestriction(topic=restriction.topic,
                                      subscription=restriction.subscription,
                                      principal=restriction.principal)


class AclServicer:
    def __init__(self, acls: AclStore, enforced: bool) -> None:
        self.acls = acls
        self.enforced = enforced

    @unary
    async def GrantPermissions(self, request: pb.GrantPermissionsRequest,
                               context: grpc.aio.ServicerContext) -> pb.GrantPermissionsResponse:
        grants = grants_of(list(request.entries))
        try:
            added = await asyncio.to_thread(self.acls.grant, grants)
        except GrantError as e:
            raise BrokerError("grant_invalid", detail=str(e)) from None
        return pb.GrantPermissionsResponse(added=added)

    @unary
    async def RevokePermissions(self, request: pb.RevokePermissionsRequest,
                                context: grpc.aio.ServicerContext) -> pb.RevokePermissionsResponse:
        removed = await asyncio.to_thread(self.acls.revoke, grants_of(list(request.entries)))
        if removed:  # open streams that held a revoked right end now, not at the next sweep
            self.acls.table.revoked()
        return pb.RevokePermissionsResponse(removed=removed)

    @unary
    async def RestrictSubscription(self, request: pb.RestrictSubscriptionRequest,
                                   context: grpc.aio.ServicerContext
                                   ) -> pb.RestrictSubscriptionResponse:
        restrictions = restrictions_of(list(request.entries))
        try:
            added = await asyncio.to_thread(self.acls.restrict, restrictions)
        except GrantError as e:
            raise BrokerError("grant_invalid", detail=str(e)) from None
        if added:  # streams of principals no longer allowed end now, as on a revoke
            self.acls.table.revoked()
        return pb.RestrictSubscriptionResponse(added=added)

    @unary
    async def UnrestrictSubscription(self, request: pb.UnrestrictSubscriptionRequest,
                                     context: grpc.aio.ServicerContext
                                     ) -> pb.UnrestrictSubscriptionResponse:
        restrictions = restrictions_of(list(request.entries), unrestrict=True)
        removed, reopened = await asyncio.to_thread(self.acls.unrestrict, restrictions)
        if removed:  # a principal taken off a list that stays loses the name
            self.acls.table.revoked()
        return pb.UnrestrictSubscriptionResponse(removed=removed, reopened=[
            pb.SubscriptionRestriction(topic=t, subscription=s) for t, s in reopened])

    @unary
    async def ListPermissions(self, request: pb.ListPermissionsRequest,
                              context: grpc.aio.ServicerContext) -> pb.ListPermissionsResponse:
        table = self.acls.table
        return pb.ListPermissionsResponse(
            entries=[entry_of(g) for g in table.grants(request.principal, request.topic)],
            enforced=self.enforced, superusers=sorted(table.superusers),
            restrictions=[restriction_entry(r) for r in
                          table.restrictions.listed(request.principal, request.topic)])

    @unary
    async def WhoAmI(self, request: pb.WhoAmIRequest,
                     context: grpc.aio.ServicerContext) -> pb.WhoAmIResponse:
        principal = current_principal.get()
        tls = context.auth_context().get("transport_security_type") == [b"ssl"]
        return pb.WhoAmIResponse(principal=principal, tls=tls,
                                 superuser=self.acls.table.is_superuser(principal))
