"""Tests of kafkaguard.protocol."""
