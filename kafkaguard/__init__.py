"""kafkaguard."""
