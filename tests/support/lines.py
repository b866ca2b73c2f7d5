"""Lines of a subprocess's output, read by a thread, waited for with a deadline.

A pipe read with select() and a buffered readline() can hold lines in
Python's buffer while select() says nothing is left; a thread per stream
that puts each line on a queue cannot.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable


class Lines:
    """Every line of one stream, as it arrives."""

    def __init__(self, stream: Iterable[str]) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.ended = False
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Iterable[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, text: str, timeout_s: float) -> str:
        """The first line holding `text`, waiting up to timeout_s for it."""
        deadline = time.monotonic() + timeout_s
        checked = 0
        while True:
            for line in self.seen[checked:]:
                if text in line:
                    return line
            checked = len(self.seen)
            if self.ended:
                raise AssertionError(f"{text!r} never came: {self.text()[-3000:]}")
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{text!r} not within {timeout_s}s: "
                                     f"{self.text()[-3000:]}") from None
            if line is None:
                self.ended = True
            else:
                self.seen.append(line)

    def until_end(self, timeout_s: float) -> list[str]:
        """Every line, once the stream ended (its process exited), waiting up to timeout_s."""
        deadline = time.monotonic() + timeout_s
        while not self.ended:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the stream did not end within {timeout_s}s: "
                                     f"{self.text()[-3000:]}") from None
            if line is None:
                self.ended = True
            else:
                self.seen.append(line)
        return self.seen

    def text(self) -> str:
        return "\n".join(self.seen)
