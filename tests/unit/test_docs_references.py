"""The docs name every broker setting and RPC rule, and every path they name exists.

Goal: a user looking for a setting finds it in README.md or docs/ (fourteen
limits, from `partitions_max` to `nack_delay_ms_max`, were only in
`keybus broker --help`), and a path the docs point at (`broker/view/load.py`,
`tests/e2e/test_spark_topic_deleted.py`) is still there after code moves.
Method: read the `Settings` dataclass's fields and grep the docs for each;
collect the docs' paths under the repository's top-level directories and check
each exists (a glob for `dir/*`); read security.md's permission table and check
it names every RPC of `RULES` (it left out eight: the event processor stores'
five, which then read as superuser-only, and the relay's three); parse the SCN
position as README.md spells it for the CLI and for the SDK (it gave `scn:N`
for both, which the SDK refuses).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from broker.config import Settings
from broker.security.permissions import RULES
from keybus.cli.common import START
from sdk.reader import start_to_proto

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP_DIRS = ("broker", "sdk", "keybus", "spark_connector", "benchmarks", "tests", "proto", "docs")
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP_DIRS) + r")/[\w./*-]*[\w*])")


def test_every_setting_is_named_in_the_docs() -> None:
    text = "\n".join(p.read_text() for p in DOCS)
    missing = [f.name for f in dataclasses.fields(Settings)
               if not re.search(rf"\b{f.name}\b", text)]
    assert missing == [], f"settings no doc names: {missing}"


def test_every_path_the_docs_name_exists() -> None:
    stale = []
    for doc in DOCS:
        text = doc.read_text()
        for match in PATH.finditer(text):
            path = match[1].rstrip(".")
            found = (any(REPO.glob(path)) if "*" in path
                     else any((base / p).exists() for base in (REPO, doc.parent)
                              for p in (path, path + ".py")))
            if not found:
                stale.append(f"{doc.name}:{text[:match.start()].count(chr(10)) + 1}: {path}")
    assert stale == [], stale


def test_the_permission_table_names_every_rpc() -> None:
    text = (REPO / "docs" / "security.md").read_text()
    table = text[text.index("## The permission model"):text.index("- A grant names")]
    missing = [rpc for rpc in RULES if not re.search(rf"\b{rpc}\b", table)]
    assert missing == [], f"RPCs docs/security.md's permission table does not name: {missing}"


def test_an_scn_position_as_the_readme_spells_it_parses() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    match = re.search(r"an SCN \(`(scn:N)` in the CLI, `([^`]+)` in the SDK\)", text)
    assert match is not None, "README.md no longer spells an SCN position for CLI and SDK"
    cli, sdk = (spelling.replace("N", "7") for spelling in match.groups())
    assert START.convert(cli, None, None) == {"scn": 7}
    assert start_to_proto(ast.literal_eval(sdk)).scn == 7
