"""The thread-pool rule of docs/scaling.md ("Many seeds and the CPU thread pool") checked
in alternating pairs.

The page says that a preset's one-thread CPU pool is faster up to
``rljax.run.presets.ONE_THREAD_MEMBERS`` members and JAX's default pool (one thread per
CPU) above. XLA's pool is sized once per process, so this script starts two worker
processes, one per pool, each compiling the many-seeds programs of
``benchmarks.throughput`` (``seeds-gymnax``: gymnax-cartpole-ppo with ``count`` seeds
vmapped in one program) for every count. Then, ``--pairs`` times, for each count it times
a round on one thread and then one on the default pool (ABAB...), so the machine's load
drift lands in both halves of a pair alike. The verdict for a count is the median of its
per-pair ratios (one thread / default pool), reported with their spread (lowest, highest);
a round runs chunks for at least ``MIN_SECONDS``.
Before each pair it waits up to ``--wait`` seconds for the 1-minute load average to fall
below ``--max-load`` and records the load before and after the pair. It writes
``benchmarks/results/cpu_threads_seeds.json``.

The verdict. On this 2-core machine a pair's ratio moves by +-20% even when the machine is
idle, so a median a few percent from 1 says nothing; a count has a winner only when its
pairs favour one pool beyond chance: a one-sided sign test, the probability that at least
that many of the pairs favour it were the pools level, below ``SIGNIFICANCE`` (5 of 5
pairs, 8 of 9). The script exits 1 when a count has a winner on the wrong side of
``ONE_THREAD_MEMBERS`` (the default pool up to it, one thread above it); counts without a
winner are level and fit either side. ``--analyze FILE ...`` gives the verdict of runs
written before.

    python -m benchmarks.scaling_docs --pairs 5 --seeds 1 16 32 64 128 256

Run it at normal priority (not under ``nice``): the two pools are to compete with the
machine's other work alike. The scaling matrix (``benchmarks/scaling_matrix.py``) runs the
page's training commands.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

from benchmarks.common import machine, median, write_results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5, help="alternating pairs of rounds")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 16, 32, 64, 128, 256],
                   help="counts of seeds in one program")
    p.add_argument("--max-load", type=float, default=3.0,
                   help="wait before a pair while the 1-minute load average is at or above")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds to wait for that at most (then the pair runs anyway)")
    p.add_argument("--analyze", nargs="+", metavar="FILE", default=None,
                   help="the verdict of results files written before, instead of timing")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    return p


# A count's pairs name a winner when the sign test's probability is below this.
SIGNIFICANCE = 0.05


def sign_test(wins: int, pairs: int) -> float:
    """The probability of at least ``wins`` of ``pairs`` fair coin tosses coming up
    heads: how likely that many pairs favour one pool were the two level."""
    return sum(math.comb(pairs, k) for k in range(wins, pairs + 1)) / 2 ** pairs


def verdict(ratios: dict[str, list[float]], threshold: int) -> tuple[dict, list[str]]:
    """Per count of seeds, the median of the per-pair ratios (one thread / default pool),
    their lowest and highest, and the winner: ``one thread`` or ``default pool`` when the
    sign test gives its count of pairs won a probability below :data:`SIGNIFICANCE`,
    ``level`` otherwise. Also the counts whose winner contradicts the page (one thread up
    to ``threshold`` members, the default pool above)."""
    summary, wrong = {}, []
    for count, values in ratios.items():
        mid, pairs = median(values), len(values)
        p_one = sign_test(sum(v > 1 for v in values), pairs)
        p_pool = sign_test(sum(v < 1 for v in values), pairs)
        winner = ("one thread" if p_one < SIGNIFICANCE else
                  "default pool" if p_pool < SIGNIFICANCE else "level")
        summary[count] = {"median": mid, "low": min(values), "high": max(values),
                          "winner": winner, "sign_test_p": min(p_one, p_pool)}
        if winner == ("default pool" if int(count) <= threshold else "one thread"):
            wrong.append(f"{count} seeds: {winner} faster, one thread / default pool "
                         f"{mid:.3f} (pairs {min(values):.3f}-{max(values):.3f}, sign test "
                         f"p={min(p_one, p_pool):.3f})")
    return summary, wrong


def report(ratios: dict[str, list[float]], threshold: int) -> int:
    """Prints each count's verdict and whether it fits the page; 0 if it does, else 1."""
    summary, wrong = verdict(ratios, threshold)
    for count, s in summary.items():
        print(f"{count:>4} seeds: one thread / default pool, median of {len(ratios[count])} "
              f"pairs {s['median']:.3f} (pairs {s['low']:.3f}-{s['high']:.3f}): "
              f"{s['winner']} (sign test p={s['sign_test_p']:.3f})")
    if wrong:
        print(f"not as docs/scaling.md says (one thread up to {threshold} members, the "
              "default pool above): " + "; ".join(wrong))
        return 1
    print(f"as docs/scaling.md says: no count has a winner against one thread up to "
          f"{threshold} members and the default pool above")
    return 0


# A round of one count runs chunks for at least this long (one chunk of 1 seed is ~0.1 s).
MIN_SECONDS = 2.0


def _worker(threads: int, counts: list[int]) -> int:
    """Compiles every count's program on a pool of ``threads``, says ``ready``, then times
    a round of the count read from each line of stdin and answers its env steps/s."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to stderr, not into the answers
    from rljax.cpu_threads import set_cpu_threads

    set_cpu_threads(threads)
    from benchmarks.throughput import SEEDS_CHUNK_STEPS, SEEDS_PRESET, seed_rates

    rates, _ = seed_rates(SEEDS_PRESET, SEEDS_CHUNK_STEPS, tuple(counts))
    print("ready", file=answers, flush=True)
    for line in sys.stdin:  # chunks for at least MIN_SECONDS: their total steps / time
        per_step, start = [], time.perf_counter()
        while not per_step or time.perf_counter() - start < MIN_SECONDS:
            per_step.append(1 / rates[line.strip()]())
        print(len(per_step) / sum(per_step), file=answers, flush=True)
    return 0


def _ask(worker: subprocess.Popen, line: str | None = None) -> str:
    if line is not None:
        worker.stdin.write(line + "\n")
        worker.stdin.flush()
    answer = worker.stdout.readline()
    if not answer:
        raise SystemExit(f"a worker process ended (exit {worker.wait()})")
    return answer.strip()


def _pairs(args) -> tuple[dict, list[dict]]:
    """``--pairs`` alternating pairs: ({count: {pool: [steps/s per pair]}}, loads)."""
    pools = {"one_thread": 1, "default_pool": 0}
    workers = {name: subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scaling_docs", "--worker", str(threads),
         "--seeds", *map(str, args.seeds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True) for name, threads in pools.items()}
    sps = {str(c): {name: [] for name in pools} for c in args.seeds}
    loads = []
    try:
        for worker in workers.values():
            assert _ask(worker) == "ready"
        for pair in range(args.pairs):
            start = time.monotonic()
            while os.getloadavg()[0] >= args.max_load and time.monotonic() - start < args.wait:
                time.sleep(5)
            loads.append({"waited_s": round(time.monotonic() - start),
                          "before": os.getloadavg()})
            for count in sps:
                for name, worker in workers.items():
                    sps[count][name].append(float(_ask(worker, count)))
            loads[-1]["after"] = os.getloadavg()
            print(f"pair {pair + 1}: load {loads[-1]['before'][0]:.2f} -> "
                  f"{loads[-1]['after'][0]:.2f}; one thread / default pool " + ", ".join(
                      f"{c}: {v['one_thread'][-1] / v['default_pool'][-1]:.3f}"
                      for c, v in sps.items()), flush=True)
    finally:
        for worker in workers.values():
            worker.stdin.close()
            worker.wait()
    return sps, loads


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.worker is not None:
        return _worker(args.worker, args.seeds)
    from rljax.run.presets import ONE_THREAD_MEMBERS

    if args.analyze:
        status = 0
        for path in args.analyze:
            with open(path) as f:
                stored = json.load(f)
            print(f"{path}: {stored['what']}")
            status |= report(stored["ratios_by_pair"], ONE_THREAD_MEMBERS)
        return status
    sps, loads = _pairs(args)
    ratios = {c: [a / b for a, b in zip(v["one_thread"], v["default_pool"], strict=True)]
              for c, v in sps.items()}
    summary, wrong = verdict(ratios, ONE_THREAD_MEMBERS)
    write_results("cpu_threads_seeds", {
        "what": "python -m benchmarks.scaling_docs " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "machine": machine(), "one_thread_members": ONE_THREAD_MEMBERS,
        "as_the_page_says": not wrong, "one_thread_vs_default_pool": summary,
        "ratios_by_pair": ratios, "sps_by_pair": sps, "load_average_by_pair": loads})
    return report(ratios, ONE_THREAD_MEMBERS)


if __name__ == "__main__":
    sys.exit(main())
