"""A scripted stand-in for a grpc.aio server-streaming call, for RetryingCall's unit tests.

Why: RetryingCall (sdk/retrying_call.py) decides from what each `read()` of its
call gives (a message, or an AioRpcError with a status and the broker's error
name) whether to go on, wait, reopen or fail. A broker process cannot be made
to refuse, lose and answer in an exact order; this fake can, so the unit tests
drive the real RetryingCall through a script instead of a mock of it.
`open` is what RetryingCall takes as `open_call`: every open returns the same
script, which goes on where the last call stopped.
"""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio

from sdk.core.error_names import ERROR_NAME_KEY


def rpc_error(code: grpc.StatusCode, details: str, name: str = "") -> grpc.aio.AioRpcError:
    """A status as grpc.aio raises it; with the broker's error `name` in the trailing
    metadata when given, as the broker sends it (sdk/core/error_names.py)."""
    trailing = grpc.aio.Metadata((ERROR_NAME_KEY, name)) if name else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


class ScriptedCall:
    """Each read answers the next item of `answers`: an exception is raised, anything
    else returned as the message. Past the end, the last item again (a broker that
    keeps refusing).

    Attributes:
        opened: how many calls were opened (the first open and every reopen).
    """

    def __init__(self, answers: list[Any]) -> None:
        assert answers, "a script needs at least one answer"
        self.answers = list(answers)
        self.opened = 0

    def open(self) -> ScriptedCall:
        self.opened += 1
        return self

    async def read(self) -> Any:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer.with_traceback(None)  # raised again: no traceback piled up
        return answer

    def cancel(self) -> bool:
        return True
