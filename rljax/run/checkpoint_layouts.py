"""Older layouts of a saved train state, rebuilt on restore (:mod:`rljax.run.checkpoint`).

* A prioritized replay's sum tree saved with another fanout: the leaves are the same, the
  inner sums are recomputed for today's layout.
* Optimizer moments saved as one flat vector per network (``optax.flatten``, as PQN, TD3
  and SAC once kept them): split back into the run's per-parameter arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rljax.buffers import sum_tree


def relayout_sum_trees(target: Any, loaded: Any) -> Any:
    """Rebuilds, in ``target``'s layout, every sum tree of ``loaded`` saved with another
    fanout: the leaves are the first ``capacity`` nodes of any layout, so only the inner
    sums are recomputed. Leading axes (one tree per seed or sweep member) are kept; a tree
    of another capacity or member count is left to the shape check."""
    is_tree = lambda x: isinstance(x, sum_tree.SumTreeState)

    def relayout(t, x):
        if not is_tree(t):
            return x
        saved, wanted = np.shape(x.nodes), np.shape(t.nodes)
        if saved == wanted or saved[:-1] != wanted[:-1] or not any(
                sum_tree.level_offsets(t.capacity, f)[-1] == saved[-1] for f in range(2, 257)):
            return x
        leaves = np.asarray(x.nodes)[..., : t.capacity].reshape(-1, t.capacity)
        trees = [sum_tree.from_values(v, t.capacity, t.nodes.dtype, t.fanout).nodes
                 for v in leaves]
        return x.replace(nodes=np.stack(jax.device_get(trees)).reshape(wanted))

    return jax.tree.map(relayout, target, loaded, is_leaf=is_tree)


def sum_tree_nodes(target: Any, named_leaves: Callable[[Any], tuple[dict, Any]]) -> set[str]:
    """Path names (as ``named_leaves`` writes them) of the ``nodes`` arrays of every sum
    tree in ``target``."""
    is_tree = lambda x: isinstance(x, sum_tree.SumTreeState)
    marks = jax.tree.map(lambda x: (jax.tree.map(lambda _: False, x).replace(nodes=True)
                                    if is_tree(x) else False), target, is_leaf=is_tree)
    return {name for name, mark in named_leaves(marks)[0].items() if mark}


def flat_vectors(target: dict, saved: dict) -> dict[str, list[str]]:
    """Saved arrays that an optimizer wrapped in ``optax.flatten`` wrote as one vector per
    moment (``agent.opt_state.1.mu`` ``[..., N]``) where this run keeps one array per
    parameter (``agent.opt_state.1.mu.params.Dense_0.kernel``, ...): ``{saved name:
    [target names in leaf order]}``, for each such vector whose dtype and leading axes (one
    per seed or sweep member) match and whose length is the members' sizes added up.
    ``optax.flatten`` ravels in leaf order, so the vector splits back exactly."""
    groups = {}
    for name in sorted(set(saved) - set(target)):
        shape, dtype = saved[name]
        members = [k for k in target if k.startswith(name + ".") and k not in saved]
        if not shape or not members:
            continue
        lead = tuple(shape[:-1])
        if all(tuple(target[k].shape[:len(lead)]) == lead
               and np.dtype(target[k].dtype) == dtype for k in members) and shape[-1] == sum(
                int(np.prod(target[k].shape[len(lead):])) for k in members):
            groups[name] = members
    return groups


def read_targets(target: dict, saved: dict) -> tuple[dict, dict[str, list[str]]]:
    """``(what to read, flat vectors)``: ``target``'s leaves by name, with the members of
    each flat vector (:func:`flat_vectors`) replaced by the vector as it was saved; after
    reading, :func:`split_flat_vectors` gives the members back."""
    flat = flat_vectors(target, saved)
    grouped = {k for members in flat.values() for k in members}
    wanted = {k: v for k, v in target.items() if k not in grouped}
    wanted.update({k: jax.ShapeDtypeStruct(*saved[k]) for k in flat})
    return wanted, flat


def split_flat_vectors(arrays: dict, groups: dict[str, list[str]], target: dict) -> dict:
    """``arrays`` with each flat vector of ``groups`` split into its members' arrays."""
    for name, members in groups.items():
        flat = np.asarray(arrays.pop(name))
        start = 0
        for k in members:
            shape = tuple(target[k].shape)
            size = int(np.prod(shape[flat.ndim - 1:]))
            arrays[k] = flat[..., start:start + size].reshape(shape)
            start += size
    return arrays


def resolved_schedules(saved: dict, run: dict) -> tuple[dict, dict]:
    """Both runs with ``schedule_steps`` None (the run's own length) read as their
    ``total_steps`` where the other side has it resolved (a resume that changed the budget
    records the length it kept)."""
    mine, theirs = saved.get("schedule_steps"), run.get("schedule_steps")
    if mine is None and theirs is not None:
        saved = dict(saved, schedule_steps=saved.get("total_steps"))
    elif theirs is None and mine is not None:
        run = dict(run, schedule_steps=run.get("total_steps"))
    return saved, run
