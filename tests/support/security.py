"""TLS material, tokens and JWTs for tests of a secured broker.

`SecureSetup.make(dir)` writes a CA, a broker certificate, client
certificates (alice, mallory from another CA), a static token file, an
HS256 secret and an RS256 key pair; `broker_args()` are the flags that turn
it all on; `security(...)` and `channel(...)` connect as a given principal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from broker.security import certs
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.security import ClientSecurity

SUPERUSER = "root"
# Static tokens by principal (the broker keeps only their digests).
TOKENS = {SUPERUSER: "root-token-0123456789abcdef", "alice": "alice-token-0123456789abcdef",
          "bob": "bob-token-0123456789abcdef", "carol": "carol-token-0123456789abcdef"}
JWT_SECRET = b"hs256-secret-for-tests-0123456789abcdef"


@dataclass(frozen=True)
class SecureSetup:
    directory: Path
    rsa_private_pem: bytes

    @classmethod
    def make(cls, directory: Path, mtls_clients: tuple[str, ...] = ("alice",)) -> SecureSetup:
        directory.mkdir(parents=True, exist_ok=True)
        ca = certs.make_ca()
        certs.write_pair(directory, "ca", ca)
        certs.write_pair(directory, "server", certs.issue(
            ca, "localhost", server_names=("localhost", "127.0.0.1")))
        for name in mtls_clients:
            certs.write_pair(directory, f"client-{name}", certs.issue(ca, name))
        other_ca = certs.make_ca("Somebody else's CA")
        certs.write_pair(directory, "client-mallory", certs.issue(other_ca, "mallory"))
        lines = "".join(f'{p} = "{t}"\n' for p, t in TOKENS.items())
        (directory / "tokens.toml").write_text("[tokens]\n" + lines)
        (directory / "jwt.secret").write_bytes(JWT_SECRET)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (directory / "jwt-public.pem").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        private = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return cls(directory, private)

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def broker_args(self, mtls: bool = False, jwt_tokens: bool = True) -> list[str]:
        args = ["--tls-cert-file", self.path("server.pem"), "--tls-key-file", self.path("server.key"),
                "--auth-token-file", self.path("tokens.toml"), "--auth-superusers", SUPERUSER]
        if jwt_tokens:
            args += ["--auth-jwt-secret-file", self.path("jwt.secret"),
                     "--auth-jwt-public-key-file", self.path("jwt-public.pem")]
        if mtls:
            args += ["--tls-client-ca-file", self.path("ca.pem"), "--auth-certificate-principal"]
        return args

    def security(self, principal: str | None = None, token: str = "",
                 client_cert: str = "") -> ClientSecurity:
        """TLS with the test CA, as `principal` (static token), a given token,
        or a client certificate (client-NAME.pem)."""
        cert = self.path(f"client-{client_cert}.pem") if client_cert else ""
        key = self.path(f"client-{client_cert}.key") if client_cert else ""
        return ClientSecurity(ca_file=self.path("ca.pem"), cert_file=cert, key_file=key,
                              token=token or (TOKENS[principal] if principal else ""))

    def channel(self, address: str, principal: str | None = None, token: str = "",
                client_cert: str = "") -> grpc.Channel:
        """A sync channel (for wire-level tests)."""
        security = self.security(principal, token, client_cert)
        credentials = security.channel_credentials("127.0.0.1")
        assert credentials is not None
        return grpc.secure_channel(address, credentials)

    def stub(self, address: str, principal: str | None = None, token: str = "",
             client_cert: str = "") -> pb_grpc.KeybusStub:
        return pb_grpc.KeybusStub(self.channel(address, principal, token, client_cert))

    def hs256(self, subject: str, expires_in_s: float = 300, key: bytes = JWT_SECRET) -> str:
        return jwt.encode({"sub": subject, "exp": int(time.time() + expires_in_s)}, key,
                          algorithm="HS256")

    def rs256(self, subject: str, expires_in_s: float = 300) -> str:
        return jwt.encode({"sub": subject, "exp": int(time.time() + expires_in_s)},
                          self.rsa_private_pem, algorithm="RS256")
