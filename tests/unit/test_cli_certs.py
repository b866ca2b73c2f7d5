"""`keybus certs` run again keeps the broker certificate it made (keybus/cli/certs.py).

Goal: docs/security.md says to run `keybus certs` again to add clients. That run
used to issue a new server.pem/.key with the default names (localhost, 127.0.0.1,
::1) over the one made with `--server-name broker.example.com`, so the broker,
once restarted, no longer matched the name its clients connect by.
Method: click's CliRunner on the command in a temp directory; the files' bytes
and the certificate's subjectAltName read back with broker/security/certs.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from broker.security import certs
from keybus.cli.certs import certs_command


def run(directory: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(certs_command, ["--dir", str(directory), "--json", *args])
    assert result.exit_code == 0, result.output
    made: dict[str, Any] = json.loads(result.output)
    return made


def test_adding_a_client_keeps_the_broker_certificate_and_its_names(tmp_path: Path) -> None:
    run(tmp_path, "--server-name", "broker.example.com", "--client", "orders-service")
    server = (tmp_path / "server.pem").read_bytes(), (tmp_path / "server.key").read_bytes()
    again = run(tmp_path, "--client", "analytics")
    assert ((tmp_path / "server.pem").read_bytes(), (tmp_path / "server.key").read_bytes()) \
        == server
    assert certs.server_names(server[0]) == ("broker.example.com",)
    assert again["server"] == {"cert": str(tmp_path / "server.pem"),
                               "key": str(tmp_path / "server.key"),
                               "names": ["broker.example.com"], "made": False}
    assert (tmp_path / "client-analytics.pem").exists() and not again["ca_made"]


def test_server_name_given_again_makes_a_new_broker_certificate(tmp_path: Path) -> None:
    run(tmp_path, "--server-name", "broker.example.com")
    first = (tmp_path / "server.pem").read_bytes()
    again = run(tmp_path, "--server-name", "b2.example.com", "--server-name", "127.0.0.1")
    assert again["server"]["made"] is True
    assert certs.server_names((tmp_path / "server.pem").read_bytes()) == (
        "b2.example.com", "127.0.0.1")
    assert (tmp_path / "server.pem").read_bytes() != first


def test_a_broker_certificate_of_another_ca_is_made_anew(tmp_path: Path) -> None:
    run(tmp_path)
    (tmp_path / "ca.pem").unlink()  # a new CA: the old broker certificate no longer chains
    again = run(tmp_path)
    assert again["ca_made"] and again["server"]["made"] is True
    ca = certs.load_ca(tmp_path)
    assert ca is not None and certs.reusable_server(tmp_path, ca) is not None


def test_a_first_run_without_server_name_uses_the_local_names(tmp_path: Path) -> None:
    made = run(tmp_path)
    assert made["server"]["names"] == ["localhost", "127.0.0.1", "::1"]
    assert certs.server_names((tmp_path / "server.pem").read_bytes()) == (
        "localhost", "127.0.0.1", "::1")


def test_a_key_written_again_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    # A client issued again got its new private key in the old file with the old file's
    # mode: os.open's 0o600 applies only when it creates the file.
    run(tmp_path, "--client", "alice")
    key = tmp_path / "client-alice.key"
    key.chmod(0o644)
    before = key.read_bytes()
    run(tmp_path, "--client", "alice")
    assert key.read_bytes() != before and key.stat().st_mode & 0o777 == 0o600
