"""Save and restore the whole train state, with a manifest that guards resumes.

A checkpoint is two files in ``RUN_DIR/checkpoint/``:

* ``state.msgpack``: the :class:`LoopState` minus the env handle, serialized with
  ``flax.serialization`` (parameters, target parameters, optimizer state, replay
  memory, schedule counters, PRNG key, episode statistics);
* ``manifest.json``: rljax version, preset, env id, config, env steps, and the
  SHA-256 of ``state.msgpack`` (so a truncated or corrupted file is caught).

Environments are not part of a checkpoint: a resumed run restarts its envs from
``reset()`` (the episodes in progress at save time are dropped from the
statistics), and everything else continues where it stopped.

A sum tree saved with another layout (the default fanout was 16 before it became 8) is
rebuilt from its leaves, which every layout stores first, so such runs still resume.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from rljax.buffers import sum_tree
from rljax.parallel import multihost
from rljax.run.logging import write_json

CHECKPOINT_DIR = "checkpoint"
# Fields that may differ between a checkpoint and the run resuming it.
RESUMABLE_CHANGES = ("total_steps", "logdir", "tensorboard", "wandb_project", "chunk_steps",
                     "checkpoint_steps", "stop_on_solve", "eval_every", "eval_episodes")


class CheckpointError(ValueError):
    """A checkpoint cannot be used: missing, corrupted, or made for another run."""


def _payload(state) -> dict:
    stats = state.env.stats
    stats = stats.replace(running_return=jnp.zeros_like(stats.running_return),
                          running_length=jnp.zeros_like(stats.running_length))
    return {"agent": state.agent, "memory": state.memory,
            "key": jax.random.key_data(state.key),
            "env_steps": state.env_steps, "solved_at": state.solved_at, "stats": stats,
            "batches": state.batches}


def save(run_dir: str | None, state, manifest: dict) -> str | None:
    """Writes a checkpoint of ``state`` (atomically); returns its folder.

    In a multi-process run every process calls this (the state's shards are gathered)
    and the first one writes; the others return None.
    """
    payload = multihost.fetch(_payload(state))
    if not multihost.is_writer():
        return None
    folder = os.path.join(run_dir, CHECKPOINT_DIR)
    os.makedirs(folder, exist_ok=True)
    data = flax.serialization.to_bytes(payload)
    tmp = os.path.join(folder, "state.msgpack.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(folder, "state.msgpack"))
    manifest = dict(manifest, env_steps=int(np.ravel(payload["env_steps"])[0]),
                    sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    write_json(os.path.join(folder, "manifest.json"), manifest)
    return folder


def read_manifest(run_dir: str) -> dict:
    path = os.path.join(run_dir, CHECKPOINT_DIR, "manifest.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint in {run_dir!r} (expected {path})")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint manifest {path} is unreadable: {e}") from None


def _diff(saved: Any, current: Any, prefix: str = "") -> list[str]:
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(saved) | set(current)):
            if not prefix and key in RESUMABLE_CHANGES:
                continue
            out += _diff(saved.get(key), current.get(key), f"{prefix}{key}.")
        return out
    if saved != current:
        return [f"{prefix[:-1]}: checkpoint has {saved!r}, this run has {current!r}"]
    return []


def check_compatible(manifest: dict, run_config: dict) -> None:
    """Raises CheckpointError naming every field where the run differs from the checkpoint.

    Both sides are compared as JSON values (the manifest went through JSON, so tuples came
    back as lists), and the checkpoint's run is read as this version reads a config file:
    fields added since it was written take their defaults.
    """
    from rljax.run.config import RunConfig

    as_json = lambda x: json.loads(json.dumps(x))
    saved = manifest.get("run", {})
    try:
        saved = RunConfig.from_dict(saved).to_dict()
    except (KeyError, TypeError, ValueError):
        pass  # compared as written; the differences are named below
    problems = _diff(as_json(saved), as_json(run_config))
    if problems:
        raise CheckpointError("checkpoint was made for another run: " + "; ".join(problems))


def _relayout_sum_trees(target: Any, loaded: Any) -> Any:
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


def restore(run_dir: str, template):
    """Loads the checkpoint into the structure of ``template`` (a fresh LoopState whose
    envs were just reset) and returns the restored LoopState."""
    manifest = read_manifest(run_dir)
    path = os.path.join(run_dir, CHECKPOINT_DIR, "state.msgpack")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} is unreadable: {e}") from None
    if len(data) != manifest.get("bytes") or hashlib.sha256(data).hexdigest() != manifest.get(
            "sha256"):
        raise CheckpointError(f"checkpoint {path} is corrupted or truncated "
                              f"({len(data)} bytes, manifest says {manifest.get('bytes')})")
    target = jax.device_get(_payload(template))
    try:
        loaded = flax.serialization.from_bytes(target, data)
    except Exception as e:  # noqa: BLE001 - msgpack/flax raise many kinds
        raise CheckpointError(f"checkpoint {path} does not fit this run's train state: "
                              f"{str(e).splitlines()[0][:300]}") from None
    loaded["memory"] = _relayout_sum_trees(target["memory"], loaded["memory"])
    for (p, a), b in zip(jax.tree_util.tree_leaves_with_path(target),
                         jax.tree.leaves(loaded), strict=True):
        if getattr(a, "shape", None) != getattr(b, "shape", None):
            raise CheckpointError(
                f"checkpoint {path} does not fit this run's train state: "
                f"{jax.tree_util.keystr(p)} has shape {getattr(b, 'shape', None)}, "
                f"expected {getattr(a, 'shape', None)}")
    key = jax.random.wrap_key_data(jnp.asarray(loaded["key"]))
    env = template.env.replace(stats=jax.tree.map(jnp.asarray, loaded["stats"]))
    return template.replace(
        agent=jax.tree.map(jnp.asarray, loaded["agent"]),
        memory=jax.tree.map(jnp.asarray, loaded["memory"]),
        key=key, env_steps=jnp.asarray(loaded["env_steps"]),
        batches=jax.tree.map(jnp.asarray, loaded["batches"]),
        solved_at=jnp.asarray(loaded["solved_at"]), env=env)
