"""The install and the lint step say nothing a user must wonder about.

Goal: `pip install -e .` gives no setuptools deprecation warning (license as
a TOML table) nor its editable-install notice (a flat layout said explicitly),
and `generate.py --check` prints nothing when the generated code is fresh.
Method: read pyproject.toml; run the check as `make lint` does.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.support.broker_process import REPO


def test_pyproject_license_and_layout_are_current_setuptools() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"  # an SPDX expression, not a table
    assert project["tool"]["setuptools"]["package-dir"] == {"": "."}


def test_generate_check_is_silent_when_fresh() -> None:
    done = subprocess.run([sys.executable, "proto/generate.py", "--check"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
