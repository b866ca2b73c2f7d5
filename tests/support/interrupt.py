"""Child Python processes that a test interrupts with SIGINT (Ctrl-C).

A test run started in the background by a non-interactive shell (`make test &`,
a job runner) has SIGINT ignored, and every process it starts inherits that;
Python then installs no KeyboardInterrupt handler, so a child a test Ctrl-Cs
never hears it and the test waits out its timeout. These children take
Python's default back first, as a program started from a terminal has it.
"""

from __future__ import annotations

import sys

# The first line of a child program that a test interrupts.
SIGINT_DEFAULT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def python_module(module: str, *args: str) -> list[str]:
    """The command line of `python -m module args...`, with SIGINT's default back."""
    run = f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return [sys.executable, "-c", SIGINT_DEFAULT + run, *args]
