"""The process and its operator surface: the server (``server.py``), the admin listener and
``/metrics`` (``admin.py``, ``metrics.py``), reloads, worker processes, log format, and the
``kafkaguard users`` command (``users_cli.py``) (docs/design.md#layers)."""
