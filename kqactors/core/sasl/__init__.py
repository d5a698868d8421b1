"""SASL client mechanisms and the connection steps that run them, pure: no sockets, clocks or processes.

Runs in: the main host, inside each broker/N actor's connection (and in tests). ``mechanisms`` (the client
mechanism interface and its factory), ``plain`` (RFC 4616), ``scram`` (RFC 5802 / 7677, SCRAM-SHA-256 and -512,
the server signature verified), ``oauthbearer`` (RFC 7628 client message, tokens, librdkafka's unsecured-JWT
builder), ``steps`` (SaslHandshake + SaslAuthenticate as ``kqactors.core.connection`` handshake steps).
"""
