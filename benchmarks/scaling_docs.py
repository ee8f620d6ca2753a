"""The measuring command of docs/scaling.md that no test runs, run as the page gives it and
checked against what the page says of it.

docs/scaling.md ("Many seeds and the CPU thread pool") times gymnax-cartpole-ppo with 1,
16, 64 and 256 seeds in one program, with XLA's CPU pool at one thread and then at JAX's
default (one per CPU), back to back, and says that one thread is the faster pool up to
32 members and the default pool above (``rljax.run.presets.ONE_THREAD_MEMBERS``). This
script runs that command (read from the page) with ``--cpu-threads 1`` and then ``0``,
writes both runs' figures and the load average to
``benchmarks/results/cpu_threads_seeds.json``, leaves ``benchmarks/results/throughput.json``
as it was (the command writes its figures there too, and other pages cite that file),
and exits 1 unless every count of seeds up to ``ONE_THREAD_MEMBERS`` is faster on one
thread and every count above it faster on the default pool.

    nice -n 19 python -m benchmarks.scaling_docs

The scaling matrix (``benchmarks/scaling_matrix.py``) runs the page's training commands.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

from benchmarks.common import RESULTS_DIR, machine, write_results

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "scaling.md"


def doc_command() -> list[str]:
    """The page's command, up to its ``--cpu-threads`` (which this script sets)."""
    found = re.search(r"`python -m (benchmarks\.throughput [^`]*?)--cpu-threads 1`",
                      DOC.read_text())
    if not found:
        raise SystemExit(f"{DOC} names no `python -m benchmarks.throughput ... "
                         "--cpu-threads 1` command")
    return [sys.executable, "-m", *shlex.split(found.group(1))]


def verdict(one: dict, default: dict, threshold: int) -> list[str]:
    """The counts of seeds where the faster pool is not the one the page says."""
    wrong = []
    for count, sps in one.items():
        one_faster = sps > default[count]
        if one_faster != (int(count) <= threshold):
            wrong.append(f"{count} seeds: one thread {sps:,.0f}, default pool "
                         f"{default[count]:,.0f} env steps/s")
    return wrong


def main() -> int:
    from rljax.run.presets import ONE_THREAD_MEMBERS

    command = doc_command()
    kept = pathlib.Path(RESULTS_DIR, "throughput.json")
    before = kept.read_bytes() if kept.exists() else None
    runs, loads = {}, {}
    try:
        for name, threads in (("one_thread", 1), ("default_pool", 0)):
            loads[name] = {"before": os.getloadavg()}
            subprocess.run([*command, "--cpu-threads", str(threads)], check=True)
            written = json.loads(kept.read_text())
            loads[name]["after"] = os.getloadavg()
            runs[name] = {"cpu_threads": written["cpu_threads"],
                          **written["results"]["seeds-gymnax"]}
    finally:
        if before is not None:
            kept.write_bytes(before)
    one, default = (runs[k]["total_sps_by_seeds"] for k in ("one_thread", "default_pool"))
    wrong = verdict(one, default, ONE_THREAD_MEMBERS)
    shown = " ".join(command[2:])
    write_results("cpu_threads_seeds", {
        "what": f"{shown} --cpu-threads 1, then --cpu-threads 0, back to back "
                "(python -m benchmarks.scaling_docs)",
        "machine": machine(), "one_thread_members": ONE_THREAD_MEMBERS,
        "as_the_page_says": not wrong, "load_average": loads, **runs})
    for count in one:
        print(f"{count:>4} seeds: one thread {one[count]:>9,.0f}, default pool "
              f"{default[count]:>9,.0f} env steps/s")
    if wrong:
        print(f"not as docs/scaling.md says (one thread faster up to {ONE_THREAD_MEMBERS} "
              "members, the default pool above): " + "; ".join(wrong))
        return 1
    print(f"as docs/scaling.md says: one thread faster up to {ONE_THREAD_MEMBERS} members, "
          "the default pool above")
    return 0


if __name__ == "__main__":
    sys.exit(main())
