# A Rego v0 policy in the style of the OPA Kafka plugin's example policies
# (github.com/StyraOSS/opa-kafka-plugin, src/main/rego): `default allow = false`, rules
# without `if`, the plugin's input document (input.requestContext, input.action). OPA 1.x
# loads it with --v0-compatible (tests/support/opa.py).
#
# Users are named <owner>-<role> (role: producer, consumer); an owner's topics start with
# "<owner>-". Producers write their owner's topics, consumers read them, everyone describes.
package kafka.authz

import future.keywords.in

default allow = false

allow {
	input.action.operation == "WRITE"
	on_own_topic
	role == "producer"
}

allow {
	input.action.operation in ["READ"]
	on_own_topic
	role == "consumer"
}

allow {
	input.action.operation == "READ"
	input.action.resourcePattern.resourceType == "GROUP"
}

allow {
	input.action.operation == "DESCRIBE"
}

parts = split(input.requestContext.principal.name, "-")

owner = parts[0]

role = parts[count(parts) - 1]

on_own_topic {
	input.action.resourcePattern.resourceType == "TOPIC"
	startswith(input.action.resourcePattern.name, concat("", [owner, "-"]))
}
