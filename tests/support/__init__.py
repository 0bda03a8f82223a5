"""Helpers shared by the tests; no tests and no pytest fixtures live here (tests/conftest.py and
the per-directory conftest files build the fixtures from these modules).

* ``proxy_fixture`` — a proxy config on loopback and a proxy run on a loop thread
  (``RunningProxy``, ``start_proxy_thread``, ``unique_name``, ``SESSION_TIMEOUT_MS``).
* ``fake_broker`` — a scripted in-process broker and a raw client, for proxy tests that need
  exact broker answers or misbehaviour.
* ``raw_client`` — a blocking raw Kafka protocol client (``RawKafkaClient``, ``build_request``).
* ``handler_harness`` — drives request handlers without sockets (``HandlerHarness``, ``acl``).
* ``entities`` — request/response entities from keyword values (``req``, ``resp``, ``item``).
* ``policy`` — ACL, request-context and authorizer shorthands for policy tests.
* ``zookeeper`` — a real standalone ZooKeeper (Debian's package) on loopback.
* ``kafka_broker`` — Apache Kafka (upstream and referee), its CLI tools and their classpath;
  ``python -m tests.support.kafka_broker [version]`` resolves and caches the jars.
* ``sasl_proxy``, ``scram_client``, ``jose_tokens``, ``jwks_server`` — SASL users and clients;
  JWTs minted by jwcrypto and an HTTPS JWKS endpoint for OAUTHBEARER.
* ``analyze_data`` — audit records for the Spark analysis tests.
* ``conformance`` — the differential harness (kafkaguard against Kafka's own authorizer) and its
  scenario steps.
* ``fuzz`` — the wire fuzzer's frame generator and harness
  (``python -m tests.support.fuzz.harness``, ``./dev fuzz``).
"""
