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
``benchmarks/results/cpu_threads_seeds.json`` and exits 1 unless the median ratio is above
1 at every count up to ``ONE_THREAD_MEMBERS`` and below 1 above it.

    python -m benchmarks.scaling_docs --pairs 5 --seeds 1 16 32 64 128 256

Run it at normal priority (not under ``nice``): the two pools are to compete with the
machine's other work alike. The scaling matrix (``benchmarks/scaling_matrix.py``) runs the
page's training commands.
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    return p


def verdict(ratios: dict[str, list[float]], threshold: int) -> tuple[dict, list[str]]:
    """Per count of seeds, the median of the per-pair ratios (one thread / default pool),
    their lowest and highest and whether every pair had the same winner; and the counts
    whose median winner is not the page's (one thread up to ``threshold`` members)."""
    summary, wrong = {}, []
    for count, values in ratios.items():
        mid = median(values)
        summary[count] = {"median": mid, "low": min(values), "high": max(values),
                          "same_winner_every_pair": min(values) > 1 or max(values) < 1}
        if (mid > 1) != (int(count) <= threshold):
            wrong.append(f"{count} seeds: one thread / default pool {mid:.3f} "
                         f"(pairs {min(values):.3f}-{max(values):.3f})")
    return summary, wrong


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
    for count, s in summary.items():
        print(f"{count:>4} seeds: one thread / default pool, median of {args.pairs} pairs "
              f"{s['median']:.3f} (pairs {s['low']:.3f}-{s['high']:.3f}"
              f"{'' if s['same_winner_every_pair'] else ', no consistent winner'})")
    if wrong:
        print(f"not as docs/scaling.md says (one thread faster up to {ONE_THREAD_MEMBERS} "
              "members, the default pool above): " + "; ".join(wrong))
        return 1
    print(f"as docs/scaling.md says: one thread faster up to {ONE_THREAD_MEMBERS} members, "
          "the default pool above")
    return 0


if __name__ == "__main__":
    sys.exit(main())
