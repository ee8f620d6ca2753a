"""The results table of docs/results.md, regenerated from the run records stored in
benchmarks/results/ (one row per preset family: IQM over seeds of the final 100-episode mean
return with its 95% stratified bootstrap interval, the random policy's score, the published
figure at its budget where there is one, and the program's wall time).

    python -m benchmarks.results_table            # print the table
    python -m benchmarks.results_table --write    # and put it at the top of docs/results.md
    python -m benchmarks.results_table --store RUN_DIR NAME
        # copy a run's records (config, summary, metrics; not checkpoints) into
        # benchmarks/results/table/NAME

A row whose records are not stored says "not run here" and gives the command that makes
them; nothing in the table is typed in by hand but the published figures and their sources.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
from typing import NamedTuple

import numpy as np

from rljax import stats
from rljax.run.reference_scores import SCORES
from rljax.run.report import build

ROOT = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(ROOT, "results")
RANDOM_SCORES = os.path.join(RESULTS, "random_scores.json")  # benchmarks.random_baseline
DOC = os.path.join(os.path.dirname(ROOT), "docs", "results.md")
START, END = "<!-- results-table -->", "<!-- /results-table -->"
KEEP = ("config.json", "summary.json", "metrics.jsonl")

BLINES = "gymnax-blines PPO, 10M"
# The GPU campaign's learning runs: their summaries (per-seed finals) are what came back.
GPU_CAMPAIGN = "campaign_gpu/campaign.json"
CLEANRL = "CleanRL, Breakout-v5 10M"
# Why the rows without records were not run on the 2-core CPU (the arithmetic is in
# docs/results.md, "Not run here").
GPU_SIZED = "8 x 10M env steps is 1.6-9 h of this CPU per row; a GPU row"
ATARI = "8 x 10M env steps is 7.5 h of this CPU's env-only stepping alone; a GPU row"
# Fujimoto et al. 2018, Table 1: the noise-free policy's best average return over 10 seeds
# within 1M steps, on Reacher-v1.
TD3_TABLE = "TD3 paper's table"


class Row(NamedTuple):
    family: str
    task: str
    records: str  # under benchmarks/results/
    command: str
    published: str = ""
    why: str = ""  # why a row without records was not run here (docs/results.md details it)


def _minatar(game: str, preset: str, figure: str = "") -> list[Row]:
    env = f"gymnax:{game}-MinAtar"
    rows = []
    for algo in ("ppo", "pqn"):
        name = f"minatar-{preset}-{algo}"
        flag = f" --env {env}" if preset == "breakout" and game != "Breakout" else ""
        rows.append(Row(f"MinAtar {game} {algo.upper()}, 10M", env, f"table/{name}-{game.lower()}",
                        f"rljax train {name}{flag} --seeds 8",
                        f"{figure} ({BLINES})" if figure and algo == "ppo" else "", GPU_SIZED))
    return rows


def _twins(family: str, task: str, envpool: tuple[str, str], gymnax: tuple[str, str],
           budget: int) -> list[Row]:
    """A family's envpool row and its gymnax twin; each side is ``(records name, what
    follows rljax train)``, 8 seeds evaluated greedily at the end of ``budget``."""
    return [Row(family, t, f"table/{name}", f"rljax train {args} --seeds 8 --eval-every {budget}")
            for t, (name, args) in ((task, envpool), (f"gymnax:{task}", gymnax))]


ROWS: list[Row] = [
    *_twins("CartPole PPO", "CartPole-v1", ("cartpole-ppo", "cartpole-ppo"),
            ("gymnax-cartpole-ppo", "gymnax-cartpole-ppo"), 500_000),
    *_twins("CartPole PQN", "CartPole-v1", ("cartpole-pqn", "cartpole-pqn"),
            ("gymnax-cartpole-pqn", "gymnax-cartpole-pqn"), 500_000),
    *_twins("CartPole DQN", "CartPole-v1", ("cartpole-dqn", "cartpole-dqn"),
            ("gymnax-cartpole-dqn", "cartpole-dqn --env gymnax:CartPole-v1"), 300_000),
    *_twins("CartPole A2C", "CartPole-v1", ("cartpole-a2c", "cartpole-a2c"),
            ("gymnax-cartpole-a2c", "cartpole-a2c --env gymnax:CartPole-v1"), 500_000),
    *_twins("Acrobot PPO", "Acrobot-v1", ("acrobot-ppo", "cartpole-ppo --env Acrobot-v1"),
            ("gymnax-acrobot-ppo", "gymnax-cartpole-ppo --env gymnax:Acrobot-v1"), 500_000),
    Row("MinAtar Breakout PPO, 10M", "gymnax:Breakout-MinAtar", "native/minatar-breakout-ppo",
        "rljax train minatar-breakout-ppo --seeds 8", f"28 ({BLINES})"),
    Row("MinAtar Breakout PPO, 10M, H200", "gymnax:Breakout-MinAtar",
        f"{GPU_CAMPAIGN}#minatar-breakout-ppo", "python -m benchmarks.gpu_campaign (docs/gpu.md)",
        f"28 ({BLINES})"),
    Row("MinAtar Breakout PQN, 10M", "gymnax:Breakout-MinAtar", "native/minatar-breakout-pqn",
        "rljax train minatar-breakout-pqn --seeds 8"),
    Row("MinAtar Breakout PQN, H200 (cut at its time share)", "gymnax:Breakout-MinAtar",
        f"{GPU_CAMPAIGN}#minatar-breakout-pqn", "python -m benchmarks.gpu_campaign (docs/gpu.md)"),
    Row("MinAtar Breakout PQN, 1M", "gymnax:Breakout-MinAtar", "table/minatar-breakout-pqn-1m",
        "rljax train minatar-breakout-pqn --total-steps 1000000 --seeds 8 "
        "--eval-every 1000000"),
    Row("MinAtar Asterix PQN, 1M", "gymnax:Asterix-MinAtar", "table/minatar-asterix-pqn-1m",
        "rljax train minatar-asterix-pqn --total-steps 1000000 --seeds 8 "
        "--eval-every 1000000"),
    Row("MinAtar Freeway PQN, 1M", "gymnax:Freeway-MinAtar", "table/minatar-freeway-pqn-1m",
        "rljax train minatar-freeway-pqn --total-steps 1000000 --seeds 8 "
        "--eval-every 1000000"),
    Row("MinAtar SpaceInvaders PQN, 1M", "gymnax:SpaceInvaders-MinAtar",
        "table/minatar-space-invaders-pqn-1m",
        "rljax train minatar-space-invaders-pqn --total-steps 1000000 --seeds 8 "
        "--eval-every 1000000"),
    Row("MinAtar Seaquest PQN, 1M", "gymnax:Seaquest-MinAtar", "table/minatar-seaquest-pqn-1m",
        "rljax train minatar-breakout-pqn --env gymnax:Seaquest-MinAtar --total-steps 1000000 "
        "--seeds 8 --eval-every 1000000"),
    *[Row(f"MinAtar {game} PPO, 1M", f"gymnax:{game}-MinAtar", f"table/minatar-{name}-ppo-1m",
          f"rljax train minatar-{preset}-ppo{flag} --total-steps 1000000 --seeds 8 "
          "--eval-every 1000000")
      for game, name, preset, flag in (
          ("Breakout", "breakout", "breakout", ""), ("Asterix", "asterix", "asterix", ""),
          ("Freeway", "freeway", "freeway", ""),
          ("SpaceInvaders", "space-invaders", "space-invaders", ""),
          ("Seaquest", "seaquest", "breakout", " --env gymnax:Seaquest-MinAtar"))],
    *_minatar("Asterix", "asterix", "15"),
    *_minatar("Freeway", "freeway", "58"),
    *_minatar("SpaceInvaders", "space-invaders", "131"),
    *_minatar("Seaquest", "breakout"),
    # Three seeds, not 8: 8 x 1M env steps is 2.9 h (TD3) and 10 h (SAC) of this CPU, and
    # SAC's 3 seeds stop at 300k for the same reason (docs/results.md, "Not run here").
    Row("Reacher SAC, 300k (3 seeds)", "Reacher-v5", "table/reacher-sac-300k",
        "rljax train reacher-sac --seeds 3 --total-steps 300000 --eval-every 20000",
        f"-4.4 (SAC at 1M, {TD3_TABLE})"),
    Row("Reacher TD3, 1M (3 seeds)", "Reacher-v5", "table/reacher-td3",
        "rljax train reacher-td3 --seeds 3 --eval-every 20000", f"-3.6 (TD3 at 1M, {TD3_TABLE})"),
    Row("Breakout (Atari) PPO, 10M", "Breakout-v5", "table/breakout-ppo",
        "rljax train breakout-ppo --seeds 8", f"430.1 (PPO envpool-XLA; {CLEANRL})", ATARI),
    Row("Breakout (Atari) DQN, 10M", "Breakout-v5", "table/breakout-dqn",
        "rljax train breakout-dqn --seeds 8", f"377.8 (DQN JAX), 448.6 (C51 JAX); {CLEANRL}",
        ATARI),
    Row("Breakout (Atari) PQN, 10M", "Breakout-v5", "table/breakout-pqn",
        "rljax train breakout-pqn --seeds 8", f"400.4 (PQN-LSTM; {CLEANRL})", ATARI),
    Row("Craftax (full) PPO / PPO-RNN, 1M", "craftax:Craftax-Symbolic-v1", "table/craftax-1m",
        "(no rljax preset for the full Craftax yet)",
        "PPO 2.2%, PPO-RNN 2.3% of the maximum return (Craftax paper, Craftax-1M)"),
]


@functools.cache
def _measured() -> dict:
    with open(RANDOM_SCORES) as f:
        return json.load(f)


def random_score(task: str) -> str:
    """The random policy's mean return: measured here (benchmarks.random_baseline), else
    the published one rljax normalises with."""
    if task in _measured():
        return f"{_measured()[task]['return_mean']:.2f}"
    shipped = SCORES.get(task)
    if shipped is None:
        return "not measured"
    return f"{shipped.random:g}" + (" (published)" if "Mnih" in shipped.random_source else "")


def _ci(est: list[float]) -> str:
    point, low, high = est
    return f"{point:.1f}" if low != low else f"**{point:.1f}** [{low:.1f}, {high:.1f}]"


def row_cells(row: Row) -> list[str]:
    """The row's cells: family, task, seeds and steps, IQM [CI], greedy IQM, random,
    published, wall time, command."""
    random = random_score(row.task)
    cells = [row.family, f"`{row.task}`"]
    path = os.path.join(RESULTS, row.records)
    if "#" in row.records:
        return cells + _campaign_cells(row)
    if not os.path.isdir(path):
        missing = f"not run here: {row.why}" if row.why else "not run here"
        return cells + ["", missing, "", random, row.published, "", f"`{row.command}`"]
    report, _, _ = build([path], allow_one_seed=True)
    (t,) = report["tasks"]
    greedy = _ci(t["eval"]["iqm"]) if "eval" in t else ""
    one = " (1 seed: no CI)" if t["seeds"] == 1 else ""
    wall = f"{t['wall_time_s']:,.0f} s" if t["wall_time_s"] is not None else ""
    return cells + [f"{t['seeds']} x {t['env_steps']:,}", _ci(t["iqm"]) + one, greedy,
                    random, row.published, wall,
                    f"`{row.command}`"]


def _campaign_cells(row: Row) -> list[str]:
    """A row from a campaign's learning run (``FILE#preset``): the IQM over its seeds'
    final 100-episode means, as the stored summary gives them."""
    file, preset = row.records.split("#")
    with open(os.path.join(RESULTS, file)) as f:
        run = json.load(f)["stages"]["learning"]["result"]["runs"][preset]
    s = run["summary"]
    finals = np.asarray([m["final_return_mean"] for m in s["seeds"]], float)[:, None]
    est = stats.interval(finals, stats.iqm)
    return [f"{s['num_seeds']} x {s['env_steps']:,}",
            _ci([float(est.point), float(est.low), float(est.high)]), "",
            random_score(row.task), row.published, f"{run['wall_s']:,.0f} s",
            f"`{row.command}`"]


def table() -> str:
    lines = ["| preset family | task | seeds x env steps | IQM [95% CI] | greedy IQM | random "
             "| published | wall | command |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in ROWS]
    return "\n".join(lines) + "\n"


def store(run_dir: str, name: str) -> str:
    """Copies a run's config, summary and metrics (its members' too) into
    benchmarks/results/table/NAME; checkpoints, plots and event files stay behind."""
    dest = os.path.join(RESULTS, "table", name)
    for folder, _, files in os.walk(run_dir):
        rel = os.path.relpath(folder, run_dir)
        if rel.split(os.sep)[0] in ("checkpoint", "checkpoint.superseded"):
            continue
        for f in files:
            if f in KEEP:
                os.makedirs(os.path.join(dest, rel), exist_ok=True)
                shutil.copyfile(os.path.join(folder, f), os.path.join(dest, rel, f))
    return dest


def write_doc(text: str) -> None:
    with open(DOC) as f:
        doc = f.read()
    if START not in doc:
        raise SystemExit(f"{DOC} has no {START} ... {END} block")
    new = re.sub(re.escape(START) + ".*?" + re.escape(END),
                 lambda _: f"{START}\n{text}{END}", doc, flags=re.S)
    with open(DOC, "w") as f:
        f.write(new)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/results.md")
    parser.add_argument("--store", nargs=2, metavar=("RUN_DIR", "NAME"),
                        help="copy a run's records into benchmarks/results/table/NAME")
    args = parser.parse_args(argv)
    if args.store:
        print(store(*args.store))
        return
    text = table()
    print(text, end="")
    if args.write:
        write_doc(text)


if __name__ == "__main__":
    main()
