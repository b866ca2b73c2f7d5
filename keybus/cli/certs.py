"""`keybus certs`: a private CA and certificates for local TLS and mTLS.

One command makes the secure set-up as short as the open one:

    keybus certs --dir ./keybus-certs --client alice
    keybus broker --tls-cert-file keybus-certs/server.pem --tls-key-file keybus-certs/server.key

An existing CA in the directory is reused, so clients added later chain to
the same CA. For local use and tests only: production certificates come
from the organisation's CA (docs/security.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from broker.security import certs
from keybus.cli.common import json_option, print_json


@click.command("certs")
@click.option("--dir", "directory", default="./keybus-certs", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Where to write the files.")
@click.option("--server-name", "server_names", multiple=True,
              default=("localhost", "127.0.0.1", "::1"), show_default=True,
              help="A DNS name or IP address of the broker (repeat for several).")
@click.option("--client", "clients", multiple=True,
              help="Make a client certificate with this principal as its common name (repeat).")
@click.option("--days", default=certs.VALID_DAYS_DEFAULT, show_default=True,
              type=click.IntRange(1, 3650), help="Validity of new certificates.")
@json_option
def certs_command(directory: Path, server_names: tuple[str, ...], clients: tuple[str, ...],
                  days: int, as_json: bool) -> None:
    """Make a CA (ca.pem), a broker certificate (server.pem/.key) and client certificates."""
    ca = certs.load_ca(directory)
    made_ca = ca is None
    if ca is None:
        ca = certs.make_ca(valid_days=days)
        certs.write_pair(directory, "ca", ca)
    server = certs.issue(ca, server_names[0], server_names=server_names, valid_days=days)
    server_files = certs.write_pair(directory, "server", server)
    client_files = {principal: certs.write_pair(directory, f"client-{principal}",
                                                certs.issue(ca, principal, valid_days=days))
                    for principal in clients}
    ca_path = directory / "ca.pem"
    if as_json:
        print_json({"ca": str(ca_path), "ca_made": made_ca,
                    "server": {"cert": str(server_files[0]), "key": str(server_files[1]),
                               "names": list(server_names)},
                    "clients": {p: {"cert": str(c), "key": str(k)}
                                for p, (c, k) in client_files.items()}})
        return
    click.echo(f"made CA {ca_path} (keep ca.key private)" if made_ca else f"reusing CA {ca_path}")
    click.echo(f"broker: --tls-cert-file {server_files[0]} --tls-key-file {server_files[1]} "
               f"(names: {', '.join(server_names)})")
    for principal, (cert_path, key_path) in client_files.items():
        click.echo(f"client {principal}: --tls-cert {cert_path} --tls-key {key_path}")
    click.echo(f"clients verify the broker with --tls-ca {ca_path}; for mTLS start "
               f"the broker with --tls-client-ca-file {ca_path}")
