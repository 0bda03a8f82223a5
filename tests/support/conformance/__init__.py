"""The differential conformance harness (``harness``: ``Side``, ``differential``, ``normalize``,
``scenario_name``) and the steps its scenarios share (``admin_steps``, ``config_steps``,
``datapath``); the scenarios are in tests/conformance/."""
