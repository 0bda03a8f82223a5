"""Handlers of the offsets family (being written; see the registry for the rules)."""

from __future__ import annotations

from kafkaguard.proxy.handlers.base import ApiHandler

HANDLERS: list[ApiHandler] = []
