"""The Spark tests' one local session (tests/audit/spark/conftest.py), for the analytics
bench's generator: the same settings, not a second definition of them."""

from tests.audit.spark.conftest import spark  # noqa: F401 - a fixture, used by name
