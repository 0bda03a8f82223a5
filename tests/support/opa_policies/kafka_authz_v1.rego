# A Rego v1 policy (OPA 1.x's default syntax) over kafkaguard's input document, which is the
# OPA Kafka plugin's plus input.requestContext.groups (the connection's group principals;
# an empty list until a group source is configured, issue 37).
#
# Topics starting with "shared-" are written and described by anyone but contractors: a
# member of the group "contractors", or a user whose name starts with "ext-".
package kafkaguard.authz

default allow := false

allow if {
	input.action.resourcePattern.resourceType == "TOPIC"
	input.action.operation in {"WRITE", "DESCRIBE"}
	startswith(input.action.resourcePattern.name, "shared-")
	not contractor
}

allow if input.action.operation == "DESCRIBE"

contractor if {
	some group in input.requestContext.groups
	group.name == "contractors"
}

contractor if startswith(input.requestContext.principal.name, "ext-")
