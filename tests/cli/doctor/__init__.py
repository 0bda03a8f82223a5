"""Tests of kafkaguard/cli/doctor/: the checks over facts, and the command against Tansu."""
