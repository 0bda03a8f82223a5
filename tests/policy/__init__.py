"""Tests of kafkaguard.policy."""
