"""The text of ``rljax report``: its report dict as Markdown tables."""

from __future__ import annotations

import math

from rljax import stats


def _ci(est: list[float], digits: int = 1) -> str:
    point, low, high = est
    if math.isnan(low):
        return f"{point:.{digits}f} (1 seed, no CI)"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def markdown(report: dict) -> str:
    """The report as Markdown tables (printed as it is)."""
    level = f"{report['level']:.0%}"
    lines = [f"Final {report['metric']} per run: mean, median and IQM over seeds with "
             f"{level} stratified bootstrap intervals ({report['reps']} resamples).", "",
             "| configuration | task | seeds | mean | median | IQM | greedy IQM | env steps "
             "| wall |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in report["tasks"]:
        greedy = _ci(row["eval"]["iqm"]) if "eval" in row else ""
        wall = f"{row['wall_time_s']:,.0f} s" if row["wall_time_s"] is not None else ""
        lines.append(f"| {row['label']} | {row['task']} | {row['seeds']} | "
                     f"{_ci(row['mean'])} | {_ci(row['median'])} | {_ci(row['iqm'])} | "
                     f"{greedy} | {row['env_steps']:,} | {wall} |")
    if "normalized" in report:
        lines += ["", "Normalised scores (0: random policy, 1: reference), aggregated "
                  "across each configuration's tasks:", "",
                  "| configuration | tasks | seeds | IQM | mean | median | optimality gap |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in report["normalized"]:
            lines.append(f"| {row['label']} | {', '.join(row['tasks'])} | {row['seeds']} | "
                         + " | ".join(_ci(row[m], 3) for m in stats.AGGREGATES) + " |")
        lines += ["", "Scores used: " + "; ".join(
            f"{t} random {r:g}, reference {s:g}" for t, (r, s) in report["scores"].items())]
    if "compare" in report:
        c = report["compare"]
        lines += ["", f"P({c['a']} > {c['b']}) on {', '.join(c['tasks'])}: "
                  f"{_ci(c['probability_of_improvement'], 3)}"]
    return "\n".join(lines) + "\n"
