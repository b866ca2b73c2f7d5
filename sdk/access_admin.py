"""Access control on one broker: grant, revoke and list permissions; restrict
subscriptions to named principals; who am I.

Changing or listing grants and restrictions needs a superuser; `whoami` works for anyone the
broker authenticates. Built on `AdminClient` (channel, deadline, errors).
"""

from __future__ import annotations

from collections.abc import Iterable

from sdk.admin import AdminClient
from sdk.core.pb import keybus_pb2 as pb

PERMISSIONS = {"produce": pb.PERMISSION_PRODUCE, "consume": pb.PERMISSION_CONSUME,
               "admin": pb.PERMISSION_ADMIN}
PERMISSION_NAMES = {value: name for name, value in PERMISSIONS.items()}


def entries(principal: str, topic: str, permissions: Iterable[str]) -> list[pb.AclEntry]:
    """AclEntry messages for one principal and topic pattern.

    Raises:
        ValueError: an unknown permission name (allowed: produce, consume, admin).
    """
    out = []
    for name in permissions:
        value = PERMISSIONS.get(name.strip().lower())
        if value is None:
            raise ValueError(f"permission {name!r} is unknown; allowed: "
                             f"{', '.join(PERMISSIONS)}")
        out.append(pb.AclEntry(principal=principal, topic=topic, permission=value))
    if not out:
        raise ValueError("name at least one permission: produce, consume or admin")
    return out


def _restrictions(topic: str, subscription: str, principals: Iterable[str], required: bool
                  ) -> list[pb.SubscriptionRestriction]:
    names = list(principals) or ([] if required else [""])
    if not names:
        raise ValueError("name at least one principal who may use the subscription")
    return [pb.SubscriptionRestriction(topic=topic, subscription=subscription, principal=name)
            for name in names]


class AccessAdmin(AdminClient):
    """Permissions on one broker (arguments as AdminClient)."""

    async def grant(self, principal: str, topic: str, permissions: Iterable[str]) -> int:
        """Grant permissions on a topic, a prefix ending in `*`, or `*`.

        Returns:
            How many grants were new.
        Raises:
            ValueError: an unknown permission name. PermissionDenied: not a
            superuser. InvalidArgument: a bad principal or topic pattern.
        """
        request = pb.GrantPermissionsRequest(entries=entries(principal, topic, permissions))
        response: pb.GrantPermissionsResponse = await self._call("GrantPermissions", request)
        return response.added

    async def revoke(self, principal: str, topic: str, permissions: Iterable[str]) -> int:
        """Revoke grants; returns how many there were."""
        request = pb.RevokePermissionsRequest(entries=entries(principal, topic, permissions))
        response: pb.RevokePermissionsResponse = await self._call("RevokePermissions", request)
        return response.removed

    async def restrict(self, topic: str, subscription: str, principals: Iterable[str]) -> int:
        """Restrict a subscription (or event processor group) name on a topic to
        these principals (and superusers); others with the topic's grant are then
        refused it, and their open streams on it are ended.

        Args:
            topic: a topic name, a prefix ending in `*`, or `*`.
            subscription: a subscription name, a prefix ending in `*`, or `*`.
            principals: at least one.
        Returns:
            How many restrictions were new.
        Raises:
            ValueError: no principal. PermissionDenied: not a superuser.
            InvalidArgument: a bad pattern or principal. Unimplemented: a broker
            older than restrictions.
        """
        request = pb.RestrictSubscriptionRequest(entries=_restrictions(
            topic, subscription, principals, required=True))
        response: pb.RestrictSubscriptionResponse = await self._call(
            "RestrictSubscription", request)
        return response.added

    async def unrestrict(self, topic: str, subscription: str, principals: Iterable[str] = ()
                         ) -> pb.UnrestrictSubscriptionResponse:
        """Remove restrictions (exactly as made); no principal: every principal's.

        Returns:
            `removed` (how many there were) and `reopened` (the patterns left with
            none: open again to every principal with the topic's grant).
        """
        request = pb.UnrestrictSubscriptionRequest(entries=_restrictions(
            topic, subscription, principals, required=False))
        response: pb.UnrestrictSubscriptionResponse = await self._call(
            "UnrestrictSubscription", request)
        return response

    async def list(self, principal: str = "", topic: str = "") -> pb.ListPermissionsResponse:
        """Grants of a principal (all when empty) that cover a topic (all when empty),
        and the subscription restrictions so filtered (`restrictions`)."""
        request = pb.ListPermissionsRequest(principal=principal, topic=topic)
        response: pb.ListPermissionsResponse = await self._call("ListPermissions", request)
        return response

    async def whoami(self) -> pb.WhoAmIResponse:
        """The principal the broker sees for these credentials."""
        response: pb.WhoAmIResponse = await self._call("WhoAmI", pb.WhoAmIRequest())
        return response
