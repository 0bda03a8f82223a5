"""A listener's counters (kafkaguard/proxy/core/stats.py): the histograms ``/metrics`` reads
are the ones the exchange fills, bucketed as Prometheus's ``le`` bounds are (a value on a
bound counts in that bucket)."""

from __future__ import annotations

from kafkaguard.proxy.core.stats import LATENCY_BUCKETS_S, Histogram, ListenerStats
from tests.proxy.core.test_exchange import ALICE_WRITES_ORDERS, produce, produce_response
from tests.support.exchange_driver import Driver, to_broker, to_client


def test_a_value_counts_in_the_first_bucket_whose_bound_it_does_not_exceed() -> None:
    histogram = Histogram()
    for seconds in (LATENCY_BUCKETS_S[0], 0.0004, 31.0):
        histogram.observe(seconds)
    assert histogram.counts[0] == 1  # on the first bound
    assert histogram.counts[LATENCY_BUCKETS_S.index(0.0005)] == 1
    assert histogram.counts[-1] == 1  # beyond every bound
    assert sum(histogram.counts) == 3
    assert abs(histogram.total - (LATENCY_BUCKETS_S[0] + 0.0004 + 31.0)) < 1e-12


def test_an_answer_is_counted_in_the_request_and_the_proxy_latency() -> None:
    stats = ListenerStats()
    stats.observe_answer(0, 0.003, 0.001)
    stats.observe_answer(0, 0.003, 0.001)
    request, proxy = stats.request_latency[0], stats.proxy_latency[0]
    assert request.counts[LATENCY_BUCKETS_S.index(0.005)] == 2
    assert proxy.counts[LATENCY_BUCKETS_S.index(0.0025)] == 2  # what the proxy added: 2 ms
    assert set(stats.request_latency) == set(stats.proxy_latency) == {0}


def test_the_exchange_counts_one_allowed_round_trip() -> None:
    d = Driver(ALICE_WRITES_ORDERS)
    d.connect()
    request, response = produce("orders", 1), produce_response("orders", 1)
    assert to_broker(d.client(request)) == [request]
    assert to_client(d.broker(response)) == response
    stats = d.exchange.stats
    assert stats.requests == {0: 1}
    assert stats.responses_from_broker == {0: 1} and stats.responses_from_proxy == {}
    assert stats.bytes_from_client == stats.bytes_to_broker == len(request)
    assert stats.bytes_from_broker == stats.bytes_to_client == len(response)
    assert sum(stats.request_latency[0].counts) == sum(stats.upstream_latency[0].counts) == 1
