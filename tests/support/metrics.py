"""A broker's Prometheus metrics, read over HTTP on 127.0.0.1 (its `metrics_port`)."""

from __future__ import annotations

import re
import urllib.request


def metrics_text(port: int) -> str:
    """The whole exposition text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def gauge(port: int, name: str) -> float:
    """The value of an unlabelled metric `name` (it must be there)."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", metrics_text(port), re.MULTILINE)
    assert found, f"the broker reports no {name}"
    return float(found[1])
