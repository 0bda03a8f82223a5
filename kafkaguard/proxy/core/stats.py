"""What a listener counts on the data path: plain integers and fixed-bucket histograms.

The exchange core (:mod:`kafkaguard.proxy.core.exchange`) and the shell increment these with no
lock, no label lookup and no exposition format: a request costs a few dictionary increments
and, per read, one clock read. :mod:`kafkaguard.proxy.app.metrics` turns them into Prometheus
metric families only when scraped (prometheus-client's custom-collector interface), so the
cost of the metrics endpoint is paid by the scrape, not by the requests.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Final

LATENCY_BUCKETS_S: Final = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Upper bounds (seconds) of the latency histograms: the proxy adds tens to hundreds of
microseconds; a long-poll Fetch waits up to its ``max_wait_ms`` at the broker."""


class Histogram:
    """Counts per bucket of :data:`LATENCY_BUCKETS_S` (the last counts what exceeds them)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.total += seconds


class ListenerStats:
    """Counters of one listener, shared by its connections (one event loop: no locks)."""

    __slots__ = (
        "_answer_histograms",
        "accepted",
        "bytes_from_broker",
        "bytes_from_client",
        "bytes_to_broker",
        "bytes_to_client",
        "proxy_latency",
        "request_latency",
        "requests",
        "responses_from_broker",
        "responses_from_proxy",
        "upstream_connect_errors",
        "upstream_latency",
    )

    def __init__(self) -> None:
        self.accepted = 0
        """TCP connections admitted by the connection quotas."""
        self.requests: dict[int, int] = {}
        """Requests by API key (keys the proxy serves; others are counted under -1)."""
        self.responses_from_broker: dict[int, int] = {}
        """Responses relayed from the broker, by API key."""
        self.responses_from_proxy: dict[int, int] = {}
        """Responses the proxy answered itself (denials, errors, SASL, ApiVersions...)."""
        self.bytes_from_client = 0
        self.bytes_to_client = 0
        self.bytes_from_broker = 0
        self.bytes_to_broker = 0
        self.upstream_connect_errors = 0
        self.request_latency: dict[int, Histogram] = {}
        """By API key: from the read that completed the request to its response being
        handed to the client's transport."""
        self.upstream_latency: dict[int, Histogram] = {}
        """By API key: from the request leaving for the broker to the broker's response."""
        self.proxy_latency: dict[int, Histogram] = {}
        """By API key: the request latency minus the upstream latency — what the proxy added
        (decoding, deciding, rewriting, and waiting behind earlier responses)."""
        self._answer_histograms: dict[int, tuple[Histogram, Histogram]] = {}
        """By API key: its request and proxy latency histograms, found with one lookup."""

    def observe(self, table: dict[int, Histogram], api_key: int, seconds: float) -> None:
        histogram = table.get(api_key)
        if histogram is None:
            histogram = table[api_key] = Histogram()
        histogram.observe(seconds)

    def observe_answer(self, api_key: int, total_s: float, upstream_s: float) -> None:
        """One response handed to the client: its request latency (``total_s``) and what the
        proxy added (``total_s - upstream_s``), in one call with one lookup (every response
        passes here)."""
        pair = self._answer_histograms.get(api_key)
        if pair is None:
            pair = self._answer_histograms[api_key] = (
                self.request_latency.setdefault(api_key, Histogram()),
                self.proxy_latency.setdefault(api_key, Histogram()),
            )
        pair[0].observe(total_s)
        pair[1].observe(total_s - upstream_s)
