"""The AdminClient's ACL and SCRAM credential methods: create_acls, describe_acls, delete_acls,
describe_user_scram_credentials, alter_user_scram_credentials.

Runs in: the app process. ACL bindings are checked as librdkafka checks them (no ANY/UNKNOWN member where a
binding needs a value); SCRAM upsertions are salted (64 random bytes unless given) and hashed here with the
mechanism's PBKDF2 (SCRAM's Hi()), as librdkafka does, so no password leaves the client.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
from typing import Any

from kqactors.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from kqactors.admin._resource import ResourcePatternType, ResourceType
from kqactors.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from kqactors.client.admin import results as res
from kqactors.client.admin.base import AdminBase
from kqactors.client.admin.dispatch import Outcome, new_future
from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import admin as aops

__all__ = ["AclsMixin"]

_HASHES = {ScramMechanism.SCRAM_SHA_256.value: "sha256", ScramMechanism.SCRAM_SHA_512.value: "sha512"}
_SALT_BYTES = 64


def _binding_values(binding: AclBinding, is_filter: bool) -> dict[str, Any]:
    """The wire fields of a binding (or filter), after librdkafka's checks (ValueError with its message)."""
    restype, pattern = binding.restype_int, binding.resource_pattern_type_int
    operation, permission = binding.operation_int, binding.permission_type_int
    for field in ("name", "principal", "host"):
        value = getattr(binding, field)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"Expected .{field} to be str type, not {type(value).__name__}")
        if value is None and not is_filter:
            raise ValueError({"name": "Invalid resource name", "principal": "Invalid principal",
                              "host": "Invalid host"}[field])
    bad_restype = restype <= ResourceType.UNKNOWN.value or restype > ResourceType.TRANSACTIONAL_ID.value
    bad_pattern = pattern <= ResourcePatternType.UNKNOWN.value or pattern > ResourcePatternType.PREFIXED.value
    bad_operation = operation <= AclOperation.UNKNOWN.value or operation > AclOperation.IDEMPOTENT_WRITE.value
    bad_permission = permission <= AclPermissionType.UNKNOWN.value or permission > AclPermissionType.ALLOW.value
    if not is_filter:
        bad_restype = bad_restype or restype == ResourceType.ANY.value
        bad_pattern = bad_pattern or pattern in (ResourcePatternType.ANY.value, ResourcePatternType.MATCH.value)
        bad_operation = bad_operation or operation == AclOperation.ANY.value
        bad_permission = bad_permission or permission == AclPermissionType.ANY.value
    for bad, message in ((bad_restype, "Invalid resource type"), (bad_pattern, "Invalid resource pattern type"),
                         (bad_operation, "Invalid operation"), (bad_permission, "Invalid permission type")):
        if bad:
            raise ValueError(message)
    return {"restype": restype, "name": binding.name, "pattern": pattern, "principal": binding.principal,
            "host": binding.host, "operation": operation, "permission": permission}


def _filter_args(values: dict[str, Any]) -> dict[str, Any]:
    return {"resource_type_filter": values["restype"], "resource_name_filter": values["name"],
            "pattern_type_filter": values["pattern"], "principal_filter": values["principal"],
            "host_filter": values["host"], "operation": values["operation"], "permission_type": values["permission"]}


def _binding(resource: dict[str, Any], acl: dict[str, Any]) -> AclBinding:
    return AclBinding(int(resource["resource_type"]), resource["resource_name"],
                      int(resource.get("pattern_type", ResourcePatternType.LITERAL.value)), acl["principal"],
                      acl["host"], int(acl["operation"]), int(acl["permission_type"]))


def salted_password(mechanism: int, password: bytes, salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword: Hi(password, salt, i), i.e. PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password, salt, iterations)


class AclsMixin(AdminBase):
    """ACL and SCRAM methods of the AdminClient."""

    # ---- ACLs --------------------------------------------------------------------------------------------
    def create_acls(self, acls: list[AclBinding], **kwargs: Any) -> dict[AclBinding, concurrent.futures.Future]:
        """Create ACL bindings (no duplicates). Options: ``request_timeout``. Returns {AclBinding: future} whose
        result is None."""
        if len(set(acls)) != len(acls):
            raise ValueError("duplicate ACL bindings not allowed")
        futures = self._futures(acls, AclBinding)
        options = self._options(kwargs, ("request_timeout",))
        if not isinstance(acls, list) or not acls:
            raise ValueError("Expected non-empty list of AclBinding objects")
        self._check_open()
        creations = []
        for binding in acls:
            v = _binding_values(binding, is_filter=False)
            creations.append({"resource_type": v["restype"], "resource_name": v["name"],
                              "resource_pattern_type": v["pattern"], "principal": v["principal"], "host": v["host"],
                              "operation": v["operation"], "permission_type": v["permission"]})

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "CreateAcls")
            if failure is not None:
                self._fail(futures.values(), failure)
                return
            results = (outcomes[0].get("result") or {}).get("results") or []
            for future, result in zip(futures.values(), results, strict=False):
                code = int(result.get("error_code") or 0)
                if code:
                    future.set_exception(res.exception(code, result.get("error_message")))
                else:
                    future.set_result(None)
            self._fail(futures.values(), res.exception(KafkaError._BAD_MSG, "the broker answered fewer results than asked for"))

        self._submit(aops.CREATEACLS, [aops.call(["controller"], "admin:CreateAcls", {"creations": creations})],
                     options, complete, futures.values())
        return dict(futures)

    def describe_acls(self, acl_binding_filter: AclBindingFilter, **kwargs: Any) -> concurrent.futures.Future:
        """The ACL bindings matching a filter. Options: ``request_timeout``. Returns a future of a list of
        AclBinding."""
        future = new_future()
        options = self._options(kwargs, ("request_timeout",))
        self._check_open()
        if not isinstance(acl_binding_filter, AclBindingFilter):
            raise TypeError("Expected an AclBindingFilter object")
        args = _filter_args(_binding_values(acl_binding_filter, is_filter=True))

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "DescribeAcls")
            result = outcomes[0].get("result") or {}
            if failure is None and int(result.get("error_code") or 0):
                failure = res.exception(int(result["error_code"]), result.get("error_message"))
            if failure is not None:
                future.set_exception(failure)
                return
            future.set_result([_binding(resource, acl) for resource in result.get("resources") or ()
                               for acl in resource.get("acls") or ()])

        self._submit(aops.DESCRIBEACLS, [aops.call(["controller"], "admin:DescribeAcls", args)], options, complete,
                     [future])
        return future

    def delete_acls(self, acl_binding_filters: list[AclBindingFilter], **kwargs: Any
                    ) -> dict[AclBindingFilter, concurrent.futures.Future]:
        """Delete the ACL bindings matching each filter. Options: ``request_timeout``. Returns
        {AclBindingFilter: future of the list of deleted AclBindings}."""
        filters = acl_binding_filters
        if len(set(filters)) != len(filters):
            raise ValueError("duplicate ACL binding filters not allowed")
        futures = self._futures(filters, AclBindingFilter)
        options = self._options(kwargs, ("request_timeout",))
        if not isinstance(filters, list) or not filters:
            raise ValueError("Expected non-empty list of AclBindingFilter objects")
        self._check_open()
        wire = [_filter_args(_binding_values(f, is_filter=True)) for f in filters]

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "DeleteAcls")
            if failure is not None:
                self._fail(futures.values(), failure)
                return
            results = (outcomes[0].get("result") or {}).get("filter_results") or []
            for future, result in zip(futures.values(), results, strict=False):
                code = int(result.get("error_code") or 0)
                if code:
                    future.set_exception(res.exception(code, result.get("error_message")))
                    continue
                future.set_result([AclBinding(int(m["resource_type"]), m["resource_name"],
                                              int(m.get("pattern_type", ResourcePatternType.LITERAL.value)),
                                              m["principal"], m["host"], int(m["operation"]),
                                              int(m["permission_type"]))
                                   for m in result.get("matching_acls") or () if not int(m.get("error_code") or 0)])
            self._fail(futures.values(), res.exception(KafkaError._BAD_MSG, "the broker answered fewer results than asked for"))

        self._submit(aops.DELETEACLS, [aops.call(["controller"], "admin:DeleteAcls", {"filters": wire})], options,
                     complete, futures.values())
        return dict(futures)

    # ---- SCRAM credentials -------------------------------------------------------------------------------
    def describe_user_scram_credentials(self, users: list[str] | None = None, **kwargs: Any
                                        ) -> concurrent.futures.Future | dict[str, concurrent.futures.Future]:
        """The SCRAM credentials of ``users`` (None: of every user). Options: ``request_timeout``. Returns, for
        None, one future of {user: UserScramCredentialsDescription}; for a list, {user: future of
        UserScramCredentialsDescription}."""
        if users is not None:
            if not isinstance(users, list):
                raise TypeError("Expected input to be list of String")
            for user in users:
                if user is None:
                    raise TypeError("'user' cannot be None")
                if not isinstance(user, str):
                    raise TypeError("Each value should be a string")
                if not user:
                    raise ValueError("'user' cannot be empty")
        single = new_future() if users is None else None
        futures = {} if users is None else self._futures(users)
        options = self._options(kwargs, ("request_timeout",))
        self._check_open()
        waiting = [single] if single is not None else list(futures.values())
        if users is not None:
            if not users:
                return dict(futures)
            if len(set(users)) != len(users):
                self._fail(waiting, res.exception(KafkaError._INVALID_ARG,
                                                  "Duplicate users aren't allowed in the same request"))
                return dict(futures)
        args = {"users": None if users is None else [{"name": u} for u in users]}

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "DescribeUserScramCredentials")
            result = outcomes[0].get("result") or {}
            if failure is None and int(result.get("error_code") or 0):
                failure = res.exception(int(result["error_code"]), result.get("error_message"))
            if failure is not None:
                self._fail(waiting, failure)
                return
            described: dict[str, Any] = {}
            for item in result.get("results") or ():
                code = int(item.get("error_code") or 0)
                described[item["user"]] = res.kafka_error(code, item.get("error_message")) if code else \
                    UserScramCredentialsDescription(item["user"], [
                        ScramCredentialInfo(ScramMechanism(int(c["mechanism"])), int(c["iterations"]))
                        for c in item.get("credential_infos") or ()])
            if single is not None:
                errors = [v for v in described.values() if isinstance(v, KafkaError)]
                if errors:
                    single.set_exception(KafkaException(errors[0]))
                else:
                    single.set_result(described)
                return
            for user, future in futures.items():
                value = described.get(user, res.kafka_error(KafkaError._FAIL, f"{user} missing from the response"))
                if isinstance(value, KafkaError):
                    future.set_exception(KafkaException(value))
                else:
                    future.set_result(value)

        self._submit(aops.DESCRIBEUSERSCRAMCREDENTIALS,
                     [aops.call(["controller"], "admin:DescribeUserScramCredentials", args)], options, complete,
                     waiting)
        return single if single is not None else dict(futures)

    def alter_user_scram_credentials(self, alterations: list[UserScramCredentialAlteration], **kwargs: Any
                                     ) -> dict[str, concurrent.futures.Future]:
        """Upsert or delete users' SCRAM credentials ((user, mechanism) unique). Options: ``request_timeout``.
        Returns {user: future} whose result is None."""
        self._check_alterations(alterations)
        futures = self._futures({a.user for a in alterations})
        options = self._options(kwargs, ("request_timeout",))
        self._check_open()
        upsertions, deletions = [], []
        problem = None
        for index, alteration in enumerate(alterations):
            if isinstance(alteration, UserScramCredentialUpsertion):
                info = alteration.scram_credential_info
                mechanism, iterations = int(info.mechanism.value), int(info.iterations)
                salt = alteration.salt or os.urandom(_SALT_BYTES)
                if mechanism == ScramMechanism.UNKNOWN.value:
                    problem = f"SCRAM mechanism must be specified at index {index}"
                    break
                upsertions.append({"name": alteration.user, "mechanism": mechanism, "iterations": iterations,
                                   "salt": salt, "salted_password": salted_password(
                                       mechanism, alteration.password, salt, iterations)})
            else:
                mechanism = int(alteration.mechanism.value)
                if mechanism == ScramMechanism.UNKNOWN.value:
                    problem = f"SCRAM mechanism must be specified at index {index}"
                    break
                deletions.append({"name": alteration.user, "mechanism": mechanism})
        if problem is not None:
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, problem))
            return dict(futures)

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "AlterUserScramCredentials")
            if failure is not None:
                self._fail(futures.values(), failure)
                return
            found = {r["user"]: r for r in (outcomes[0].get("result") or {}).get("results") or ()}
            for user, future in futures.items():
                item = found.get(user)
                code = KafkaError._FAIL if item is None else int(item.get("error_code") or 0)
                if code:
                    future.set_exception(res.exception(code, item.get("error_message") if item else None))
                else:
                    future.set_result(None)

        self._submit(aops.ALTERUSERSCRAMCREDENTIALS,
                     [aops.call(["controller"], "admin:AlterUserScramCredentials",
                                {"upsertions": upsertions, "deletions": deletions})], options, complete,
                     futures.values())
        return dict(futures)

    @staticmethod
    def _check_alterations(alterations: Any) -> None:
        """confluent-kafka's checks of an alter_user_scram_credentials() list."""
        if not isinstance(alterations, list):
            raise TypeError("Expected input to be list")
        if not alterations:
            raise ValueError("Expected at least one alteration")
        for alteration in alterations:
            if not isinstance(alteration, UserScramCredentialAlteration):
                raise TypeError("Expected each element of list to be subclass of UserScramCredentialAlteration")
            if alteration.user is None:
                raise TypeError("'user' cannot be None")
            if not isinstance(alteration.user, str):
                raise TypeError("'user' must be a string")
            if not alteration.user:
                raise ValueError("'user' cannot be empty")
            if isinstance(alteration, UserScramCredentialUpsertion):
                if alteration.password is None:
                    raise TypeError("'password' cannot be None")
                if not isinstance(alteration.password, bytes):
                    raise TypeError("'password' must be bytes")
                if not alteration.password:
                    raise ValueError("'password' cannot be empty")
                if alteration.salt is not None and not alteration.salt:
                    raise ValueError("'salt' can be None but cannot be empty")
                if alteration.salt and not isinstance(alteration.salt, bytes):
                    raise TypeError("'salt' must be bytes")
                if not isinstance(alteration.scram_credential_info, ScramCredentialInfo):
                    raise TypeError("Expected credential_info to be ScramCredentialInfo Type")
                if alteration.scram_credential_info.iterations < 1:
                    raise ValueError("Iterations should be positive")
                if not isinstance(alteration.scram_credential_info.mechanism, ScramMechanism):
                    raise TypeError("Expected the mechanism to be ScramMechanism Type")
            elif isinstance(alteration, UserScramCredentialDeletion):
                if not isinstance(alteration.mechanism, ScramMechanism):
                    raise TypeError("Expected the mechanism to be ScramMechanism Type")
            else:
                raise TypeError("Expected each element of list 'alterations' to be either a "
                                "UserScramCredentialUpsertion or a UserScramCredentialDeletion")
