"""Authentication: who is calling, from a bearer token or a client certificate.

One small interface, `TokenProvider.identify(token, now_s)`, with two
implementations: a static token file (token -> principal) and signed JWTs
(HS256 with a shared secret or RS256 with a public key, through `pyjwt`;
the `sub` claim is the principal, `exp` is required). An identity carries
when it stops being valid (a JWT's `exp` plus the leeway; a static token
never), so a stream opened with it can be ended then (rpc/stream_rights.py). `Authenticator`
combines them with the mTLS subject: a presented token decides (a wrong one
is refused, never passed over for the certificate); without a token, the
client certificate's common name is the principal when the broker allows it.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import jwt


class AuthenticationError(Exception):
    """The caller could not be identified; the message says why (never the secret)."""


# What a call whose JWT expired is told, at open and when its stream is ended for it.
TOKEN_EXPIRED = "token expired; get a new one"
# ... and whose client certificate passed its notAfter (mTLS principal, no token).
CERTIFICATE_EXPIRED = "client certificate expired (notAfter passed); get a new one"


# The latest expiry kept for a JWT (9999-12-31 23:59:59 UTC): later ones mean "never".
EXP_S_MAX = 253_402_300_799


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a call is, and until when (epoch seconds; None: no expiry)."""

    principal: str
    expires_s: float | None = None
    expired: str = TOKEN_EXPIRED  # what a stream ended at expires_s is told


class TokenProvider(Protocol):
    def identify(self, token: str, now_s: float) -> Identity | None:
        """Who this token stands for; None when the provider does not know it;
        AuthenticationError when it knows it is bad (expired, forged)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class StaticTokens:
    """Tokens from a TOML file: `[tokens]` then `principal = "token"` lines.

    Only SHA-256 digests are kept in memory; a lookup hashes the presented
    token, so the time taken does not depend on how much of it matched.
    """

    by_digest: dict[bytes, str]

    @classmethod
    def from_file(cls, path: str) -> StaticTokens:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ValueError(f"auth_token_file {path}: {e}") from None
        tokens = data.get("tokens")
        if not isinstance(tokens, dict) or not tokens:
            raise ValueError(f"auth_token_file {path}: needs a [tokens] table of "
                             'principal = "token" lines')
        by_digest: dict[bytes, str] = {}
        for principal, token in tokens.items():
            if not isinstance(token, str) or len(token) < 16:
                raise ValueError(f"auth_token_file {path}: the token of {principal!r} must be a "
                                 "string of 16 characters or more")
            by_digest[_digest(token)] = principal
        return cls(by_digest)

    def identify(self, token: str, now_s: float) -> Identity | None:
        principal = self.by_digest.get(_digest(token))
        return None if principal is None else Identity(principal)

    def principal_of(self, token: str, now_s: float) -> str | None:
        identity = self.identify(token, now_s)
        return None if identity is None else identity.principal


@dataclass(frozen=True)
class JwtTokens:
    """Signed JWTs: HS256 (shared secret) and/or RS256 (public key).

    The algorithm is looked up from the token's header only to pick the key
    configured for it; a token signed with any other algorithm, or with an
    HS256 header where only an RS256 key is configured, is refused.
    """

    keys: dict[str, bytes]  # algorithm -> key
    issuer: str = ""
    audience: str = ""
    leeway_s: float = 0.0

    def principal_of(self, token: str, now_s: float) -> str | None:
        identity = self.identify(token, now_s)
        return None if identity is None else identity.principal

    def identify(self, token: str, now_s: float) -> Identity | None:
        if token.count(".") != 2:
            return None  # not a JWT: another provider's token
        try:
            algorithm = jwt.get_unverified_header(token).get("alg", "")
        except jwt.PyJWTError:
            return None
        key = self.keys.get(algorithm)
        if key is None:
            raise AuthenticationError(f"token signed with {algorithm!r}; this broker accepts "
                                      f"{', '.join(sorted(self.keys))}")
        try:
            claims = jwt.decode(
                token, key, algorithms=[algorithm], leeway=self.leeway_s,
                issuer=self.issuer or None, audience=self.audience or None,
                options={"require": ["exp", "sub"], "verify_aud": bool(self.audience)})
        except jwt.ExpiredSignatureError:
            raise AuthenticationError(TOKEN_EXPIRED) from None
        except jwt.InvalidSignatureError:
            raise AuthenticationError("token signature does not verify") from None
        except jwt.PyJWTError as e:
            raise AuthenticationError(f"token refused: {e}") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise AuthenticationError("token has an empty sub claim")
        # Valid while jwt.decode accepts it: up to exp plus the leeway. An exp past
        # year 9999 (an integer beyond a float, from an issuer that meant "never")
        # counts as then: float() of it would fail the call with a traceback.
        return Identity(subject, min(float(min(claims["exp"], EXP_S_MAX)) + self.leeway_s,
                                     EXP_S_MAX))


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a call presented: the bearer token (empty: none) and the client
    certificate's common name (empty: no verified certificate)."""

    token: str = ""
    certificate_name: str = ""
    certificate_expires_s: float | None = None  # the certificate's notAfter (epoch s)


@dataclass(frozen=True)
class Authenticator:
    """All configured ways to authenticate, in order."""

    providers: Sequence[TokenProvider] = field(default_factory=tuple)
    certificate_principal: bool = False

    def authenticate(self, credentials: Credentials, now_s: float) -> str:
        """The principal, or AuthenticationError saying what was missing or wrong."""
        return self.identify(credentials, now_s).principal

    def identify(self, credentials: Credentials, now_s: float) -> Identity:
        """The identity, or AuthenticationError saying what was missing or wrong."""
        if credentials.token:
            for provider in self.providers:
                identity = provider.identify(credentials.token, now_s)
                if identity is not None:
                    return identity
            raise AuthenticationError("the bearer token is not known to this broker")
        if self.certificate_principal and credentials.certificate_name:
            expires_s = credentials.certificate_expires_s
            if expires_s is not None and now_s >= expires_s:  # a connection older than it
                raise AuthenticationError(CERTIFICATE_EXPIRED)
            return Identity(credentials.certificate_name, expires_s, CERTIFICATE_EXPIRED)
        ways = ["a bearer token (metadata `authorization: Bearer TOKEN`)"] if self.providers else []
        if self.certificate_principal:
            ways.append("a client certificate")
        raise AuthenticationError(f"no credentials; this broker needs {' or '.join(ways)}")


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """The token of an `authorization: Bearer ...` metadata entry ('' if none)."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""
