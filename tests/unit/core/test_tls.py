"""The ssl.* properties as an ssl.SSLContext: verification switches, trust sources, client identities from
files, PEM strings, an encrypted key and PKCS#12, and errors that name the property (never a secret)."""

from __future__ import annotations

import ssl

import pytest

from kqactors.core.tls import TlsConfigError, build_context, context_for

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    from kqactors.testing.certs import CertificateAuthority
    authority = CertificateAuthority(tmp_path_factory.mktemp("ca"))
    authority.client = authority.issue("client", hosts=(), client=True)
    return authority


def test_defaults_verify_the_broker_and_its_hostname_with_the_system_store():
    ctx = build_context({})
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_switches_turn_verification_off():
    ctx = build_context({"ssl.endpoint.identification.algorithm": "none"})
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
    ctx = build_context({"enable.ssl.certificate.verification": False})
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_ca_file_pem_and_crl(ca):
    assert build_context({"ssl.ca.location": str(ca.cert_path)}).cert_store_stats()["x509_ca"] == 1
    assert build_context({"ssl.ca.pem": ca.cert_pem}).cert_store_stats()["x509_ca"] == 1
    crl = ca.revoke(ca.issue("gone"))
    ctx = build_context({"ssl.ca.location": str(ca.cert_path), "ssl.crl.location": str(crl)})
    assert ctx.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF


def test_client_identity_sources_all_load(ca):
    client = ca.client
    build_context({"ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)})
    build_context({"ssl.certificate.pem": client.cert_pem, "ssl.key.pem": client.key_pem})
    build_context({"ssl.certificate.location": str(client.cert),
                   "ssl.key.location": str(client.encrypted_key("pw1")), "ssl.key.password": "pw1"})
    build_context({"ssl.keystore.location": str(client.pkcs12("pw2")), "ssl.keystore.password": "pw2"})


@pytest.mark.parametrize("conf,prop", [
    ({"ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location"),
    ({"ssl.ca.pem": "not a pem"}, "ssl.ca.pem"),
    ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "ssl.cipher.suites"),
    ({"ssl.curves.list": "prime256v1:secp384r1"}, "ssl.curves.list"),
    ({"ssl.certificate.location": "/nonexistent.pem", "ssl.key.location": "/nonexistent.key"},
     "ssl.certificate.location"),
    ({"ssl.key.pem": "x"}, "ssl.key.pem"),
    ({"ssl.keystore.location": "/nonexistent.p12", "ssl.keystore.password": "x"}, "ssl.keystore.location"),
])
def test_errors_name_the_property(conf, prop):
    with pytest.raises(TlsConfigError) as info:
        build_context(conf)
    assert info.value.prop == prop and str(info.value).startswith(f"{prop} failed: ")


def test_a_wrong_key_password_names_the_key_not_the_password(ca):
    key = ca.client.encrypted_key("right-pw")
    with pytest.raises(TlsConfigError) as info:
        build_context({"ssl.certificate.location": str(ca.client.cert), "ssl.key.location": str(key),
                       "ssl.key.password": "wrong-pw-123"})
    assert info.value.prop == "ssl.key.location" and "wrong-pw-123" not in str(info.value)
    with pytest.raises(TlsConfigError) as info:
        build_context({"ssl.keystore.location": str(ca.client.pkcs12("right")), "ssl.keystore.password": "bad"})
    assert "bad" not in str(info.value).replace("ssl.keystore.password", "")


def test_one_context_per_process_and_settings(ca):
    conf = {"ssl.ca.location": str(ca.cert_path)}
    assert context_for(conf) is context_for(dict(conf))
    assert context_for(conf) is not context_for({**conf, "ssl.endpoint.identification.algorithm": "none"})


def test_a_hashed_ca_directory_is_a_trust_source(ca, tmp_path):
    import shutil
    import subprocess
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl command not found (needed to name the hashed CA file)")
    digest = subprocess.run([openssl, "x509", "-hash", "-noout", "-in", str(ca.cert_path)], check=True,
                            capture_output=True, text=True).stdout.strip()
    (tmp_path / f"{digest}.0").write_text(ca.cert_pem)
    ctx = build_context({"ssl.ca.location": str(tmp_path)})
    # a directory is looked up lazily, per handshake: verify a certificate the CA issued against it
    import socket
    import threading
    server_cert = ca.issue("dir-server", hosts=("127.0.0.1",))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server_cert.cert, server_cert.key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.getpeercert()["subject"]
        tls.send(b"x")
    thread.join(5)
    listener.close()
