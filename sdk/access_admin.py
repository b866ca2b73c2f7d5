"""Access control on one broker: grant, revoke and list permissions; who am I.

Changing or listing grants needs a superuser; `whoami` works for anyone the
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

    async def list(self, principal: str = "", topic: str = "") -> pb.ListPermissionsResponse:
        """Grants of a principal (all when empty) that cover a topic (all when empty)."""
        request = pb.ListPermissionsRequest(principal=principal, topic=topic)
        response: pb.ListPermissionsResponse = await self._call("ListPermissions", request)
        return response

    async def whoami(self) -> pb.WhoAmIResponse:
        """The principal the broker sees for these credentials."""
        response: pb.WhoAmIResponse = await self._call("WhoAmI", pb.WhoAmIRequest())
        return response
