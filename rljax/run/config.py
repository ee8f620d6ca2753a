"""Run configuration, overrides from the command line, and their validation."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any

from rljax import records, validate
from rljax.run.registry import ALGORITHMS, get_algorithm

if TYPE_CHECKING:  # presets.py builds RunConfigs, so it imports this module
    from rljax.run.presets import Preset


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that defines a training run.

    Attributes:
        algo: algorithm name.
        env_id: envpool task id.
        config: the agent's config dataclass.
        total_steps: env-step budget over all envs; rounded up to whole chunks.
        seed: seeds parameters, exploration and the envs.
        num_seeds: independent runs with seeds ``seed .. seed + num_seeds - 1`` in one
            compiled program (one envpool pool of ``num_seeds * num_envs`` envs).
        threshold: solve threshold for ``solved_at_step`` (None: never).
        env_options: extra envpool options as ``((name, value), ...)``.
        chunk_steps: env steps per compiled chunk, and per metrics row.
        logdir: parent folder of run directories.
        preset: name of the preset it came from, if any.
        checkpoint_every: save a checkpoint every this many env steps (and at the end;
            rounded to whole chunks).
        keep_checkpoints: how many of the newest checkpoints each save keeps.
        stop_on_solve: end training at the first chunk after ``threshold`` is reached.
        eval_every: evaluate the noise-free policy every this many env steps (0: never;
            always once at the end when set).
        eval_episodes: episodes per evaluation (one fresh env each).
        tensorboard: also write TensorBoard event files into the run directory.
        wandb_project: also log to this Weights & Biases project (needs wandb).
        sweep: ``(field, (value, ...))``: one member per value of the agent's numeric
            hyperparameter ``field`` (times ``num_seeds`` seeds each), all in one
            compiled program; None: no sweep.
        devices: split the members (seeds x sweep values) over this many devices
            (``jax.devices()[:devices]``, all hosts' devices under
            ``jax.distributed``), one SPMD program; members must divide evenly. A
            single agent (one seed, no sweep) learns data-parallel instead: its envs
            (and an off-policy agent's minibatch) are split over the devices and the
            gradients combined across them (A2C, DQN, DDPG).
    """

    algo: str
    env_id: str
    config: Any
    total_steps: int
    seed: int = 0
    num_seeds: int = 1
    threshold: float | None = None
    env_options: tuple[tuple[str, Any], ...] = ()
    chunk_steps: int = 20_000
    logdir: str = "runs"
    preset: str | None = None
    checkpoint_every: int = 100_000
    keep_checkpoints: int = 2
    stop_on_solve: bool = False
    eval_every: int = 0
    eval_episodes: int = 10
    tensorboard: bool = True
    wandb_project: str | None = None
    sweep: tuple[str, tuple[float, ...]] | None = None
    devices: int = 1

    def __post_init__(self):
        algo = get_algorithm(self.algo)
        if not isinstance(self.config, algo.config_cls):
            raise ValueError(f"config for {self.algo} must be a {algo.config_cls.__name__}, "
                             f"got {type(self.config).__name__}")
        validate.integer("num_seeds", self.num_seeds, low=1, high=4096)
        validate.integer("eval_every", self.eval_every, low=0)
        # The loop's env-step counter is int32 (rljax.loops.state).
        validate.integer("total_steps", self.total_steps, low=1, high=validate.INT32_LIMIT - 1,
                         note="below 2**31: the training loop counts env steps in int32")
        for name in ("chunk_steps", "checkpoint_every", "keep_checkpoints", "eval_episodes"):
            validate.integer(name, getattr(self, name), low=1)
        validate.integer("seed", self.seed, low=0, high=validate.INT32_LIMIT - 1)
        for name in ("stop_on_solve", "tensorboard"):
            validate.boolean(name, getattr(self, name))
        if self.sweep is not None:
            from rljax.parallel.sweep import check_sweep

            check_sweep(self.config, *self.sweep)
            # One name per field: the canonical one (replay.alpha for alpha).
            object.__setattr__(self, "sweep", (records.canonical(type(self.config),
                                                                 self.sweep[0]),
                                               tuple(self.sweep[1])))
        validate.integer("devices", self.devices, low=1)
        if self.devices > 1 and self.num_members == 1:
            from rljax.parallel import data_parallel

            off_policy = isinstance(self.config.loop, records.OffPolicyLoop)
            data_parallel.check_split(self.config.loop.num_envs, self.devices,
                                      self.config.replay.batch_size if off_policy else None)
        if self.devices > 1 and self.num_members > 1 and self.num_members % self.devices:
            raise ValueError(f"{self.num_members} members (seeds x sweep values) cannot be "
                             f"split evenly over {self.devices} devices; use a multiple of "
                             f"{self.devices}")
        if self.num_members > 4096:
            raise ValueError(f"a run holds at most 4096 members, got {self.num_members} "
                             f"({self.num_seeds} seeds x {len(self.sweep[1])} sweep values)")

    @property
    def members(self) -> list[tuple[int, float | None]]:
        """``(seed, sweep value or None)`` of each member, value-major."""
        values = self.sweep[1] if self.sweep is not None else (None,)
        return [(self.seed + k, v) for v in values for k in range(self.num_seeds)]

    @property
    def num_members(self) -> int:
        """Independent agents in the program: seeds x sweep values."""
        return self.num_seeds * (len(self.sweep[1]) if self.sweep is not None else 1)

    def to_dict(self) -> dict:
        """Every field, JSON-ready (the agent config as a dict of its fields)."""
        special = {"env_options": dict(self.env_options),
                   "sweep": None if self.sweep is None else {self.sweep[0]: list(self.sweep[1])},
                   "config": dataclasses.asdict(self.config)}
        return {f.name: special[f.name] if f.name in special else getattr(self, f.name)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        """The RunConfig that :meth:`to_dict` gave ``data``; a key left out takes the
        field's default, a renamed one (:data:`RUN_RENAMED`) its new name, and keys that
        are not fields (a member's ``label``) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        for old, new in RUN_RENAMED.items():
            if old in data and new in data:
                raise ValueError(f"run config has both {old!r} and {new!r}, its new name")
        values = {RUN_RENAMED.get(k, k): v for k, v in data.items()
                  if RUN_RENAMED.get(k, k) in names}
        algo = get_algorithm(data["algo"])
        values["config"] = build_config(algo.config_cls, records.from_dict(
            algo.config_cls, upgrade_fields(data["algo"], data["config"])))
        if "env_options" in values:  # JSON wrote tuple values (obs_indices) as lists
            values["env_options"] = tuple(sorted(
                (k, tuple(v) if isinstance(v, list) else v)
                for k, v in values["env_options"].items()))
        if "sweep" in values:
            values["sweep"] = _sweep_from_dict(values["sweep"], data["algo"])
        return cls(**values)


def _sweep_from_dict(data: dict | None, algo: str) -> tuple[str, tuple[float, ...]] | None:
    if not data:
        return None
    (name, values), = data.items()
    return RENAMED.get(algo, {}).get(name, name), tuple(values)


# Agent fields renamed since run directories were first written, {algorithm: {old: new}}.
# A saved config.json or checkpoint manifest is read under the new names (upgrade_fields);
# on the command line and in the API an old name is refused with the new one (_check_field).
RENAMED: dict[str, dict[str, str]] = {
    "dqn": {"sigma0": "noisy_sigma0", "loss": "td_loss"},
    "ddpg": {"replay_capacity": "buffer_size", "min_replay": "learning_starts",
             "critic_loss": "td_loss"},
}
# Run fields renamed, {old: new}: upgraded by RunConfig.from_dict, refused by override.
RUN_RENAMED: dict[str, str] = {"checkpoint_steps": "checkpoint_every"}
# Fields that were one number and are now a schedule ((update, value), ...).
NOW_SCHEDULES: dict[str, tuple[str, ...]] = {"ddpg": ("beta",)}


def upgrade_fields(algo: str, values: dict[str, Any]) -> dict[str, Any]:
    """An agent config dict as an older rljax wrote it, under today's field names; a
    number where a schedule is now expected becomes the constant schedule ``((0, x),)``."""
    renamed = RENAMED.get(algo, {})
    out = {}
    for name, value in values.items():
        new = renamed.get(name, name)
        if new != name and new in values:
            raise ValueError(f"{algo} config has both {name!r} and {new!r}, its new name")
        out[new] = value
    for name in NOW_SCHEDULES.get(algo, ()):
        value = out.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = ((0, value),)
    return out


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(name: str, tp: Any, value: Any) -> Any:
    """Converts ``value`` (a string from the command line, or a Python value) to ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(name, arg, value)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(f"bad value {value!r} for {name}: expected {_describe(tp)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"bad value {value!r} for {name}: expected true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            number = float(str(value).replace("_", ""))
        except ValueError:
            number = float("nan")
        if number.is_integer():
            return int(number)
        raise ValueError(f"bad value {value!r} for {name}: expected an integer")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return float(str(value).replace("_", ""))
        except ValueError:
            raise ValueError(f"bad value {value!r} for {name}: expected a number") from None
    if tp is str:
        return str(value)
    if origin is tuple and args and args[-1] is not Ellipsis:
        # A fixed-size tuple such as a schedule point tuple[int, float]: "0:1.0" or [0, 1.0].
        parts = value.strip("()[] ").split(":") if isinstance(value, str) else list(value)
        if len(parts) != len(args):
            raise ValueError(f"bad value {value!r} for {name}: expected "
                             f"{len(args)} values separated by ':'")
        return tuple(_coerce(name, tp_i, p.strip() if isinstance(p, str) else p)
                     for tp_i, p in zip(args, parts, strict=True))
    if origin is tuple:
        item = args[0] if args else str
        if isinstance(value, str):
            parts = [p for p in value.strip("()[] ").split(",") if p.strip()]
        else:
            parts = list(value)
        return tuple(_coerce(name, item, p.strip() if isinstance(p, str) else p) for p in parts)
    return value


def _check_field(config_cls: type, name: str) -> str:
    """The canonical name of ``name`` (``replay.batch_size`` for ``batch_size``), or
    ValueError naming an unknown field, with close matches and the allowed names, or a
    renamed one (:data:`RENAMED`) with its new name."""
    renamed = {old: new for a in ALGORITHMS.values() if a.name in RENAMED
               and a.config_cls is config_cls for old, new in RENAMED[a.name].items()}
    if name in renamed:
        raise ValueError(f"{config_cls.__name__} field {name!r} was renamed {renamed[name]!r}; "
                         f"set {renamed[name]} instead")
    return records.canonical(config_cls, name)


def build_config(config_cls: type, values: dict[str, Any], base: Any = None) -> Any:
    """Builds (or updates ``base`` of) ``config_cls`` from ``values``, keyed by canonical
    names (``replay.batch_size``, ``lr``) or by a record field's name alone
    (``batch_size``).

    Raises:
        ValueError: unknown field (with close matches and the allowed names), a field
            given twice, a value of the wrong type, or one the config's validation rejects.
    """
    coerced = {}
    for name, value in values.items():
        path = _check_field(config_cls, name)
        if path in coerced:
            raise ValueError(f"{path} is given twice (as {name!r} and another name); give it "
                             f"once")
        coerced[path] = _coerce(name, records.field_type(config_cls, path), value)
    return records.configure(config_cls if base is None else base, coerced)


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """Parses ``["field=value", ...]`` into a dict; ValueError on a malformed item."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--set expects field=value, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def parse_sweep(text: str | None) -> tuple[str, tuple[str, ...]] | None:
    """Parses ``"field=v1,v2,..."`` (``--sweep``) into ``(field, (v1, v2, ...))``."""
    if text is None:
        return None
    name, sep, values = text.partition("=")
    parts = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not name.strip() or len(parts) < 2:
        raise ValueError(f"--sweep expects field=value1,value2[,...] (two values or more), "
                         f"got {text!r}")
    return name.strip(), parts


def from_preset(preset: str | Preset, *, tensorboard: bool = True,
                wandb_project: str | None = None, **changes: Any) -> RunConfig:
    """A RunConfig from a preset, with run-level and agent-field overrides (as
    :func:`override` takes them)."""
    from rljax.run.presets import Preset, get_preset

    base = (preset if isinstance(preset, Preset) else get_preset(preset)).run
    return override(base, tensorboard=tensorboard, wandb_project=wandb_project, **changes)


def override(base: RunConfig, *, env: str | None = None, total_steps: int | None = None,
             seed: int | None = None, num_envs: int | None = None,
             num_seeds: int | None = None, sweep: tuple[str, Any] | str | None = None,
             devices: int | None = None, logdir: str | None = None,
             tensorboard: bool | None = None, wandb_project: str | None = None,
             eval_every: int | None = None, eval_episodes: int | None = None,
             checkpoint_every: int | None = None, chunk_steps: int | None = None,
             keep_checkpoints: int | None = None, **overrides: Any) -> RunConfig:
    """``base`` with run-level and agent-field overrides (None: as in ``base``).

    Agent fields may be given as strings (from ``--set``) or Python values.
    """
    from rljax.envs import check_task

    for old, new in RUN_RENAMED.items():
        if old in overrides:
            raise ValueError(f"run field {old!r} was renamed {new!r}; set {new} instead")
    algo = get_algorithm(base.algo)
    if num_envs is not None:
        overrides["num_envs"] = num_envs
    changes: dict[str, Any] = {"config": build_config(algo.config_cls, overrides,
                                                      base=base.config)}
    given = {records.canonical(algo.config_cls, k): k for k in overrides}
    if env is not None:
        check_task(env)
        changes["env_id"], changes["env_options"] = env, ()
    if isinstance(sweep, str):
        sweep = parse_sweep(sweep)
    if sweep is not None:
        changes["sweep"] = _coerce_sweep(algo.config_cls, *sweep)
        field = changes["sweep"][0]
        if field in given and field != "loop.num_envs":
            # (a num_envs sweep is refused on its own: it sets the pool's size)
            raise ValueError(f"{field} is both swept and set (sweep {field}=... and "
                             f"{given[field]}={overrides[given[field]]}); the sweep sets it, "
                             f"so give one")
    if env is not None and (env != base.env_id or base.threshold is None):
        # A preset's threshold is for its own task; another task brings its own.
        changes["threshold"] = _task_threshold(env)
    for name, value in (("total_steps", total_steps), ("seed", seed), ("num_seeds", num_seeds),
                        ("devices", devices), ("eval_every", eval_every),
                        ("eval_episodes", eval_episodes), ("checkpoint_every", checkpoint_every),
                        ("chunk_steps", chunk_steps), ("keep_checkpoints", keep_checkpoints)):
        if value is not None:
            changes[name] = _coerce(name, int, value)
    run = {"logdir": logdir or None, "tensorboard": tensorboard, "wandb_project": wandb_project}
    return dataclasses.replace(base, **changes, **{k: v for k, v in run.items() if v is not None})


def _coerce_sweep(config_cls: type, name: str, values: Any) -> tuple[str, tuple[float, ...]]:
    """``(field, values)`` with the field's canonical name and each value converted to its
    numeric type."""
    name = _check_field(config_cls, name)
    tp = records.field_type(config_cls, name)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        numeric = [a for a in typing.get_args(tp) if a in (int, float)]
        tp = numeric[0] if len(numeric) == 1 else tp
    if tp not in (int, float):
        raise ValueError(f"--sweep {name}: only numeric (int or float) hyperparameters can be "
                         f"swept, and {name} is {_describe(tp)}")
    values = tuple(values)
    if len(values) < 2:
        raise ValueError(f"--sweep {name}: give two values or more, got {list(values)!r}")
    return name, tuple(_coerce(name, tp, v) for v in values)


def _task_threshold(env_id: str) -> float | None:
    from rljax.envs import reward_threshold

    return reward_threshold(env_id)
