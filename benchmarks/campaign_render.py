"""``campaign.json`` of :mod:`benchmarks.gpu_campaign` as Markdown tables.

    python -m benchmarks.campaign_render DIR/campaign.json [--docs docs/gpu.md]

Prints the tables, or with ``--docs`` replaces the part of that page between
``<!-- campaign:begin -->`` and ``<!-- campaign:end -->`` with them.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from rljax import stats

BEGIN, END = "<!-- campaign:begin -->", "<!-- campaign:end -->"


def _n(value, digits: int = 0) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}"


def _machine(m: dict) -> list[str]:
    v = m.get("versions", {})
    rows = [("backend, devices", f"{m.get('backend')}: {', '.join(m.get('devices', []))}"),
            ("nvidia-smi", m.get("nvidia_smi") or "none"),
            ("CPUs (usable)", f"{m.get('cpu_count')} ({m.get('cpus_usable')})"),
            ("python", m.get("python")),
            ("versions", ", ".join(f"{k} {x}" for k, x in v.items() if x)),
            ("matmul precision", m.get("matmul_precision")),
            ("rljax commit", m.get("rljax_commit"))]
    return ["| | |", "| --- | --- |"] + [f"| {k} | {x} |" for k, x in rows]


def _tests(t: dict) -> list[str]:
    if "tests" not in t:
        return [f"`{t.get('command')}`: {t.get('summary')} after {t.get('wall_s')} s"]
    line = (f"`{t.get('command')}`: {t.get('passed', '?')} passed, {t.get('failures', '?')} "
            f"failed, {t.get('errors', '?')} errors, {t.get('skipped', '?')} skipped in "
            f"{t.get('wall_s')} s")
    failed = [f"- failed: `{name}`" for name in t.get("failed_tests", [])]
    return [line, *failed]


def _throughput(t: dict) -> list[str]:
    rows = ["| family | preset | envs | env-only steps/s | training steps/s | ratio |",
            "| --- | --- | --- | --- | --- | --- |"]
    for family, r in t.get("families", {}).items():
        if "error" in r or "skipped" in r:
            rows.append(f"| {family} | {r['preset']} | | {r.get('error') or r.get('skipped')}"
                        " | | |")
            continue
        rows.append(f"| {family} | `{r['preset']}` | {r['num_envs']} | {_n(r['env_only_sps'])} "
                    f"| {_n(r['train_sps'])} | {_n(r['ratio'], 2)} |")
    return rows


def _members(t: dict) -> list[str]:
    rows = ["| preset | seeds | total env steps/s | vs one seed | update GFLOP/s |",
            "| --- | --- | --- | --- | --- |"]
    for preset, r in t.get("presets", {}).items():
        if "error" in r:
            rows.append(f"| `{preset}` | | {r['error']} | | |")
            continue
        for count, sps in r["total_sps_by_seeds"].items():
            rows.append(f"| `{preset}` | {count} | {_n(sps)} | {_n(r['vs_one_seed'][count], 2)}x "
                        f"| {_n(r['update_gflops_by_seeds'][count], 1)} |")
    return rows


def _seeds_iqm(summary: dict) -> str:
    """IQM over the seeds' final 100-episode means, with its 95% bootstrap interval."""
    finals = [s.get("final_return_mean") for s in summary.get("seeds", [])]
    finals = [f for f in finals if f is not None]
    if len(finals) < 2:
        return ""
    est = stats.interval(np.asarray(finals, float)[:, None], stats.iqm)
    return f"{float(est.point):.1f} [{float(est.low):.1f}, {float(est.high):.1f}]"


def _learning(t: dict) -> list[str]:
    rows = ["| run | seeds | env steps per seed | wall time s | steps/s (all seeds) "
            "| final 100-episode mean | IQM over seeds [95% CI] | solved at |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for preset, r in t.get("runs", {}).items():
        if "skipped" in r:
            rows.append(f"| `{preset}` | | skipped: {r['skipped']} | | | | | |")
            continue
        s = r.get("summary") or {}
        note = " (stopped at its time limit; resumable)" if r.get("stopped_at_time_limit") else ""
        rows.append(f"| `{r['command']}`{note} | {s.get('num_seeds', 1)} "
                    f"| {_n(s.get('env_steps'))} | {r['wall_s']} "
                    f"| {_n(s.get('sps'))} | {_n(s.get('final_return_mean'), 1)} "
                    f"| {_seeds_iqm(s)} | {_n(s.get('solved_at_step'))} |")
    if t.get("report"):
        rows.append("")
        rows.append(f"`rljax report` of these runs: `{t['report']}`")
    return rows


SECTIONS = {"machine": ("Machine", _machine), "tests": ("Tests marked backend", _tests),
            "throughput": ("Throughput", _throughput),
            "members": ("Many members in one program", _members),
            "learning": ("Learning runs", _learning)}


def render_markdown(campaign: dict) -> str:
    """The whole campaign as Markdown: a status table, then one section per stage."""
    backend = ((campaign["stages"].get("machine") or {}).get("result") or {}).get("backend")
    label = {"cpu": "**CPU** (not a GPU run)", None: "unknown backend"}.get(backend, backend)
    out = [f"Campaign of {campaign['started']}, budget {campaign['budget_s']:.0f} s"
           f"{' (smoke: toy sizes)' if campaign.get('smoke') else ''}, on {label}.", "",
           "| stage | status | wall time s |", "| --- | --- | --- |"]
    for name, s in campaign["stages"].items():
        out.append(f"| {name} | {s['status']} | {s.get('wall_s', '')} |")
    for name, s in campaign["stages"].items():
        if not s.get("result") or name not in SECTIONS:
            continue
        title, render = SECTIONS[name]
        note = [f"_{s['note']}_", ""] if s.get("note") else []
        out += ["", f"#### {title}", "", *note, *render(s["result"])]
    return "\n".join(out) + "\n"


def into_page(page: str, tables: str) -> str:
    """``page`` with its campaign block replaced by ``tables``."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"the page has no {BEGIN} ... {END} block to replace")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{tables}{END}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", help="a campaign.json")
    parser.add_argument("--docs", help="a page with a campaign block to rewrite")
    args = parser.parse_args(argv)
    with open(args.campaign) as f:
        tables = render_markdown(json.load(f))
    if not args.docs:
        sys.stdout.write(tables)
        return 0
    with open(args.docs) as f:
        page = f.read()
    with open(args.docs, "w") as f:
        f.write(into_page(page, tables))
    print(f"rewrote the campaign tables in {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
