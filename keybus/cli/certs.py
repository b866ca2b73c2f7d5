"""`keybus certs`: a private CA and certificates for local TLS and mTLS.

One command makes the secure set-up as short as the open one:

    keybus certs --dir ./keybus-certs --client alice
    keybus broker --tls-cert-file keybus-certs/server.pem --tls-key-file keybus-certs/server.key

An existing CA in the directory is reused, so clients added later chain to
the same CA; so is the broker certificate it signed (until it expires), unless
--server-name asks for a new one: adding a client must not change the names
the broker answers to. For local use and tests only: production certificates come
from the organisation's CA (docs/security.md).
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from broker.security import certs
from keybus.cli.common import fail, json_option, print_json

DEFAULT_SERVER_NAMES = ("localhost", "127.0.0.1", "::1")
COMMON_NAME_CHARS_MAX = 64  # X.509's upper bound on a subject common name (RFC 5280)


def _check_names(ctx: click.Context, param: click.Parameter,
                 names: tuple[str, ...]) -> tuple[str, ...]:
    """Names a certificate can hold, said as bad usage before any file is written (the
    first --server-name and every --client become a common name, and a client's is part
    of its file names): cryptography's own words named no option, and came after the CA
    was written."""
    option = "--client" if param.name == "clients" else "--server-name"
    for i, name in enumerate(names):
        if not name.strip():
            raise click.BadParameter(f"{name!r} is empty; give a name", ctx, param)
        if (option == "--client" or i == 0) and len(name) > COMMON_NAME_CHARS_MAX:
            raise click.BadParameter(
                f"{name[:20]!r}... has {len(name)} characters; a certificate's common name "
                f"has at most {COMMON_NAME_CHARS_MAX}", ctx, param)
        if option == "--client" and any(c in name for c in "/\\\0"):
            raise click.BadParameter(f"{name!r} holds '/', '\\' or NUL; the principal names "
                                     "its files (client-NAME.pem)", ctx, param)
    return names


@click.command("certs")
@click.option("--dir", "directory", default="./keybus-certs", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Where to write the files.")
@click.option("--server-name", "server_names", multiple=True,
              default=DEFAULT_SERVER_NAMES, show_default=True, callback=_check_names,
              help="A DNS name or IP address of the broker (repeat for several); given, the "
                   "broker certificate is made anew, else one in --dir is kept.")
@click.option("--client", "clients", multiple=True, callback=_check_names,
              help="Make a client certificate with this principal as its common name (repeat).")
@click.option("--days", default=certs.VALID_DAYS_DEFAULT, show_default=True,
              type=click.IntRange(1, 3650), help="Validity of new certificates.")
@json_option
@click.pass_context
def certs_command(ctx: click.Context, directory: Path, server_names: tuple[str, ...],
                  clients: tuple[str, ...], days: int, as_json: bool) -> None:
    """Make a CA (ca.pem), a broker certificate (server.pem/.key) and client certificates.

    Run again to add clients: the CA and the broker certificate in --dir are reused
    (a new broker certificate only with --server-name, or once the old one expired)."""
    names_given = ctx.get_parameter_source("server_names") is not ParameterSource.DEFAULT
    try:
        _make(directory, server_names if names_given else None, clients, days, as_json)
    except OSError as e:
        fail(f"cannot write certificates to {directory}: {e.strerror or e}"
             + (f" ({e.filename})" if e.filename and str(e.filename) != str(directory) else ""))


def _make(directory: Path, names_given: tuple[str, ...] | None, clients: tuple[str, ...],
          days: int, as_json: bool) -> None:
    """names_given: the --server-name values, None when the option was left out."""
    ca = certs.load_ca(directory)
    made_ca = ca is None
    if ca is None:
        ca = certs.make_ca(valid_days=days)
        certs.write_pair(directory, "ca", ca)
    kept = None if names_given is not None else certs.reusable_server(directory, ca)
    if kept is not None:
        server_names = certs.server_names(kept.cert_pem)
        server_files = (directory / "server.pem", directory / "server.key")
    else:
        server_names = names_given or DEFAULT_SERVER_NAMES
        server = certs.issue(ca, server_names[0], server_names=server_names, valid_days=days)
        server_files = certs.write_pair(directory, "server", server)
    client_files = {principal: certs.write_pair(directory, f"client-{principal}",
                                                certs.issue(ca, principal, valid_days=days))
                    for principal in clients}
    ca_path = directory / "ca.pem"
    if as_json:
        print_json({"ca": str(ca_path), "ca_made": made_ca,
                    "server": {"cert": str(server_files[0]), "key": str(server_files[1]),
                               "names": list(server_names), "made": kept is None},
                    "clients": {p: {"cert": str(c), "key": str(k)}
                                for p, (c, k) in client_files.items()}})
        return
    click.echo(f"made CA {ca_path} (keep ca.key private)" if made_ca else f"reusing CA {ca_path}")
    click.echo(f"broker: --tls-cert-file {server_files[0]} --tls-key-file {server_files[1]} "
               f"(names: {', '.join(server_names)}"
               + ("; kept: --server-name makes a new one)" if kept is not None else ")"))
    for principal, (cert_path, key_path) in client_files.items():
        click.echo(f"client {principal}: --tls-cert {cert_path} --tls-key {key_path}")
    click.echo(f"clients verify the broker with --tls-ca {ca_path}; for mTLS start "
               f"the broker with --tls-client-ca-file {ca_path}")
