"""Self-signed certificates for local and test use (`keybus certs`).

Makes a private CA, a server certificate for the broker (names and
addresses in its subjectAltName) and client certificates whose subject
common name is the principal mTLS reports. Uses the `cryptography` package;
keys are EC P-256 (fast to make, small). Production certificates come from
the organisation's own CA: nothing here is meant for that.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS_DEFAULT = 365


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Keybus dev"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _builder(subject: str, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             valid_days: float) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days)))


def make_ca(common_name: str = "Keybus dev CA", valid_days: int = VALID_DAYS_DEFAULT) -> Issued:
    """A self-signed CA certificate that may sign leaf certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(common_name, _name(common_name), key.public_key(), valid_days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(ca: Issued, common_name: str, *, server_names: tuple[str, ...] = (),
          valid_days: float = VALID_DAYS_DEFAULT) -> Issued:
    """A leaf certificate signed by `ca` (valid_days may be a fraction: tests of expiry).

    Args:
        common_name: the subject CN (for a client: the principal).
        server_names: DNS names and IP addresses the broker answers on; when
            given the certificate is a server certificate, else a client one.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(common_name, ca_cert.subject, key.public_key(), valid_days).add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True)
    if server_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [_general_name(n) for n in server_names]), critical=False).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def write_pair(directory: Path, stem: str, issued: Issued) -> tuple[Path, Path]:
    """Write STEM.pem and STEM.key (the key readable by its owner only)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(issued.cert_pem)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT's mode applies to a new file only: a key rewritten in place
    with os.fdopen(fd, "wb") as f:
        f.write(issued.key_pem)
    return cert_path, key_path


def load_ca(directory: Path) -> Issued | None:
    """The CA written earlier in `directory` (ca.pem, ca.key), if there is one."""
    return load_pair(directory, "ca")


def load_pair(directory: Path, stem: str) -> Issued | None:
    """STEM.pem and STEM.key written earlier in `directory`, if both are there."""
    cert, key = directory / f"{stem}.pem", directory / f"{stem}.key"
    if cert.exists() and key.exists():
        return Issued(cert.read_bytes(), key.read_bytes())
    return None


def reusable_server(directory: Path, ca: Issued) -> Issued | None:
    """The broker certificate in `directory` when it is still good to keep: `ca` signed
    it and it has not expired. Running `keybus certs` again to add a client must not
    swap the broker's certificate (and its names) for a new one behind its back."""
    pair = load_pair(directory, "server")
    if pair is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
    except (ValueError, TypeError, InvalidSignature):
        return None
    if cert.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
        return None
    return pair


def server_names(cert_pem: bytes) -> tuple[str, ...]:
    """The DNS names and IP addresses in a certificate's subjectAltName, as text."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(n.value) for n in names if isinstance(n, x509.DNSName | x509.IPAddress))
