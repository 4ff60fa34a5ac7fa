"""Prometheus metrics of the service through ``prometheus_client``, in a registry of its own (one per
service, so that several in one process do not collide): latency, requests by route and outcome,
served insights, projector lag and state."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString as _go_float

BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "evomem_requests", "HTTP requests by route and outcome.", ("route", "outcome"), registry=r
        )
        self.latency = Histogram(
            "evomem_request_seconds", "Request latency.", ("route",), buckets=BUCKETS_S, registry=r
        )
        self.retrievals = Counter("evomem_retrievals", "Retrievals served.", registry=r)
        self.served = Counter("evomem_served_insights", "Insights served over all retrievals.", registry=r)
        self.degraded = Counter(
            "evomem_degraded_retrievals", "Retrievals answered from Qdrant alone (Redis down).", registry=r
        )
        # the labelled series of each (route, outcome), looked up once: ``labels()`` validates and
        # locks on every call (~3 µs of the ~5 µs a request's two observations cost); routes and
        # outcomes are the fixed sets of the API and error tables
        self._series: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    def observe(self, route: str, outcome: str, seconds: float) -> None:
        """Counted before the response is sent: a client that has its answer sees it counted."""
        series = self._series.get((route, outcome))
        if series is None:
            series = (self.requests.labels(route, outcome), self.latency.labels(route))
            self._series[(route, outcome)] = series
        series[0].inc()
        series[1].observe(seconds)

    def served_insights(self, n: int, degraded: bool) -> None:
        self.retrievals.inc()
        self.served.inc(n)
        if degraded:
            self.degraded.inc()

    def gauge(self, name: str, help_: str, read: Callable[[], float]) -> None:
        Gauge(name, help_, registry=self.registry).set_function(read)

    def labelled_gauges(
        self, name: str, help_: str, label: str, read: Callable[[], dict[str, float]]
    ) -> None:
        """A gauge per value of ``label``, all read at scrape time by one call of ``read``."""
        self.registry.register(_LabelledGauges(name, help_, label, read))

    def render(self) -> bytes:
        """The text exposition format of the registry, labels in the order the metrics declare them
        (``route`` before ``outcome``, ``le`` last) rather than ``generate_latest``'s alphabetical
        order, and without the ``_created`` series."""
        out: list[str] = []
        for family in self.registry.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            out.append(f"# HELP {name} {_escape_help(family.documentation)}")
            out.append(f"# TYPE {name} {family.type}")
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sample.labels.items())
                out.append(
                    f"{sample.name}{{{labels}}} {_number(sample.value)}"
                    if labels
                    else f"{sample.name} {_number(sample.value)}"
                )
        return ("\n".join(out) + "\n").encode()


class _LabelledGauges:
    """A collector of one gauge family whose labelled series are whatever ``read`` returns."""

    def __init__(self, name: str, help_: str, label: str, read: Callable[[], dict[str, float]]) -> None:
        self.name, self.help, self.label, self.read = name, help_, label, read

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.name, self.help, labels=[self.label])]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.help, labels=[self.label])
        for value, number in sorted(self.read().items()):
            family.add_metric([value], number)
        yield family


def _number(value: float) -> str:
    text: str = _go_float(value)  # type: ignore[no-untyped-call]
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


__all__ = ["BUCKETS_S", "CONTENT_TYPE", "Metrics"]
