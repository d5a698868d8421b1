"""SASL/SCRAM credentials (describe_user_scram_credentials, alter_user_scram_credentials).

Runs in: the app process.
"""

from __future__ import annotations

from kqactors.admin._util import OrderedEnum


class ScramMechanism(OrderedEnum):
    """A SASL/SCRAM mechanism."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


class ScramCredentialInfo:
    """A credential's ``mechanism`` and ``iterations``."""

    def __init__(self, mechanism: ScramMechanism, iterations: int) -> None:
        self.mechanism = mechanism
        self.iterations = iterations


class UserScramCredentialsDescription:
    """A user's SCRAM credentials."""

    def __init__(self, user: str, scram_credential_infos: list[ScramCredentialInfo]) -> None:
        self.user = user
        self.scram_credential_infos = scram_credential_infos


class UserScramCredentialAlteration:
    """Base of the two alterations of a user's credentials."""

    def __init__(self, user: str) -> None:
        self.user = user


class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    """Insert or update a credential: the password is salted (a random salt when ``salt`` is None) and hashed
    client-side with the mechanism's PBKDF2; only the result is sent."""

    def __init__(self, user: str, scram_credential_info: ScramCredentialInfo, password: bytes,
                 salt: bytes | None = None) -> None:
        super().__init__(user)
        self.scram_credential_info = scram_credential_info
        self.password = password
        self.salt = salt


class UserScramCredentialDeletion(UserScramCredentialAlteration):
    """Delete a user's credential of one mechanism."""

    def __init__(self, user: str, mechanism: ScramMechanism) -> None:
        super().__init__(user)
        self.mechanism = mechanism
