"""Prometheus metrics in the text exposition format, without a client library: a latency
histogram, requests by route and outcome, served-insight counts and projector lag."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.latency: defaultdict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS_S) + 1))
        self.latency_sum: defaultdict[str, float] = defaultdict(float)
        self.served = 0
        self.retrievals = 0
        self.degraded = 0
        self.gauges: dict[str, Callable[[], float]] = {}

    def observe(self, route: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self.requests[(route, outcome)] += 1
            buckets = self.latency[route]
            for i, bound in enumerate(BUCKETS_S):
                if seconds <= bound:
                    buckets[i] += 1
                    break
            else:
                buckets[-1] += 1
            self.latency_sum[route] += seconds

    def served_insights(self, n: int, degraded: bool) -> None:
        with self._lock:
            self.retrievals += 1
            self.served += n
            self.degraded += int(degraded)

    def render(self) -> str:
        lines = [
            "# HELP evomem_requests_total HTTP requests by route and outcome.",
            "# TYPE evomem_requests_total counter",
        ]
        with self._lock:
            for (route, outcome), n in sorted(self.requests.items()):
                lines.append(f'evomem_requests_total{{route="{route}",outcome="{outcome}"}} {n}')
            lines += [
                "# HELP evomem_request_seconds Request latency.",
                "# TYPE evomem_request_seconds histogram",
            ]
            for route, buckets in sorted(self.latency.items()):
                cumulative = 0
                for bound, n in zip((*BUCKETS_S, float("inf")), buckets, strict=True):
                    cumulative += n
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    lines.append(f'evomem_request_seconds_bucket{{route="{route}",le="{le}"}} {cumulative}')
                lines.append(f'evomem_request_seconds_sum{{route="{route}"}} {self.latency_sum[route]:.6f}')
                lines.append(f'evomem_request_seconds_count{{route="{route}"}} {cumulative}')
            lines += [
                "# HELP evomem_retrievals_total Retrievals served.",
                "# TYPE evomem_retrievals_total counter",
                f"evomem_retrievals_total {self.retrievals}",
                "# HELP evomem_served_insights_total Insights served over all retrievals.",
                "# TYPE evomem_served_insights_total counter",
                f"evomem_served_insights_total {self.served}",
                "# HELP evomem_degraded_retrievals_total Retrievals answered from Qdrant alone (Redis down).",
                "# TYPE evomem_degraded_retrievals_total counter",
                f"evomem_degraded_retrievals_total {self.degraded}",
            ]
        for name, read in sorted(self.gauges.items()):
            lines += [f"# TYPE {name} gauge", f"{name} {read()}"]
        return "\n".join(lines) + "\n"


__all__ = ["BUCKETS_S", "Metrics"]
