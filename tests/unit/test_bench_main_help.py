"""`python -m benchmarks --help` names every scenario it runs (benchmarks/__main__.py).

Goal: a user who reads docs/databus.md's `python -m benchmarks databus` and asks
`python -m benchmarks --help` finds it there; the help (the module docstring)
named every other scenario but not that one.
Method: the scenarios the module dispatches on (`arguments[:1] == ["NAME"]`),
read from its source, against the docstring argparse prints as the help.
"""

from __future__ import annotations

import re
from pathlib import Path

import benchmarks.__main__ as main

SOURCE = Path(main.__file__).read_text()


def test_the_help_names_every_scenario() -> None:
    scenarios = re.findall(r'arguments\[:1\] == \["([\w-]+)"\]', SOURCE)
    assert len(scenarios) > 10, "the dispatch changed shape: update this test"
    help_text = " ".join((main.__doc__ or "").split())
    missing = [name for name in scenarios
               if not re.search(rf"python -m benchmarks {re.escape(name)}(?![\w-])", help_text)]
    assert missing == [], f"scenarios `python -m benchmarks --help` does not name: {missing}"
