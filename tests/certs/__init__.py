"""Tests of kafkaguard.certs."""
