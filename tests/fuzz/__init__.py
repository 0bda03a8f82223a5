"""Wire fuzzing: the seeded CI run and the in-process codec target; the frame generator and the
proxy harness are in tests/support/fuzz/."""
