"""The shared merge of synthesized entries into the broker's answer (responses.py)."""

from __future__ import annotations

from kafkaguard.proxy.handlers.support.responses import merge_in_request_order


def merge(keys: list[str], denied: dict[str, list[str]], broker: list[str]) -> tuple[str, ...]:
    # entries are strings "key:origin" keyed by what precedes the colon
    return merge_in_request_order(keys, denied, broker, lambda e: e.split(":")[0])


def test_merge_keeps_request_order_and_each_denied_key_once() -> None:
    assert merge(["a", "x", "b", "x"], {"x": ["x:proxy"]}, ["b:broker", "a:broker"]) == (
        "a:broker",
        "x:proxy",
        "b:broker",
    )


def test_merge_drops_broker_entries_that_were_not_sent() -> None:
    broker = ["z:broker", "a:broker", "x:broker", "a:broker2", "b:broker"]
    # z never named, x named but denied (never sent), a named once but answered twice
    assert merge(["a", "x", "b"], {"x": ["x:proxy"]}, broker) == (
        "a:broker",
        "x:proxy",
        "b:broker",
    )
    # duplicates named twice take two broker entries, in order
    assert merge(["a", "a"], {}, broker) == ("a:broker", "a:broker2")
    # nothing named: nothing of the broker's passes
    assert merge([], {}, broker) == ()
