"""A histogram fed by bisect: cheap enough to observe per token or per record."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["BulkHistogram"]


class BulkHistogram(Collector):
    """A histogram fed many values at once (inter-token gaps: hundreds per request).

    prometheus_client's Histogram takes a lock and walks the buckets per value;
    here a whole capture's gaps cost one bisect each and are exported the same way.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 buckets: tuple[float, ...], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.bounds = buckets
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        registry.register(self)

    def observe_many(self, labels: tuple[str, ...], values: Iterable[float]) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        counts, total = series
        bounds = self.bounds
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total[0] += value

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, (counts, total) in list(self._series.items()):
            cumulative, running = [], 0
            for bound, count in zip((*self.bounds, float("inf")), counts):
                running += count
                cumulative.append((floatToGoString(bound), running))
            family.add_metric(list(labels), cumulative, total[0])
        yield family
