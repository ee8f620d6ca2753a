"""Save and restore the whole train state, with a manifest that guards resumes.

A checkpoint is a folder ``RUN_DIR/checkpoint/ENV_STEP/`` written by orbax-checkpoint
(see :mod:`rljax.run.checkpoint_store` for the layout and how a save is committed):

* ``state/``: the :class:`LoopState` minus envpool's env handle (parameters, target
  parameters, optimizer state, replay memory, schedule counters, PRNG key data, episode
  statistics; for JAX-native envs the envs' own state too), one array per leaf, named by
  its path (``memory.replay.storage.obs``);
* ``manifest/``: rljax version, preset, algorithm, env id, the run's config, env steps.

Each save adds a step folder, then deletes all but the last ``keep`` (``keep_checkpoints``);
a save killed at any moment leaves the previous ones as they were. Restore reads the newest.

envpool's environments are not part of a checkpoint: a resumed run restarts its envs from
``reset()`` (the episodes in progress at save time are dropped from the statistics), and
everything else continues where it stopped. JAX-native envs are: their states, keys and
observations are saved with the rest, so a resumed run continues its episodes.

Older run directories still restore: from before orbax (``checkpoint/state.msgpack``,
``manifest.json``; a resumed run replaces them once ``keep`` newer exist), and with a sum
tree of another layout (fanout 16 before 8; rebuilt from its leaves, stored first in each).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.parallel import multihost
from rljax.run import checkpoint_layouts as layouts
from rljax.run.config import RESUMABLE_CHANGES, RUN_RENAMED, RunConfig

CHECKPOINT_DIR = "checkpoint"
_LEGACY = ("state.msgpack", "manifest.json")


class CheckpointError(ValueError):
    """A checkpoint cannot be used: missing, corrupted, or made for another run."""


class Corrupted(CheckpointError):
    """A checkpoint's arrays cannot be read or fail their checksums."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class SaveError(RuntimeError):
    """A checkpoint could not be written (a full disk, ...); the earlier ones are kept."""


def _store():
    from rljax.run import checkpoint_store  # imports orbax, which takes a while

    return checkpoint_store


def _holds_envs(state) -> bool:
    """Whether the envs' own state is an array pytree that a checkpoint can hold
    (JAX-native envs); envpool's handle is an opaque pointer into the host pool."""
    return not isinstance(state.env.handle, jax.Array | np.ndarray)


def _payload(state) -> dict:
    stats = state.env.stats
    if _holds_envs(state):  # the envs go on: so do their episodes' running sums
        return {"agent": state.agent, "memory": state.memory,
                "key": jax.random.key_data(state.key), "env_steps": state.env_steps,
                "solved_at": state.solved_at, "stats": stats, "batches": state.batches,
                "env": {"handle": state.env.handle, "obs": state.env.obs,
                        "done": state.env.done, "extras": state.env.extras}}
    sums = {k: getattr(stats, k) for k in ("running_return", "running_length")}
    stats = stats.replace(**{k: jax.device_put(np.zeros(x.shape, x.dtype),
                                               multihost.placement(x))  # as placed in the run
                             for k, x in sums.items()})  # copied: no compile between chunks
    return {"agent": state.agent, "memory": state.memory, "key": jax.random.key_data(state.key),
            "env_steps": state.env_steps, "solved_at": state.solved_at, "stats": stats,
            "batches": state.batches}


def _named_leaves(tree: Any) -> tuple[dict[str, Any], Any]:
    """``({path: leaf}, treedef)``, paths written ``agent.params.Dense_0.kernel``."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    named = {jax.tree_util.keystr(p, simple=True, separator="."): x for p, x in leaves}
    if len(named) != len(leaves):
        raise ValueError("two leaves of the train state have the same path name")
    return named, treedef


def _folder(run_dir: str, name: str = CHECKPOINT_DIR) -> str:
    return os.path.join(run_dir, name)


def _is_legacy(run_dir: str) -> bool:
    return os.path.isfile(os.path.join(_folder(run_dir), _LEGACY[1]))


def _reason(error: BaseException) -> str:
    """One line saying why an operation failed: the OS error if there is one."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            detail = getattr(seen, "detail", None)
            return (f"{os.strerror(seen.errno)} [errno {errno.errorcode.get(seen.errno)}]"
                    + (f" ({detail})" if detail else ""))
        seen = seen.__cause__ or seen.__context__
    if "No space left on device" in str(error):  # tensorstore's errors carry it as text
        return "No space left on device [errno ENOSPC]"
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def save(run_dir: str, state, manifest: dict, keep: int | None = None, *,
         folder: str = CHECKPOINT_DIR) -> str:
    """Writes a checkpoint of ``state`` into ``run_dir``; returns its folder.

    In a multi-process run every process calls this with the same ``run_dir``, and each
    writes the shards of its own devices. A checkpoint of the same env step is replaced.
    ``keep``: how many of the newest checkpoints to keep (None: RunConfig's default).
    ``folder``: the folder of ``run_dir`` to save into (the best checkpoint has its own,
    :mod:`rljax.run.best`).

    Raises:
        SaveError: the checkpoint could not be written (one line saying why); nothing of
            it is left behind, and the earlier checkpoints are kept.
    """
    keep = RunConfig.keep_checkpoints if keep is None else keep
    name, store, folder = folder, _store(), _folder(run_dir, folder)
    named, _ = _named_leaves(_payload(state))  # no arrays of no elements: orbax refuses them
    named = {k: v if isinstance(v, jax.Array) else jnp.asarray(v) for k, v in named.items()
             if np.size(v)}  # (MJX's contacts of a model without any; restore remakes them)
    env_steps = int(np.ravel(multihost.fetch(state.env_steps))[0])
    manifest = dict(manifest, env_steps=env_steps)
    try:
        with multihost.waiting("saving a checkpoint"):
            path = store.write(folder, env_steps, named, manifest, keep)
    except Exception as e:  # noqa: BLE001 - orbax and tensorstore raise many kinds
        try:
            previous = [s for s in store.steps(folder) if s != env_steps]
        except Exception:  # noqa: BLE001
            previous = []
        kept = (f"the last complete checkpoint (env step {previous[-1]:,}) is kept"
                if previous else "no earlier checkpoint is kept")
        raise SaveError(f"could not save the checkpoint at env step {env_steps:,} in "
                        f"{folder}: {_reason(e)}; {kept}") from None
    if (name == CHECKPOINT_DIR and multihost.is_writer() and _is_legacy(run_dir)
            and len(store.steps(folder)) >= keep):
        for name in _LEGACY:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(folder, name))
    return path


def latest_step(run_dir: str) -> int | None:
    """The env step of the newest complete checkpoint in ``run_dir`` (None: none)."""
    steps = _store().steps(_folder(run_dir))
    return steps[-1] if steps else None


def read_manifest(run_dir: str, step: int | None = None, *,
                  folder: str = CHECKPOINT_DIR) -> dict:
    """The manifest of checkpoint ``step`` in ``run_dir``'s ``folder`` (default: the newest).

    Raises:
        CheckpointError: there is no (such) checkpoint; :class:`Corrupted` (with the step)
            when its manifest cannot be read, or, for the newest, when a newer entry of the
            folder is no checkpoint folder.
    """
    name, folder = folder, _folder(run_dir, folder)
    try:
        steps = _store().steps(folder)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint folder {folder} is unreadable: {_reason(e)}") from None
    if step is not None and step not in steps:
        raise CheckpointError(f"{folder} holds no checkpoint of env step {step:,}; it holds "
                              + (", ".join(f"{s}" for s in steps) or "none"))
    damaged = _store().not_a_checkpoint(folder, steps[-1] if steps else -1) if (
        step is None) else None
    if damaged is not None:  # orbax leaves it out: the run would go on from an older one
        raise Corrupted(f"checkpoint {damaged[0]} is {damaged[2]}, not a checkpoint folder",
                        damaged[1])
    step = step if step is not None else (steps[-1] if steps else None)
    if step is None:
        if name == CHECKPOINT_DIR and _is_legacy(run_dir):
            return _read_legacy_manifest(run_dir)
        raise CheckpointError(f"no checkpoint in {run_dir!r} (expected {folder}/STEP/)")
    try:
        manifest = _store().read_manifest(folder, step)
    except Exception as e:  # noqa: BLE001
        raise Corrupted(f"checkpoint manifest of {folder}/{step} is unreadable: "
                        f"{_reason(e)}", step) from None
    if not (isinstance(manifest.get("run"), dict) and manifest.get("env_steps") == step
            and isinstance(manifest.get("arrays"), dict)
            and isinstance(manifest.get("checksums"), dict)):
        raise Corrupted(f"{folder}/{step} is not an rljax checkpoint (its manifest has "
                        "no run configuration, array list or checksums)", step)
    return manifest


def verify(run_dir: str, step: int) -> None:
    """Reads checkpoint ``step``'s arrays back onto one device and checks them against
    their checksums (those saved in shards over several devices too: the check follows
    the saved layout); needs no train state to read into.

    Raises:
        CheckpointError: the checkpoint is unreadable, truncated or corrupted.
    """
    manifest = read_manifest(run_dir, step)
    store, folder = _store(), _folder(run_dir)
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    targets = {name: store.Target(tuple(shape), jnp.dtype(dtype), sharding)
               for name, (shape, dtype) in manifest["arrays"].items()}
    try:
        store.read(folder, step, targets, manifest["checksums"])
    except Exception as e:  # noqa: BLE001
        raise Corrupted(f"checkpoint {store.step_dir(folder, step)} is corrupted or "
                        f"truncated: {_reason(e)}", step) from None


def _read_legacy_manifest(run_dir: str) -> dict:
    path = os.path.join(_folder(run_dir), _LEGACY[1])
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint manifest {path} is unreadable: {e}") from None


def saved_run(run_dir: str, step: int | None = None):
    """The :class:`~rljax.run.config.RunConfig` checkpoint ``step`` (default: the newest)
    was saved with."""
    manifest = read_manifest(run_dir, step)
    try:
        return RunConfig.from_dict(manifest["run"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"the run configuration in the checkpoint of {run_dir} "
                              f"cannot be read by this rljax: {e}") from None


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
    fields added since it was written take their defaults, renamed ones their new names.
    """
    as_json = lambda x: json.loads(json.dumps(x))
    saved = {RUN_RENAMED.get(k, k): v for k, v in manifest.get("run", {}).items()}
    try:
        saved = RunConfig.from_dict(saved).to_dict()
    except (KeyError, TypeError, ValueError):
        pass  # compared as written; the differences are named below
    problems = _diff(*map(as_json, layouts.resolved_schedules(saved, run_config)))
    if problems:
        raise CheckpointError("checkpoint was made for another run: " + "; ".join(problems)
                              + " (a resume may change only " + ", ".join(RESUMABLE_CHANGES)
                              + ")")


def _read_targets(path: str, target: dict, saved: dict, trees: set[str]) -> dict:
    """What to read for each leaf: onto its sharding; a sum tree of another layout as a
    host array of its saved shape (rebuilt afterwards)."""
    store = _store()
    if set(saved) != set(target):
        missing, extra = sorted(set(target) - set(saved)), sorted(set(saved) - set(target))
        raise CheckpointError(f"checkpoint {path} does not fit this run's train state: "
                              f"missing {missing[:3]}, unexpected {extra[:3]}")
    out = {}
    for name, leaf in target.items():
        shape, dtype = saved[name]
        if dtype != np.dtype(leaf.dtype) or (shape != leaf.shape and name not in trees):
            raise CheckpointError(
                f"checkpoint {path} does not fit this run's train state: {name} is saved "
                f"as {dtype}{list(shape)}, expected {np.dtype(leaf.dtype)}{list(leaf.shape)}")
        sharding = getattr(leaf, "sharding", None) if shape == leaf.shape else None
        out[name] = store.Target(shape, dtype, sharding)
    return out


def restore(run_dir: str, template, step: int | None = None, *,
            folder: str = CHECKPOINT_DIR):
    """Loads checkpoint ``step`` (default: the newest) of ``run_dir``'s ``folder`` (default
    ``checkpoint/``) into the structure of ``template``
    (a fresh LoopState whose envs were just reset) and returns the restored LoopState, laid
    out as the template (sharded over devices or not).

    The template's agent and replay arrays are freed before the checkpoint is read, so
    the state is never held twice; do not use ``template`` afterwards.

    Raises:
        CheckpointError: no checkpoint, or a corrupted, truncated (:class:`Corrupted`)
            or foreign one.
    """
    manifest = read_manifest(run_dir, step, folder=folder)
    if "sha256" in manifest:  # the format before orbax
        return _place(_restore_legacy(run_dir, template, manifest), template)
    store, folder, step = _store(), _folder(run_dir, folder), manifest["env_steps"]
    path, target = store.step_dir(folder, step), _payload(template)
    named, treedef = _named_leaves(target)
    empty = {k: np.zeros(np.shape(v), v.dtype) for k, v in named.items() if not np.size(v)}
    saved = {k: (tuple(shape), jnp.dtype(dtype)) for k, (shape, dtype) in
             manifest["arrays"].items()}  # flat optimizer moments: read whole, then split
    wanted, flat = layouts.read_targets({k: v for k, v in named.items() if k not in empty},
                                        saved)
    targets = _read_targets(path, wanted, saved, layouts.sum_tree_nodes(target, _named_leaves))
    shardings = {k: getattr(v, "sharding", None) for k, v in named.items()}
    loose = {k for k, v in named.items() if multihost.placement(v) is None}  # uncommitted
    for x in jax.tree.leaves((template.agent, template.memory)):
        if isinstance(x, jax.Array) and not x.is_deleted():
            x.delete()
    try:
        arrays = store.read(folder, step, targets, manifest["checksums"])
    except Exception as e:  # noqa: BLE001
        raise Corrupted(f"checkpoint {path} is corrupted or truncated: {_reason(e)}",
                        step) from None
    arrays = layouts.split_flat_vectors(dict(arrays), flat, named)
    arrays.update(empty)  # saved as nothing (see save)
    loaded = jax.tree_util.tree_unflatten(treedef, [arrays[k] for k in named])
    loaded["memory"] = layouts.relayout_sum_trees(target["memory"], loaded["memory"])
    placed = [jax.device_put(np.asarray(x)) if k in loose
              else x if isinstance(x, jax.Array) else multihost.put(x, shardings[k])
              for k, x in zip(named, jax.tree.leaves(loaded), strict=True)]
    return _state(template, jax.tree_util.tree_unflatten(treedef, placed))


def _state(template, loaded: dict):
    key = jax.random.wrap_key_data(loaded["key"], impl=jax.random.key_impl(template.key))
    if isinstance(template.key, jax.Array) and key.sharding != template.key.sharding:
        key = jax.device_put(key, template.key.sharding)
    env = template.env.replace(stats=loaded["stats"], **loaded.get("env", {}))
    return template.replace(agent=loaded["agent"], memory=loaded["memory"], key=key,
                            env_steps=loaded["env_steps"], batches=loaded["batches"],
                            solved_at=loaded["solved_at"], env=env)


def _place(state, template):
    """``state``'s host arrays laid out as ``template``'s."""
    return jax.tree.map(lambda x, like: multihost.place(x, like) if isinstance(
        like, jax.Array) else x, state, template)


def _restore_legacy(run_dir: str, template, manifest: dict):
    """Restores ``checkpoint/state.msgpack`` (the format before orbax): the file is read
    whole and checked against the manifest's SHA-256."""
    import flax.serialization

    path = os.path.join(_folder(run_dir), _LEGACY[0])
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
    loaded["memory"] = layouts.relayout_sum_trees(target["memory"], loaded["memory"])
    for (p, a), b in zip(jax.tree_util.tree_leaves_with_path(target),
                         jax.tree.leaves(loaded), strict=True):
        if getattr(a, "shape", None) != getattr(b, "shape", None):
            raise CheckpointError(
                f"checkpoint {path} does not fit this run's train state: "
                f"{jax.tree_util.keystr(p)} has shape {getattr(b, 'shape', None)}, "
                f"expected {getattr(a, 'shape', None)}")
    loaded["key"] = jnp.asarray(loaded["key"])
    return _state(template, jax.tree.map(jnp.asarray, loaded))
