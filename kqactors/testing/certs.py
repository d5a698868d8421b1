"""A throw-away certificate authority for TLS test beds: a CA, server and client certificates (valid, expired,
for the wrong host), encrypted keys, PKCS#12 keystores and CRLs, written as PEM files into a directory.

Runs in: test processes (and fixtures users reuse). Needs the ``cryptography`` package (a test extra).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "Issued"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kqactors test bed"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass
class Issued:
    """An issued certificate and its key as files (``key`` unencrypted; ``encrypted_key`` with ``password``)."""

    cert: Path
    key: Path
    cert_pem: str
    key_pem: str
    serial: int

    def encrypted_key(self, password: str) -> Path:
        key = serialization.load_pem_private_key(self.key_pem.encode(), None)
        path = self.key.with_name(self.key.stem + ".enc.pem")
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.BestAvailableEncryption(password.encode())))
        return path

    def pkcs12(self, password: str, ca_cert_pem: str | None = None) -> Path:
        key = serialization.load_pem_private_key(self.key_pem.encode(), None)
        cert = x509.load_pem_x509_certificate(self.cert_pem.encode())
        extra = [x509.load_pem_x509_certificate(ca_cert_pem.encode())] if ca_cert_pem else None
        data = pkcs12.serialize_key_and_certificates(b"client", key, cert, extra,
                                                     serialization.BestAvailableEncryption(password.encode()))
        path = self.cert.with_suffix(".p12")
        path.write_bytes(data)
        return path


class CertificateAuthority:
    """A CA whose files live in ``directory``: ``ca.pem`` (certificate) and its key in memory."""

    def __init__(self, directory: Path, name: str = "kqactors test CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        self._cert = (x509.CertificateBuilder()
                      .subject_name(_name(name)).issuer_name(_name(name))
                      .public_key(self._key.public_key())
                      .serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(days=1))
                      .not_valid_after(now + datetime.timedelta(days=30))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                                     critical=False)
                      .sign(self._key, hashes.SHA256()))
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM).decode()
        self.cert_path = self.directory / f"{self._slug(name)}.pem"
        self.cert_path.write_text(self.cert_pem)
        self._revoked: list[int] = []

    @staticmethod
    def _slug(text: str) -> str:
        return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-").lower()

    def issue(self, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), client: bool = False,
              expired: bool = False) -> Issued:
        """A leaf certificate for ``hosts`` (IP addresses become IP SANs), a server's unless ``client``;
        ``expired`` makes one whose validity ended yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        if expired:
            not_before, not_after = now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)
        else:
            not_before, not_after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=10)
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        serial = x509.random_serial_number()
        builder = (x509.CertificateBuilder()
                   .subject_name(_name(hosts[0] if hosts and not client else name))
                   .issuer_name(self._cert.subject)
                   .public_key(key.public_key())
                   .serial_number(serial)
                   .not_valid_before(not_before).not_valid_after(not_after)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client
                                                         else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                                  critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        cert_path = self.directory / f"{self._slug(name)}.crt.pem"
        key_path = self.directory / f"{self._slug(name)}.key.pem"
        cert_path.write_text(cert_pem)
        key_path.write_text(key_pem)
        key_path.chmod(0o600)
        return Issued(cert_path, key_path, cert_pem, key_pem, serial)

    def revoke(self, issued: Issued) -> Path:
        """Revoke ``issued`` and (re)write the CA's CRL; returns its path."""
        self._revoked.append(issued.serial)
        now = _now()
        builder = (x509.CertificateRevocationListBuilder().issuer_name(self._cert.subject)
                   .last_update(now - datetime.timedelta(minutes=1)).next_update(now + datetime.timedelta(days=1)))
        for serial in self._revoked:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build())
        crl = builder.sign(self._key, hashes.SHA256())
        path = self.directory / f"{self._slug(self.name)}.crl.pem"
        path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
        return path
