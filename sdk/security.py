"""How an SDK client proves who it is and checks whom it talks to.

`ClientSecurity` holds a CA bundle (TLS: the broker's certificate must chain
to it), an optional client certificate and key (mTLS) and an optional bearer
token (a static token or a JWT; from a string, a file read at each call, or a
`token_provider` callable called at each call, as Kafka's OAUTHBEARER
callback handler: a rotated token is picked up by the next call, and a stream
the broker ended because its token expired is opened again with the new one,
sdk/reconnect.py rule 6). Every SDK client takes one as
`security=`; without one the client uses the ambient default (`use()`, set
by the CLI from its options), else plain text.

A token is sent only where it cannot be read on the way: over TLS, or in
plain text to a loopback address (gRPC's local credentials check that);
anything else is refused before connecting.
"""

from __future__ import annotations

import contextvars
import ipaddress
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from sdk.core.certificates import pair_problem, usable_pair


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """TLS and credentials for connecting to a broker. Picklable (Spark).

    Args:
        ca_file: PEM bundle of the CA(s) to verify the broker with; set = TLS.
        cert_file, key_file: the client certificate and its key (mTLS), PEM.
        token: a bearer token (static or JWT).
        token_file: a file holding the token (read at each call).
        token_provider: called with no argument at each call, returns the
            current token ('' for none): renew it in there (from an identity
            agent, a cloud metadata endpoint...). Keep it quick and
            non-blocking (it runs on gRPC's thread, before each call); an
            exception it raises fails that call naming it. A lambda or a
            closure is not picklable: give Spark the option tokenProvider
            (package.module:function) or tokenFile instead.
        server_name: the name to check in the broker's certificate when it
            differs from the host of the address (e.g. connecting by IP).
        tls: TLS with the system's CA roots when ca_file is not given.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    token: str = field(default="", repr=False)  # a secret: never in a log line or a traceback
    token_file: str = ""
    server_name: str = ""
    tls: bool = False
    token_provider: Callable[[], str] | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate needs its key: give cert_file and key_file "
                             "together")
        given = [name for name in ("token", "token_file", "token_provider")
                 if getattr(self, name)]
        if len(given) > 1:
            raise ValueError(f"give one of token, token_file, token_provider, not "
                             f"{' and '.join(given)}")
        if self.token_provider is not None and not callable(self.token_provider):
            raise ValueError(f"token_provider must be a callable returning the token, not "
                             f"{type(self.token_provider).__name__}")

    @property
    def uses_tls(self) -> bool:
        return bool(self.tls or self.ca_file or self.cert_file)

    def bearer_token(self) -> str:
        """The token to send ('' for none), reading token_file or calling
        token_provider now if set."""
        if self.token_provider is not None:
            return _provided_token(self.token_provider)
        if self.token_file:
            try:
                with open(self.token_file) as f:
                    return _checked_token(f.read().strip(), f"token file {self.token_file}")
            except OSError as e:
                raise ValueError(f"token file {self.token_file}: {e.strerror}") from None
        return _checked_token(self.token, "token")

    def channel_credentials(self, host: str) -> grpc.ChannelCredentials | None:
        """The channel's credentials (None: plain text without a token).

        Raises:
            ValueError: a file cannot be read, the client certificate cannot be
                used now (expired, not valid yet, not the key's), or a token would
                travel in plain text to a host that is not a loopback address.
        """
        token = self.bearer_token()
        self.check_host(host, token)
        if self.uses_tls:
            key, cert = self._client_pair()
            transport = grpc.ssl_channel_credentials(
                read_ca_file(self.ca_file) if self.ca_file else None, key, cert)
        elif token:
            transport = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        else:
            return None
        if not token:
            return transport
        call = (grpc.metadata_call_credentials(TokenFileReader(self), "keybus-token-file")
                if self.token_file or self.token_provider is not None
                else grpc.access_token_call_credentials(token))
        return grpc.composite_channel_credentials(transport, call)

    def check_host(self, host: str, token: str | None = None) -> None:
        """Whether these credentials may go to `host`: a token never travels in plain
        text beyond a loopback address. Needs no connection, so a CLI says it as bad
        usage before any (`token`: the bearer token, if read already).

        Raises:
            ValueError: a token, no TLS, and a host that is not a loopback address.
        """
        if self.uses_tls or is_loopback(host):
            return
        if token if token is not None else self.bearer_token():
            raise ValueError(f"refusing to send a token in plain text to {host}: give a CA "
                             "file (TLS), or connect to a loopback address")

    def _client_pair(self) -> tuple[bytes | None, bytes | None]:
        """The client key and certificate (None, None without one), checked."""
        if not self.cert_file:
            return None, None
        return read_client_pair(self.cert_file, self.key_file)

    def holds_usable_certificate(self, now_s: float) -> bool:
        """Whether cert_file and key_file, read now, hold a certificate valid at now_s
        and its key: a rotated certificate a new channel can use (sdk/channel.py,
        `renews_channel`). False without a client certificate or for files that do
        not read or parse."""
        if not self.cert_file:
            return False
        try:
            return usable_pair(_read(self.cert_file, "cert_file"),
                               _read(self.key_file, "key_file"), now_s)
        except ValueError:
            return False

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ClientSecurity | None:
        """From KEYBUS_TLS_CA, KEYBUS_TLS_CERT, KEYBUS_TLS_KEY, KEYBUS_TOKEN,
        KEYBUS_TOKEN_FILE and KEYBUS_TLS_SERVER_NAME; None when none is set."""
        env = os.environ if environ is None else environ
        security = cls(ca_file=env.get("KEYBUS_TLS_CA", ""),
                       cert_file=env.get("KEYBUS_TLS_CERT", ""),
                       key_file=env.get("KEYBUS_TLS_KEY", ""), token=env.get("KEYBUS_TOKEN", ""),
                       token_file=env.get("KEYBUS_TOKEN_FILE", ""),
                       server_name=env.get("KEYBUS_TLS_SERVER_NAME", ""))
        return None if security == cls() else security


class TokenFileReader(grpc.AuthMetadataPlugin):  # type: ignore[misc]
    """The token of `security.token_file` (or its `token_provider`), read at every
    call (a few microseconds; calls are streams and admin calls, not events): a
    rotated token reaches the broker with the next call, never a stale one held
    since the channel opened."""

    def __init__(self, security: ClientSecurity) -> None:
        self.security = security

    def __call__(self, context: grpc.AuthMetadataContext,
                 callback: grpc.AuthMetadataPluginCallback) -> None:
        try:
            token = self.security.bearer_token()
        except ValueError as e:  # fails the call naming the file or provider (UNAVAILABLE)
            callback((), e)
            return
        callback((("authorization", f"Bearer {token}"),) if token else (), None)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what} {path}: {e.strerror}") from None


PEM_CERTIFICATE_BEGIN = b"-----BEGIN CERTIFICATE-----"


def read_ca_file(path: str, name: str = "ca_file") -> bytes:
    """The CA bundle at `path`, checked to be PEM certificate(s) before gRPC sees it:
    gRPC takes any bytes, logs C-core errors and then fails the connection as if the
    broker had closed it, which reads like a TLS mismatch.

    Raises:
        ValueError: naming `name` and the file, when it cannot be read or holds no
            PEM certificate that parses.
    """
    data = _read(path, name)
    if PEM_CERTIFICATE_BEGIN not in data:
        raise ValueError(f"{name} {path} is not a PEM certificate: it has no "
                         f"'{PEM_CERTIFICATE_BEGIN.decode()}' line; give the CA's certificate "
                         "(or a bundle of them) in PEM")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=data.decode("ascii", errors="replace"))
    except ssl.SSLError:
        raise ValueError(f"{name} {path} is not a PEM certificate: a certificate block in it "
                         "does not parse; give the CA's certificate (or a bundle of them) "
                         "in PEM") from None
    return data


def read_client_pair(cert_file: str, key_file: str,
                     names: tuple[str, str] = ("cert_file", "key_file")) -> tuple[bytes, bytes]:
    """The key and the certificate at these paths, checked to be usable now.

    Why: gRPC takes any pair and fails the handshake later in words that blame
    the broker: a key of another certificate logs C-core errors and reads as a
    broker that closed the connection, an expired certificate as a broker that
    wants TLS (sdk/core/certificates.py says which).

    Raises:
        ValueError: naming both files (as `names`) and what is wrong with them.
    """
    cert, key = _read(cert_file, names[0]), _read(key_file, names[1])
    problem = pair_problem(cert, key, time.time(), names)
    if problem is not None:
        raise ValueError(f"client certificate {names[0]} {cert_file} with {names[1]} "
                         f"{key_file}: {problem}")
    return key, cert


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_ambient: contextvars.ContextVar[ClientSecurity | None] = contextvars.ContextVar(
    "keybus_client_security", default=None)


def use(security: ClientSecurity | None) -> None:
    """Make `security` the default of clients created later in this context
    (the CLI sets it once from its options)."""
    _ambient.set(security)


def resolve(security: ClientSecurity | None) -> ClientSecurity | None:
    """The security a client uses: its own, else the ambient default."""
    return security if security is not None else _ambient.get()


def _provided_token(provider: Callable[[], str]) -> str:
    """What `provider` returns now, checked; its failure as a ValueError naming it."""
    name = getattr(provider, "__name__", type(provider).__name__)
    try:
        token = provider()
    except Exception as e:  # the application's code: any failure is its answer
        raise ValueError(f"token_provider {name} raised {type(e).__name__}: {e}") from None
    if not isinstance(token, str):
        raise ValueError(f"token_provider {name} returned {type(token).__name__}, not the "
                         "token as a str")
    return _checked_token(token, f"the token from token_provider {name}")


def _checked_token(token: str, where: str) -> str:
    """`token` if it can travel in a header: printable ASCII (gRPC refuses anything
    else with a bare "Illegal metadata", and logs its own lines on stderr)."""
    bad = next((c for c in token if not " " <= c <= "~"), None)
    if bad is not None:
        raise ValueError(f"{where} holds {bad!r} (at {token.index(bad)}); a bearer token is "
                         "printable ASCII, as JWTs are")
    return token
