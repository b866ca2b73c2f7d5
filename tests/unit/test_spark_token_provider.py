"""A token provider reaches Spark's executors by name, and a callable given as an option
is refused when the DataFrame is defined, naming what is allowed.

Goal: `ClientSecurity(token_provider=...)` has a Spark counterpart that survives the
pickling of readers and writers to executors (option tokenProvider =
"package.module:function"), and the ways a user may try to hand Spark a callable (its
repr via .option('token', f), a name that does not import) fail at once in words,
never as a pickling traceback from a task or a token the broker does not know.
Method: the pure option parser; the options are pickled with the standard pickle,
as an executor would receive them.
"""

from __future__ import annotations

import pickle

import pytest

from spark_connector.options import OptionError, Use, parse_read_options, parse_write_options

BASE = {"broker": "localhost:6650", "topic": "orders"}
TOKEN = "token-from-a-module-level-function"
ALLOWED = "tokenProvider as a module-level function named package.module:function"


def current_token() -> str:
    """The provider the tests name (an identity agent's client would go here)."""
    return TOKEN


def test_a_named_provider_survives_pickling_and_gives_the_token() -> None:
    name = f"{__name__}:current_token"
    read = parse_read_options({**BASE, "tokenProvider": name}, Use.BATCH_READ)
    write = parse_write_options({**BASE, "tokenprovider": name})
    for options in (read, write):
        shipped = pickle.loads(pickle.dumps(options))  # as to an executor
        assert shipped.security is not None
        assert shipped.security.bearer_token() == TOKEN


@pytest.mark.parametrize("value, words", [
    (str(lambda: "x"), ["option 'token'", "is the text of a Python callable",
                        f"allowed: the token as text, {ALLOWED}", "or tokenFile"]),
    (str(current_token), ["is the text of a Python callable", ALLOWED]),
], ids=["lambda", "function"])  # the values hold addresses: xdist workers must agree on ids
def test_a_callable_given_as_token_is_refused(value: str, words: list[str]) -> None:
    """Before: its repr ('<function <lambda> at 0x...>') was sent as the token."""
    with pytest.raises(OptionError) as caught:
        parse_read_options({**BASE, "token": value}, Use.BATCH_READ)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize("value, words", [
    ("<lambda>", ["'tokenProvider'='<lambda>' is not a function's name", ALLOWED, "tokenFile"]),
    ("no_such_module_kb:f", ["module 'no_such_module_kb' does not import", ALLOWED]),
    (f"{__name__}:missing", ["has no function 'missing'", ALLOWED]),
    (f"{__name__}:TOKEN", ["has no function 'TOKEN'"]),
])
def test_a_provider_name_that_does_not_resolve_is_refused(value: str,
                                                          words: list[str]) -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options({**BASE, "tokenProvider": value}, Use.STREAM_READ)
    for word in words:
        assert word in str(caught.value)


def test_a_provider_with_a_token_file_is_refused() -> None:
    with pytest.raises(OptionError, match="give one of token, token_file, token_provider"):
        parse_read_options({**BASE, "tokenProvider": f"{__name__}:current_token",
                            "tokenFile": "/dev/null"}, Use.BATCH_READ)
