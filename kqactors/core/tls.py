"""Runs in: the app (the configuration is checked when a client is created) and the main host (each broker/N
actor gets its client-side ``ssl.SSLContext`` from here). Owns the translation of librdkafka's ``ssl.*``
properties to Python's ssl module: trust (ssl.ca.location as a file, a hashed directory or ``probe``,
ssl.ca.pem, the system store when neither is given), the client certificate and key (PEM files or strings,
an encrypted key with ssl.key.password, a PKCS#12 keystore through the ``cryptography`` package), the CRL,
cipher suites and curve, and verification (enable.ssl.certificate.verification,
ssl.endpoint.identification.algorithm).

Secrets (key passwords, key PEMs) are handed to OpenSSL only: in-memory PEMs go through an anonymous memory
file (``memfd``) so no private key is written to disk, and no error text carries them.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["TlsConfigError", "build_context", "context_for", "TLS_PROPERTIES"]

TLS_PROPERTIES = ("ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
                  "ssl.key.location", "ssl.key.pem", "ssl.key.password", "ssl.keystore.location",
                  "ssl.keystore.password", "ssl.crl.location", "ssl.cipher.suites", "ssl.curves.list",
                  "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification")
"""The properties a client-side TLS context is built from (broker actors get exactly these)."""

_cache: dict[tuple, ssl.SSLContext] = {}


class TlsConfigError(ValueError):
    """A TLS property cannot be applied: ``str()`` is librdkafka's wording, "<property> failed: <reason>"."""

    def __init__(self, prop: str, reason: str) -> None:
        super().__init__(f"{prop} failed: {reason}")
        self.prop = prop


def _value(conf: Mapping[str, Any], name: str, default: Any = "") -> Any:
    value = conf.get(name, default)
    return default if value is None else value


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(exc, ssl.SSLError) and reason:
        library = getattr(exc, "library", None)
        return f"{library}: {reason}" if library else str(reason)
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


@contextmanager
def _pem_path(data: bytes):
    """A path OpenSSL can read ``data`` from: an anonymous memory file where Linux has one, else a private temp
    file removed at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("kqactors-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    directory = tempfile.mkdtemp(prefix="kqactors-tls-")
    path = os.path.join(directory, "pem")
    try:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            out.write(data)
        yield path
    finally:
        try:
            os.unlink(path)
        finally:
            os.rmdir(directory)


def _keystore_pem(location: str, password: str) -> tuple[bytes, bytes]:
    """(certificate chain PEM, unencrypted key PEM) from a PKCS#12 file."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise TlsConfigError("ssl.keystore.location", "PKCS#12 keystores need the 'cryptography' package "
                                                      "(pip install cryptography)") from None
    try:
        with open(location, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise TlsConfigError("ssl.keystore.location", _reason(exc)) from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        raise TlsConfigError("ssl.keystore.location", "cannot read the PKCS#12 keystore (wrong "
                                                      "ssl.keystore.password or not PKCS#12)") from None
    if key is None or cert is None:
        raise TlsConfigError("ssl.keystore.location", "the keystore holds no private key and certificate")
    chain = cert.public_bytes(Encoding.PEM) + b"".join(c.public_bytes(Encoding.PEM) for c in extra or ())
    return chain, key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def _load_client_identity(ctx: ssl.SSLContext, conf: Mapping[str, Any]) -> None:
    keystore = _value(conf, "ssl.keystore.location")
    cert_location, cert_pem = _value(conf, "ssl.certificate.location"), _value(conf, "ssl.certificate.pem")
    key_location, key_pem = _value(conf, "ssl.key.location"), _value(conf, "ssl.key.pem")
    password = _value(conf, "ssl.key.password") or None
    if keystore:
        chain, key = _keystore_pem(keystore, _value(conf, "ssl.keystore.password"))
        with _pem_path(chain) as chain_path, _pem_path(key) as key_path:
            try:
                ctx.load_cert_chain(chain_path, key_path)
            except (ssl.SSLError, OSError) as exc:
                raise TlsConfigError("ssl.keystore.location", _reason(exc)) from None
        return
    if not (cert_location or cert_pem or key_location or key_pem):
        return
    if not (cert_location or cert_pem):
        raise TlsConfigError("ssl.key.location" if key_location else "ssl.key.pem",
                             "a client key needs its certificate (ssl.certificate.location or .pem)")
    if not (key_location or key_pem):
        raise TlsConfigError("ssl.certificate.location" if cert_location else "ssl.certificate.pem",
                             "a client certificate needs its key (ssl.key.location or ssl.key.pem)")
    cert_prop = "ssl.certificate.location" if cert_location else "ssl.certificate.pem"
    key_prop = "ssl.key.location" if key_location else "ssl.key.pem"
    if cert_location:
        try:
            with open(cert_location, "rb"):
                pass
        except OSError as exc:
            raise TlsConfigError(cert_prop, _reason(exc)) from None
    if key_location:
        try:
            with open(key_location, "rb"):
                pass
        except OSError as exc:
            raise TlsConfigError(key_prop, _reason(exc)) from None
    with _maybe_pem(cert_location, cert_pem) as cert_path, _maybe_pem(key_location, key_pem) as key_path:
        try:
            ctx.load_cert_chain(cert_path, key_path, password=password)
        except ssl.SSLError as exc:
            raise TlsConfigError(key_prop if "KEY" in str(exc.reason or "").upper() or password is not None
                                 else cert_prop, _reason(exc)) from None
        except OSError as exc:
            raise TlsConfigError(cert_prop, _reason(exc)) from None


@contextmanager
def _maybe_pem(location: str, pem: str):
    if location:
        yield location
    else:
        with _pem_path(pem.encode()) as path:
            yield path


def build_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """A client-side context from the ``ssl.*`` properties in ``conf`` (librdkafka names, typed values).
    Raises TlsConfigError naming the property that cannot be applied."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    verify = bool(_value(conf, "enable.ssl.certificate.verification", True))
    endpoint = str(_value(conf, "ssl.endpoint.identification.algorithm", "https")).lower()
    ctx.check_hostname = verify and endpoint == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    ca_location, ca_pem = _value(conf, "ssl.ca.location"), _value(conf, "ssl.ca.pem")
    if ca_location and ca_location != "probe":
        try:
            if os.path.isdir(ca_location):
                ctx.load_verify_locations(capath=ca_location)
            else:
                ctx.load_verify_locations(cafile=ca_location)
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError("ssl.ca.location", _reason(exc)) from None
    if ca_pem:
        try:
            ctx.load_verify_locations(cadata=ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsConfigError("ssl.ca.pem", _reason(exc)) from None
    if ca_location == "probe" or not (ca_location or ca_pem):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)  # the system CA store
    crl = _value(conf, "ssl.crl.location")
    if crl:
        try:
            ctx.load_verify_locations(cafile=crl)
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError("ssl.crl.location", _reason(exc)) from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    suites = _value(conf, "ssl.cipher.suites")
    if suites:
        try:
            ctx.set_ciphers(suites)
        except ssl.SSLError as exc:
            raise TlsConfigError("ssl.cipher.suites", _reason(exc)) from None
    curves = str(_value(conf, "ssl.curves.list")).strip()
    if curves:
        if ":" in curves or "," in curves:
            raise TlsConfigError("ssl.curves.list", "Python's ssl module sets a single ECDH curve: give one name")
        try:
            ctx.set_ecdh_curve(curves)
        except (ValueError, ssl.SSLError) as exc:
            raise TlsConfigError("ssl.curves.list", _reason(exc)) from None
    _load_client_identity(ctx, conf)
    return ctx


def context_for(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """``build_context``, shared by every connection of this process with the same TLS properties."""
    key = tuple((name, _value(conf, name, None)) for name in TLS_PROPERTIES)
    ctx = _cache.get(key)
    if ctx is None:
        ctx = _cache[key] = build_context(conf)
    return ctx
