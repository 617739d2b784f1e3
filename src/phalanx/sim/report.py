"""The plots and the one-file HTML report of a ``phalanx sim`` run.

:func:`write_report` draws, with every policy side by side, into ``DIR``:

- ``utilization.png``: GPUs in use over time (hourly means, share of the cluster);
- ``queue.png``: jobs waiting over time (hourly means);
- ``waits.png``: the CDF of queueing delays per policy (log time axis);
- ``shares.png``: each tenant's share of the GPU time used against its
  entitlement, per policy;

and ``report.html``: the summary table and the four plots (embedded, so the
file stands alone). Plots need matplotlib (``pip install 'phalanx[sim]'``);
without it only the HTML tables are written.
"""

from __future__ import annotations

import base64
import html
import importlib.util
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from phalanx.sim.simulator import SimResult

__all__ = ["can_plot", "write_report"]

HOUR = 3600.0


def can_plot() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _hourly(series: Sequence[tuple[float, int]], end: float) -> tuple[list[float], list[float]]:
    """Time-weighted hourly means of a step series (value holds until the next point)."""
    if not series:
        return [], []
    hours = int(end // HOUR) + 1
    sums = [0.0] * hours
    points = [*series, (end, series[-1][1])]
    for (t0, value), (t1, _) in itertools.pairwise(points):
        t = t0
        while t < t1:
            h = int(t // HOUR)
            if h >= hours:
                break
            step = min(t1, (h + 1) * HOUR) - t
            sums[h] += value * step
            t += step
    return [h + 0.5 for h in range(hours)], [s / HOUR for s in sums]


def _plots(out: Path, summary: Mapping[str, Any], results: Mapping[str, SimResult]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    end = max((t for r in results.values() for t, _ in r.busy[-1:]), default=0.0)

    def timeline(name: str, series: str, ylabel: str, title: str, share: bool) -> None:
        fig, ax = plt.subplots(figsize=(10, 4))
        for policy, result in results.items():
            x, y = _hourly(getattr(result, series), end)
            scale = max(result.gpus, 1) if share else 1
            ax.plot([h / 24 for h in x], [v / scale for v in y], label=policy, lw=1)
        ax.set(xlabel="day", ylabel=ylabel, title=title)
        if share:
            ax.set_ylim(0, 1.05)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)

    timeline("utilization.png", "busy", "GPUs in use (share)", "GPU utilisation, hourly mean", True)
    timeline("queue.png", "queued", "jobs waiting", "Queue length, hourly mean", False)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, result in results.items():
        waits = sorted(max(o.queue_delay or 0.0, 1.0) for o in result.outcomes if o.end)
        if waits:
            n = len(waits)
            ax.step(waits, [(i + 1) / n for i in range(n)], where="post", label=policy, lw=1)
    ax.set_xscale("log")
    ax.set(xlabel="queueing delay (s, 1 s and less at 1)", ylabel="share of jobs")
    ax.set_title("Queueing delay, CDF")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "waits.png", dpi=110)
    plt.close(fig)
    names.append("waits.png")

    policies = list(results)
    tenants = sorted({t for p in policies for t in summary["policies"][p]["tenants"]})
    if tenants:
        fig, ax = plt.subplots(figsize=(max(7, len(tenants) * 0.9), 4.5))
        width = 0.8 / (len(policies) + 1)
        for i, policy in enumerate(policies):
            blocks = summary["policies"][policy]["tenants"]
            values = [blocks.get(t, {}).get("share_of_gpu_time", 0.0) for t in tenants]
            ax.bar([k + i * width for k in range(len(tenants))], values, width, label=policy)
        first = summary["policies"][policies[0]]["tenants"]
        entitled = [first.get(t, {}).get("entitlement", 0.0) for t in tenants]
        ax.bar(
            [k + len(policies) * width for k in range(len(tenants))],
            entitled,
            width,
            label="entitlement",
            color="black",
            alpha=0.35,
        )
        ax.set_xticks([k + 0.4 for k in range(len(tenants))], tenants, rotation=45, ha="right")
        ax.set(ylabel="share of GPU time", title="Tenants: share of GPU time vs entitlement")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "shares.png", dpi=110)
        plt.close(fig)
        names.append("shares.png")
    return names


def _table(summary: Mapping[str, Any]) -> str:
    head = (
        "<tr><th>policy</th><th>mean JCT (h)</th><th>p99 JCT (h)</th>"
        "<th>mean wait (h)</th><th>p99 wait (h)</th><th>GPU utilisation</th>"
        "<th>fragmentation</th><th>Jain fairness</th><th>preemptions</th><th>makespan (d)</th>"
        "</tr>"
    )
    rows = []
    for policy, n in summary["policies"].items():
        rows.append(
            f"<tr><td>{html.escape(policy)}</td>"
            f"<td>{n['jct_s']['mean'] / HOUR:.2f}</td><td>{n['jct_s']['p99'] / HOUR:.2f}</td>"
            f"<td>{n['queueing_delay_s']['mean'] / HOUR:.3f}</td>"
            f"<td>{n['queueing_delay_s']['p99'] / HOUR:.2f}</td>"
            f"<td>{n['gpu_utilization']:.1%}</td><td>{n.get('fragmentation', 0.0):.1%}</td>"
            f"<td>{n['jain_fairness']:.3f}</td>"
            f"<td>{n['preemptions']}</td><td>{n['makespan_s'] / 86400:.1f}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def write_report(
    out: Path, summary: Mapping[str, Any], results: Mapping[str, SimResult]
) -> list[str]:
    """The plots and ``report.html`` in ``out``; the files written."""
    images = _plots(out, summary, results) if can_plot() else []
    figures = "".join(
        f'<figure><img alt="{name}" src="data:image/png;base64,'
        f'{base64.b64encode((out / name).read_bytes()).decode()}"></figure>'
        for name in images
    )
    note = "" if images else "<p>Plots need matplotlib: pip install 'phalanx[sim]'.</p>"
    title = f"phalanx sim: {summary['trace']} on {summary['cluster']}"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; max-width: 70rem; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{summary["jobs"]:,} jobs, {summary["cluster_gpus"]:,} GPUs, time limits
{html.escape(summary["time_limit"])}.</p>
{_table(summary)}
{note}{figures}
</body></html>
"""
    (out / "report.html").write_text(page, encoding="utf-8")
    return [*images, "report.html"]
