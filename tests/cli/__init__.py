"""Tests of kafkaguard/cli/."""
