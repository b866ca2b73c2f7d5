"""Whether a follower's upstream accepts its credentials, said once, retried on a new token.

A follower authenticates to its upstream with `relay_token_file` (or a client
certificate). When the token expires the upstream ends the follower's streams
(UNAUTHENTICATED) and refuses every new call until the file holds a valid
token again. Without more, each partition's copy would log a WARNING at every
retry and wait a doubling backoff of up to `relay_retry_backoff_max_ms` (a
minute) after the token was replaced. So, per followed topic:

* the first refusal (UNAUTHENTICATED or PERMISSION_DENIED) is one ERROR naming
  the upstream, its reason and the setting to fix; further refusals for the
  same reason are DEBUG, a new reason is said again; the first call accepted
  after a refusal is one INFO;
* a wait after a refusal ends early when the token in `relay_token_file`
  changes (the file is read every `POLL_S`, only while refused), so a replaced
  token is used within a fraction of a second.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

from sdk import errors
from sdk.security import ClientSecurity

log = logging.getLogger("keybus.relay")
POLL_S = 0.2  # how often a refused follower reads its token file for a new token
_REFUSED = (errors.UNAUTHENTICATED, errors.PERMISSION_DENIED)
_METHOD = re.compile(r"^[A-Z][A-Za-z]+: ")  # the broker's "Read: ", "EpochEnd: " prefix


def refusal(error: BaseException) -> str | None:
    """The reason the upstream refused the follower's credentials, or None when
    `error` is not a refusal (a lost connection, a missing topic...)."""
    if not isinstance(error, errors.KeybusError) or error.code not in _REFUSED:
        return None
    return _METHOD.sub("", error.message)


class UpstreamAuth:
    """One followed topic's refusals by its upstream (see the module docstring)."""

    def __init__(self, topic: str, upstream: str, security: ClientSecurity | None) -> None:
        self.topic = topic
        self.upstream = upstream
        self.security = security
        self.reason = ""  # the refusal said last ("" = accepted)
        self.denied = False  # it was PERMISSION_DENIED (a grant is missing, not a token)
        self._refused_token = ""

    def refused(self, error: BaseException) -> bool:
        """Note `error` if it is a refusal (True): an ERROR the first time for its
        reason, DEBUG after. False: not a refusal, the caller reports it."""
        reason = refusal(error)
        if reason is None:
            return False
        self._refused_token = self._token()
        if reason == self.reason:
            log.debug("topic %s: upstream %s still refuses this broker (%s)", self.topic,
                      self.upstream, reason)
            return True
        self.reason = reason
        self.denied = isinstance(error, errors.KeybusError) and \
            error.code == errors.PERMISSION_DENIED
        log.error("topic %s: upstream %s refuses this broker's credentials (%s); %s. The copy "
                  "stops until then and retries with capped backoff%s", self.topic,
                  self.upstream, reason, self.fix(), self._wakes())
        return True

    def accepted(self) -> None:
        """A call to the upstream succeeded: say so once after a refusal."""
        if self.reason:
            log.info("topic %s: upstream %s accepts this broker's credentials again; copying",
                     self.topic, self.upstream)
            self.reason = ""

    def fix(self) -> str:
        """What the operator does about the refusal, in this broker's settings."""
        if self.denied:
            return ("grant this broker's principal consume and admin on the topic upstream "
                    "(keybus acl grant)")
        token_file = self.security.token_file if self.security is not None else ""
        if token_file:
            return f"put a valid token in relay_token_file ({token_file})"
        return ("set relay_token_file (or relay_tls_cert_file / relay_tls_key_file) to "
                "credentials the upstream accepts")

    def _wakes(self) -> str:
        return (", at once when the token file changes" if self.security is not None
                and self.security.token_file else "")

    async def pause(self, delay_s: float) -> None:
        """Sleep `delay_s`; after a refusal, wake early once the token file changes."""
        if not self.reason or self.security is None or not self.security.token_file:
            await asyncio.sleep(delay_s)
            return
        deadline = time.monotonic() + delay_s
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(POLL_S, left))
            if self._token() != self._refused_token:
                return

    def _token(self) -> str:
        try:
            return self.security.bearer_token() if self.security is not None else ""
        except ValueError:
            return ""
