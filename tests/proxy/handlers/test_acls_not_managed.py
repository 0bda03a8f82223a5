"""DescribeAcls in front of an authorizer that manages no ACLs (the OPA authorizer, whose
``acls()`` raises ``AclsNotManagedError``): SECURITY_DISABLED (54) with the authorizer's
message, as Kafka answers without an ACL-managing authorizer, not an empty list."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kafkaguard.policy.authorizer import AclsNotManagedError
from kafkaguard.policy.model import AclBinding, AclBindingFilter
from tests.proxy.handlers.test_acls import ADMIN_ALTER, describe, finish, harness


def test_describe_answers_security_disabled() -> None:
    h = harness(ADMIN_ALTER)

    class NotManaging:
        """What DescribeAcls asks (the harness's ``describe_acls``), as OPA's answers."""

        def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
            raise AclsNotManagedError("OPA's policy decides")

    h.authorizer = NotManaging()  # type: ignore[assignment]
    for version in (1, 3):
        response = finish(h.send(describe(version)))
        assert response.error_code == ErrorCode.security_disabled
        assert response.error_message == "OPA's policy decides"
        assert response.resources == ()
