"""The best policy kept: the checkpoint of the best greedy evaluation so far.

A run that evaluates (``eval_every``) saves, each time an evaluation beats every earlier
one of the run directory, its whole train state into ``RUN_DIR/checkpoint.best/STEP/``
(the same format as ``checkpoint/``, one step kept). It lives beside the last
checkpoints and is never pruned by ``keep_checkpoints``, so a policy that collapses late
in a long run does not take the best one with it. ``rljax eval RUN --best`` and
``rljax.load(RUN, best=True)`` read it; a resume still continues from ``checkpoint/``.

With several members (``--seeds N``, a sweep) "best" is the evaluation with the highest
mean over the members, and the checkpoint holds every member at that env step: one moment
of one program, as the run's other checkpoints are. A per-member pick would mix moments
(each member's own maximum of noisy evaluations, which overstates every member and
mixes states no run went through); the summary lists each member's score at that step.

The manifest of the best checkpoint records the score (``best`` below), so a resumed run
keeps comparing against the best the run directory has seen.
"""

from __future__ import annotations

import math
import os

from rljax.parallel import multihost
from rljax.run import checkpoint

BEST_DIR = "checkpoint.best"
# A better evaluation at an earlier env step than the kept best (a resume from an earlier
# checkpoint) moves the kept one here first, since a checkpoint folder only grows in step.
SET_ASIDE_DIR = "checkpoint.best.superseded"


def score(evals: list[dict]) -> float | None:
    """The mean over members of their greedy evaluation means (None: one has no
    finished episode)."""
    means = [e["return_mean"] for e in evals]
    if any(m is None or not math.isfinite(m) for m in means):
        return None
    return float(sum(means) / len(means))


def record(env_steps: int, evals: list[dict]) -> dict:
    """What the summary and the manifest say of a best evaluation."""
    out = {"env_steps": env_steps, "eval_return_mean": score(evals)}
    if len(evals) > 1:
        out["members_eval_return_mean"] = [e["return_mean"] for e in evals]
    return out


def read(run_dir: str | None) -> dict | None:
    """The record of the best checkpoint kept in ``run_dir`` (None: none, or unreadable;
    the next better evaluation replaces an unreadable one)."""
    if run_dir is None or not os.path.isdir(os.path.join(run_dir, BEST_DIR)):
        return None
    try:
        kept = checkpoint.read_manifest(run_dir, folder=BEST_DIR).get("best")
    except checkpoint.CheckpointError:
        return None
    return kept if isinstance(kept, dict) and isinstance(
        kept.get("eval_return_mean"), int | float) else None


def better(new: dict, kept: dict | None) -> bool:
    return new["eval_return_mean"] is not None and (
        kept is None or new["eval_return_mean"] > kept["eval_return_mean"])


def save(run_dir: str, state, manifest: dict, best: dict) -> str:
    """Writes ``state`` as the run's best checkpoint (``best``: its :func:`record`),
    replacing the one kept; returns its folder."""
    folder = os.path.join(run_dir, BEST_DIR)
    store = checkpoint._store()
    kept = store.steps(folder) if os.path.isdir(folder) and multihost.is_writer() else []
    for step in kept:
        if step >= best["env_steps"]:
            os.makedirs(os.path.join(run_dir, SET_ASIDE_DIR), exist_ok=True)
            os.replace(os.path.join(folder, str(step)),
                       os.path.join(run_dir, SET_ASIDE_DIR, str(step)))
    return checkpoint.save(run_dir, state, dict(manifest, best=best), keep=1, folder=BEST_DIR)


class Keeper:
    """What a training run keeps of its evaluations: the best one saved in its run directory
    (``saved``), and a better one that awaits its checkpoint (saved after the metrics row,
    as the regular checkpoints are). ``run_dir`` None: a run that does not evaluate."""

    def __init__(self, run_dir: str | None):
        self.saved, self.pending = read(run_dir), None

    def offer(self, env_steps: int, evals: list[dict]) -> None:
        candidate = record(env_steps, evals)
        if better(candidate, self.pending or self.saved):
            self.pending = candidate

    def save(self, run_dir: str, state, manifest: dict, saving) -> None:
        """Saves the pending best, if any, inside the ``saving()`` context."""
        if self.pending is not None:
            with saving():
                save(run_dir, state, manifest, self.pending)
            self.saved, self.pending = self.pending, None

    def summary(self) -> dict:
        return {} if self.saved is None else {"best": self.saved}


def restore_args(run_dir: str, use_best: bool) -> dict:
    """The keyword arguments that make checkpoint reads use the best checkpoint.

    Raises:
        CheckpointError: ``use_best`` and the run directory keeps no best checkpoint.
    """
    if not use_best:
        return {}
    if not checkpoint._store().steps(os.path.join(run_dir, BEST_DIR)):
        raise checkpoint.CheckpointError(
            f"{run_dir!r} keeps no best checkpoint ({BEST_DIR}/ is made by runs that "
            "evaluate: --eval-every STEPS, eval_every=STEPS)")
    return {"folder": BEST_DIR}
