"""Checks a run passes before it compiles or allocates anything large.

:mod:`rljax.run.build` calls them while it assembles a run, so a run that cannot work is
refused with one line (a ``ValueError`` naming the value and what is allowed) before the
run directory exists:

* :func:`check_replay`: a replay too small for one batch or one n-step transition
  (and :func:`warn_if_never_learning`: a warning where learning would never start);
* :func:`check_counters`: a run whose env steps or gradient steps would overflow the
  loops' int32 counters once the budget is rounded up to whole chunks;
* :func:`abstract_state` and :func:`check_memory`: the train state's exact size (traced
  from abstract inputs, nothing allocated) plus lower bounds on the envs, one update's
  data and the network activations, against the memory available.

:func:`check_python_values` keeps the Python API strict about types (strings are read
only from the command line), and :func:`resource_message` turns an out-of-memory failure
that could only show up later into one line.
"""

from __future__ import annotations

import math
import types
import typing
import warnings
from typing import Any

import jax
import numpy as np

from rljax import records, resources, validate
from rljax.parallel import members as members_lib
from rljax.records import OffPolicyLoop, Replay
from rljax.run import settings
from rljax.run.config import RunConfig
from rljax.run.registry import get_algorithm

_INT32_MAX = validate.INT32_LIMIT - 1


def _replay(config: Any) -> Replay | None:
    """The config's replay record (None: an agent that learns from rollouts)."""
    return config.replay if isinstance(config.loop, OffPolicyLoop) else None


def check_replay(run: Any) -> None:
    """Refuses a replay smaller than one batch or one n-step transition."""
    replay = _replay(run.config)
    if replay is None:
        return
    batch, n, buffer = replay.batch_size, replay.n_step, replay.buffer_size
    if batch > buffer:
        raise ValueError(f"batch_size={batch} is larger than buffer_size={buffer}: every "
                         f"batch would repeat transitions; use batch_size <= buffer_size")
    if n > buffer:
        raise ValueError(f"n_step={n} is larger than buffer_size={buffer}: the replay could "
                         f"never hold an n-step transition; use n_step <= buffer_size")


def warn_if_never_learning(run: Any) -> None:
    """Warns when the run ends before the replay holds ``learning_starts`` transitions,
    so that learning never starts (a run may want that, to measure acting alone)."""
    replay = _replay(run.config)
    if replay is None:
        return
    min_replay, n, num_envs = replay.min_replay, replay.n_step, run.config.loop.num_envs
    # Each loop step adds one transition per env, once an env has n steps behind it.
    needed = (math.ceil(min_replay / num_envs) + n - 1) * num_envs
    if needed > run.total_steps:
        warnings.warn(f"learning never starts in this run: the replay holds learning_starts="
                      f"{min_replay:,} transitions after about {needed:,} env steps, and "
                      f"total_steps={run.total_steps:,}; raise total_steps or lower "
                      f"learning_starts", stacklevel=3)


def check_values(run: Any, spec: Any, length: Any) -> None:
    """Refuses values with which training would silently do nothing, as the agent's own
    ``check_run(config, spec, length)`` judges them against the run's length (a target
    network or an actor never updated, a temperature that grows without bound; a learning
    rate annealed to 0 before the run ends is a warning), and wandb logging without
    wandb."""
    algorithm = get_algorithm(run.algo)
    algorithm.check_run(run.config, spec, length)
    if run.schedule_steps is not None and not algorithm.anneals(run.config):
        raise ValueError(f"schedule_steps={run.schedule_steps} sets how long the agent's "
                         f"schedules tied to the run's length last, but this {run.algo} agent "
                         "has none (nothing anneals over the run); leave schedule_steps unset")
    if run.wandb_project:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ValueError("wandb logging was asked for (--wandb) but the wandb package is "
                             "not installed; `pip install wandb` or drop --wandb")


def check_counters(run: Any, steps_per_update: int, updates_per_chunk: int,
                   num_chunks: int) -> None:
    """Refuses a run whose env-step or gradient-step count passes the int32 counters.

    The budget is rounded up to whole chunks, so ``total_steps`` just under 2**31 can
    still overflow; the message gives the largest budget that fits.
    """
    per_chunk = steps_per_update * updates_per_chunk
    steps = num_chunks * per_chunk
    if steps > _INT32_MAX:
        fits = _INT32_MAX // per_chunk * per_chunk
        raise ValueError(f"total_steps={run.total_steps:,} rounds up to {steps:,} env steps "
                         f"(whole chunks of {per_chunk:,}), past what the int32 env-step "
                         f"counter holds ({_INT32_MAX:,}); use total_steps <= {fits:,}")
    grads, _, fields = get_algorithm(run.algo).gradient_steps(run.config)
    updates = num_chunks * updates_per_chunk
    if updates * grads > _INT32_MAX:
        fits = _INT32_MAX // grads // updates_per_chunk * per_chunk
        raise ValueError(f"total_steps={run.total_steps:,} takes {updates:,} updates x {grads} "
                         f"gradient steps ({fields}) = {updates * grads:,} gradient steps, past "
                         f"what the int32 optimizer and batch counters hold ({_INT32_MAX:,}); "
                         f"use total_steps <= {fits:,} or fewer gradient steps per update")


def abstract_state(trainer: Any, env: Any, run: Any) -> Any:
    """The shapes and dtypes of ``trainer.init``'s state, traced without allocating it
    or resetting the envs; None where the env or trainer cannot say (sharded runs).

    Raises:
        whatever building the state raises (a bad value reaching a network or a buffer).
    """
    if getattr(env, "state_shapes", None) is None or trainer.init_state is None:
        return None
    if trainer.num_seeds > 1:
        seeds = [s for s, _ in run.members]
        keys = jax.eval_shape(lambda: members_lib.seed_keys(seeds))
    else:
        keys = jax.eval_shape(lambda: jax.random.key(run.seed))
    return jax.eval_shape(trainer.init_state, keys, env.state_shapes())


def _activation_bytes(config: Any, spec: Any, rows: int) -> int:
    """A lower bound on one update's activations: ``rows`` samples through the widest
    configured network (forward values and gradients, float32)."""
    widths = [sum(v) for v in records.network_sizes(config).values() if isinstance(v, tuple)]
    per_row = max(widths, default=0) + (21_632 if spec.is_image else 0)  # Nature CNN maps
    return 2 * 4 * rows * per_row


def _update_rows(run: Any) -> int:
    return get_algorithm(run.algo).gradient_steps(run.config)[1]


def memory_parts(run: Any, spec: Any, state: Any, loop: str) -> tuple[dict, dict]:
    """``({part: bytes}, {part: what to lower})`` of the run's memory estimate."""
    config, n = run.config, run.num_members
    more = f" or the number of members ({n}: seeds x sweep values)" if n > 1 else ""
    obs = resources.array_bytes(spec.obs_shape, spec.obs_dtype)
    replay = _replay(config)
    per_update = (2 * replay.batch_size if replay is not None
                  else config.loop.steps_per_update) * (obs + 32)
    parts = {
        "replay memory": resources.tree_bytes(state.memory) if state is not None else 0,
        "parameters and optimizer state": resources.tree_bytes(state.agent)
        if state is not None else 0,
        "env state": resources.tree_bytes(state.env) if state is not None else 0,
        "one update's data": n * per_update,
        "network activations": n * _activation_bytes(config, spec, _update_rows(run)),
        "evaluation envs": resources.env_pool_bytes(run.eval_episodes, spec.obs_shape,
                                                    spec.obs_dtype) if run.eval_every else 0,
    }
    sizes = ", ".join(f"{name}={value}" for name, value in records.network_sizes(config).items()
                      ) or "the network sizes"
    rows = "batch_size" if loop == "off_policy" else "num_envs or rollout_len"
    hints = {
        "replay memory": f"buffer_size ({replay.buffer_size if replay else 0:,}){more}",
        "parameters and optimizer state": f"{sizes}{more}",
        "env state": f"num_envs{more}",
        "one update's data": f"{rows}{more}",
        "network activations": f"{sizes} or {rows}{more}",
        "evaluation envs": f"eval_episodes ({run.eval_episodes:,})",
    }
    return parts, hints


def check_memory(run: Any, spec: Any, state: Any, loop: str) -> None:
    """Refuses a run whose train state, update data and evaluation envs cannot fit in
    the memory available (the device's for the arrays on an accelerator, the host's
    otherwise and for the envs).

    Raises:
        ValueError: the estimate and its largest parts, the memory available and the
            setting to lower.
    """
    parts, hints = memory_parts(run, spec, state, loop)
    device_free = resources.available_device_bytes(jax.devices()[0])
    if device_free is None:
        resources.check_fits(parts, hints)
        return
    host = {k: parts.pop(k) for k in ("evaluation envs",)}
    resources.check_fits(parts, hints, available=device_free,
                         where=f"{jax.devices()[0].device_kind} memory")
    resources.check_fits(host, hints)


# --- the Python API's types -----------------------------------------------------------

# Run-level keyword arguments of rljax.train and their types (agent fields take theirs
# from the agent's config class).
RUN_TYPES: dict[str, Any] = {**settings.api_types(RunConfig), "num_envs": int}


_SHORT = {bool: "bool", int: "int", float: "number", str: "str", type(None): "None"}


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is tuple and args and args[-1] is Ellipsis:
        item, item_args = args[0], typing.get_args(args[0])
        if typing.get_origin(item) is tuple:
            return f"a tuple of ({', '.join(_SHORT.get(a, str(a)) for a in item_args)}) pairs"
        return f"a tuple of {_SHORT.get(item, str(item))}s"
    if origin is tuple:
        return f"a tuple ({', '.join(_SHORT.get(a, str(a)) for a in args)})"
    return {bool: "a bool (True or False)", int: "an int", float: "a number (int or float)",
            str: "a str", type(None): "None"}.get(tp, getattr(tp, "__name__", str(tp)))


def _fits(tp: Any, value: Any) -> bool:
    """Whether ``value`` is a Python (or NumPy) value of type ``tp``; an int field also
    takes a whole float such as ``1e6``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool | np.bool_)
    if isinstance(value, bool | np.bool_ | str | bytes):
        return tp is str and isinstance(value, str)
    if tp is int:
        return isinstance(value, int | np.integer) or (
            isinstance(value, float | np.floating) and float(value).is_integer())
    if tp is float:
        return isinstance(value, int | float | np.integer | np.floating)
    if tp is str:
        return False
    if origin is tuple:
        if not isinstance(value, tuple | list):
            return False
        if args and args[-1] is Ellipsis:
            return all(_fits(args[0], v) for v in value)
        return len(value) == len(args) and all(_fits(a, v) for a, v in zip(args, value,
                                                                              strict=True))
    return True


def _refuse_type(name: str, tp: Any, value: Any) -> None:
    if not _fits(tp, value):
        why = " (text is converted only on the command line)" if isinstance(value, str) else ""
        raise ValueError(f"{name} must be {_describe(tp)}, got {type(value).__name__} "
                         f"{value!r}{why}")


def check_api_call(preset_or_config: Any, overrides: dict[str, Any], progress: Any) -> None:
    """Refuses what :func:`rljax.train` cannot take: a first argument that is no preset
    name, Preset or RunConfig, a non-bool ``progress``, and overrides of the wrong
    Python type (:func:`check_python_values`)."""
    from rljax.run.config import RunConfig
    from rljax.run.presets import Preset, get_preset

    check_flag("progress", progress)
    config_cls = None
    if isinstance(preset_or_config, str):
        config_cls = type(get_preset(preset_or_config).run.config)
    elif isinstance(preset_or_config, Preset):
        config_cls = type(preset_or_config.run.config)
    elif preset_or_config is not None and not isinstance(preset_or_config, RunConfig):
        raise ValueError(f"train takes a preset name, a Preset or a RunConfig, got "
                         f"{type(preset_or_config).__name__} {preset_or_config!r}")
    check_python_values(config_cls, overrides)


def check_path(name: str, value: Any, optional: bool = False) -> str | None:
    """``value``, a run directory's path (``str`` or ``os.PathLike``), as a ``str``; None
    when ``optional`` and None. Anything else is refused in one line (not a TypeError
    from deep inside the run)."""
    import os

    if optional and value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ValueError(f"{name} must be a run directory's path (a str or os.PathLike)"
                         f"{' or None' if optional else ''}, got {value!r}")
    return str(os.fspath(value))


def check_python_values(config_cls: type | None, overrides: dict[str, Any]) -> None:
    """Refuses an API override whose Python type does not match the field (a string for
    a number or a flag, a float for a size, ...), naming the field, the type expected
    and the value; unknown names are left to the config's own error, and agent fields
    to the run's config when ``config_cls`` is None."""
    known = records.names(config_cls) if config_cls is not None else {}
    for name, value in overrides.items():
        if name == "sweep":
            _check_sweep_values(value)
        elif name == "env" and not isinstance(value, str | None):
            continue  # an env object, checked where it is adapted (rljax.envs.objects)
        elif name in RUN_TYPES:
            _refuse_type(name, RUN_TYPES[name], value)
        elif name in known:
            _refuse_type(name, records.field_type(config_cls, known[name]), value)


def _check_sweep_values(sweep: Any) -> None:
    if sweep is None or isinstance(sweep, str):
        return  # "field=v1,v2" is the command line's text, parsed as there
    if not isinstance(sweep, tuple | list) or len(sweep) != 2 or not isinstance(sweep[0], str):
        raise ValueError(f"sweep must be 'field=v1,v2,...' or (field, [v1, v2, ...]), got "
                         f"{type(sweep).__name__} {sweep!r}")
    field, values = sweep
    if not isinstance(values, tuple | list):
        raise ValueError(f"sweep values must be a list of numbers, got "
                         f"{type(values).__name__} {values!r}")
    for value in values:
        _refuse_type(f"sweep value of {field}", float, value)


def check_flag(name: str, value: Any) -> None:
    """Refuses a non-bool for an API flag such as ``progress``."""
    _refuse_type(name, bool, value)


# --- failures that only show up later ---------------------------------------------------


def resource_message(error: BaseException) -> str | None:
    """One line for an out-of-memory failure (``MemoryError``, XLA's
    ``RESOURCE_EXHAUSTED``); None for any other error."""
    text = str(error).strip()
    if not (isinstance(error, MemoryError) or "RESOURCE_EXHAUSTED" in text
            or "Out of memory" in text):
        return None
    first = text.splitlines()[0][:300] if text else type(error).__name__
    return (f"out of memory ({type(error).__name__}: {first}); lower buffer_size, num_envs, "
            f"the network sizes or the number of seeds")
