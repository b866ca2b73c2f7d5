"""The `tokenProvider` option: a module-level function, named as "package.module:function".

Why by name: Spark options are strings, and the data source's readers and
writers are pickled to the executors, so the SDK's `token_provider` callable
cannot travel as an object (a lambda or a closure does not pickle, and a
callable given to `.option()` arrives as its repr). A name can: it is imported
on the driver when the options are checked (a bad name fails there, at once)
and again where each connection opens, as Kafka names its
`sasl.login.callback.handler.class`. Anything without such a name: tokenFile.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

ALLOWED = ("tokenProvider as a module-level function named package.module:function (imported "
           "on the driver and on each executor, called before each call), or tokenFile (a file "
           "your identity agent rotates, read at each call)")
_SPEC = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
# What str() makes of a callable given to .option(): its repr, which is no token.
_CALLABLE_REPR = re.compile(r"<(?:function|bound method|built-in function|built-in method|"
                            r"method|functools\.partial|lambda)\b.*>", re.DOTALL)


@dataclass(frozen=True, slots=True)
class NamedTokenProvider:
    """A token_provider (sdk.security.ClientSecurity) that pickles as its name: the
    function is looked up at each call (a dict lookup once imported)."""

    spec: str

    @property
    def __name__(self) -> str:  # how sdk.security names the provider in its errors
        return self.spec

    def __call__(self) -> str:
        token: str = function_of(self.spec)()
        return token


def function_of(spec: str) -> Callable[[], str]:
    """The function `spec` names.

    Raises:
        ValueError: it does not import, or is not callable, in words.
    """
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module: any failure to import is the answer
        raise ValueError(f"module {module_name!r} does not import ({type(e).__name__}: {e})"
                         ) from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ValueError(f"module {module_name!r} has no function {attribute!r}")
    return function  # type: ignore[no-any-return]


def parse_token_provider(text: str) -> NamedTokenProvider:
    """The provider of the option's value, imported once here to fail early.

    Raises:
        ValueError: naming the value and what is allowed.
    """
    if _SPEC.fullmatch(text) is None:
        raise ValueError(f"option 'tokenProvider'={text!r} is not a function's name; allowed: "
                         f"{ALLOWED}")
    try:
        function_of(text)
    except ValueError as e:
        raise ValueError(f"option 'tokenProvider'={text!r}: {e}; allowed: {ALLOWED}") from None
    return NamedTokenProvider(text)


def check_token_text(text: str) -> None:
    """Refuse a token that is the repr of a callable given to .option('token', f).

    Raises:
        ValueError: naming what is allowed instead.
    """
    if _CALLABLE_REPR.fullmatch(text.strip()) is not None:
        raise ValueError(f"option 'token'={text!r} is the text of a Python callable: Spark "
                         "options are strings, so a token_provider cannot be passed as an "
                         f"object; allowed: the token as text, {ALLOWED}")
