"""`ClientSecurity(token_provider=...)`: a token renewed by the application, asked at every call.

Goal: as Kafka's OAUTHBEARER callback handler, a callable returns the current
token; the SDK calls it for every call (never a token held since the channel
opened), so a renewed token reaches the broker with the next call and a
stream ended at the old token's expiry reopens with the new one. It is one of
token, token_file, token_provider (two are a ValueError naming them); its
failure or a non-str answer fails the call with an error naming it.
Method: the SDK's metadata plugin called directly, as gRPC does before a call.
"""

from __future__ import annotations

from typing import Any

import pytest

from sdk.security import ClientSecurity, TokenFileReader


def _sent(security: ClientSecurity) -> tuple[Any, Any]:
    out: list[tuple[Any, Any]] = []
    TokenFileReader(security)(None, lambda metadata, error: out.append((metadata, error)))
    return out[0]


def test_the_provider_is_asked_at_every_call() -> None:
    tokens = iter(["first-token-0123456789", "second-token-0123456789"])
    security = ClientSecurity(ca_file="ca.pem", token_provider=lambda: next(tokens))
    assert _sent(security) == ((("authorization", "Bearer first-token-0123456789"),), None)
    assert _sent(security) == ((("authorization", "Bearer second-token-0123456789"),), None)


@pytest.mark.parametrize("given, named", [
    ({"token": "t-0123456789abcdef"}, "token and token_provider"),
    ({"token_file": "token.txt"}, "token_file and token_provider"),
])
def test_a_provider_with_another_token_is_refused(given: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=f"give one of token, token_file, token_provider, not "
                                         f"{named}"):
        ClientSecurity(token_provider=lambda: "x", **given)  # type: ignore[arg-type]


def test_a_provider_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ValueError, match="token_provider must be a callable returning the "
                                         "token, not str"):
        ClientSecurity(token_provider="a-token")  # type: ignore[arg-type]


def fetch_token() -> str:
    raise ConnectionError("identity agent not reachable")


def test_a_failing_provider_fails_the_call_naming_it() -> None:
    metadata, error = _sent(ClientSecurity(ca_file="ca.pem", token_provider=fetch_token))
    assert metadata == () and isinstance(error, ValueError)
    assert str(error) == ("token_provider fetch_token raised ConnectionError: identity agent "
                          "not reachable")
    with pytest.raises(ValueError, match="returned bytes, not the token as a str"):
        ClientSecurity(token_provider=lambda: b"bytes").bearer_token()  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match=r"the token from token_provider .* holds '\\n'"):
        ClientSecurity(token_provider=lambda: "two\nlines").bearer_token()


def test_a_provider_failing_as_the_channel_opens_is_a_value_error_in_the_same_words() -> None:
    """docs/security.md: the channel's credentials ask the provider once (a token decides
    plain text to a loopback address or not), before any call could fail Unavailable."""
    with pytest.raises(ValueError, match=r"^token_provider fetch_token raised ConnectionError: "
                                         r"identity agent not reachable$"):
        ClientSecurity(token_provider=fetch_token).channel_credentials("127.0.0.1")
