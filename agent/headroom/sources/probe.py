"""The probe collector: the last `headroom probe` result in the agent's state directory (docs/probe.md).

Reads ``<state dir>/probe-last.json`` through probe/store.py ``LastResult``: one stat per tick, the file parsed
again only when it changed (so a new probe shows at the next tick, without a reload). A file that is not a
valid result is not used: ProbeSample.error says why (one line, logged when it changes), the gauges are absent,
the tick goes on. The state directory: ``--state.dir``, else ``collectors.probe.state_dir``, else systemd's
``$STATE_DIRECTORY``, else /var/lib/headroom (a directory of this user's under the temp directory with
``--simulate``): probe/store.py ``state_dir``.
"""

from __future__ import annotations

import structlog

from headroom.probe import store
from headroom.samples import ProbeSample
from headroom.sources import Collector, SourceContext, register

log = structlog.get_logger("headroom.sources.probe")


@register
class ProbeCollector(Collector):
    name = "probe"
    default_enabled = True
    description = "the last `headroom probe` result (probe-last.json in the state directory)"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        directory = store.state_dir(ctx.settings.get("state_dir"), simulate=ctx.scenario is not None)
        self._last = store.LastResult(directory)
        self._logged: str | None = None

    def collect(self) -> ProbeSample:
        r = self._last.get()
        error = self._last.error
        if error != self._logged:
            self._logged = error
            if error:
                log.warning("probe_result_unusable", error=error)
        path = str(self._last.path)
        if r is None:
            return ProbeSample(path=path, error=error)
        cap, load = r["capacity"], r["load"]
        # the capacity step: the last one within the SLO before the one that broke it (probe/run.py _capacity)
        good = [s for s in r["steps"] if s["slo_ok"] and (cap["from_step"] is None or s["index"] < cap["from_step"])]
        latency = {} if not good else {f"{metric}_{q}": v for metric in ("ttft", "itl")
                                       for q, v in (good[-1].get(metric) or {}).items() if v is not None}
        return ProbeSample(
            path=path, found=True, workload=r["workload"], url=r["url"], schedule=r["schedule"],
            measured_at=r["finished_at"], concurrency=cap["concurrency"], requests_per_second=cap["requests_per_second"],
            bound_by=cap["bound_by"], from_step=cap["from_step"],
            input_tokens=(load.get("input_tokens") or {}).get("typical"),
            output_tokens=(load.get("output_tokens") or {}).get("typical"), partial=r["partial"], latency=latency)
