"""Run configuration, overrides from the command line, and their validation."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any

from rljax.run.presets import Preset, get_preset
from rljax.run.registry import get_algorithm


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
        checkpoint_steps: save a checkpoint every this many env steps (and at the end).
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
    checkpoint_steps: int = 100_000
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
        if isinstance(self.num_seeds, bool) or not isinstance(self.num_seeds, int) or not (
                1 <= self.num_seeds <= 4096):
            raise ValueError(f"num_seeds must be an integer in [1, 4096], got {self.num_seeds!r}")
        if isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int) or (
                self.eval_every < 0):
            raise ValueError(f"eval_every must be an integer >= 0, got {self.eval_every!r}")
        for name in ("total_steps", "chunk_steps", "checkpoint_steps", "eval_episodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not (
                0 <= self.seed < 2**31):
            raise ValueError(f"seed must be an integer in [0, 2**31), got {self.seed!r}")
        if self.sweep is not None:
            from rljax.parallel.sweep import check_sweep

            check_sweep(self.config, *self.sweep)
        if isinstance(self.devices, bool) or not isinstance(self.devices, int) or (
                self.devices < 1):
            raise ValueError(f"devices must be an integer >= 1, got {self.devices!r}")
        if self.devices > 1 and self.num_members == 1:
            from rljax.parallel import data_parallel

            if self.algo not in data_parallel.ALGORITHMS:
                raise ValueError(
                    f"devices={self.devices} with one agent means data-parallel learning, "
                    f"available for {', '.join(data_parallel.ALGORITHMS)}, not {self.algo}; "
                    f"give --seeds (a multiple of {self.devices}) to split {self.algo} "
                    "members over the devices")
            data_parallel.check_split(self.config.num_envs, self.devices,
                                      getattr(self.config, "batch_size", None))
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
        return {
            "preset": self.preset,
            "algo": self.algo,
            "env_id": self.env_id,
            "total_steps": self.total_steps,
            "seed": self.seed,
            "num_seeds": self.num_seeds,
            "threshold": self.threshold,
            "env_options": dict(self.env_options),
            "chunk_steps": self.chunk_steps,
            "checkpoint_steps": self.checkpoint_steps,
            "stop_on_solve": self.stop_on_solve,
            "eval_every": self.eval_every,
            "eval_episodes": self.eval_episodes,
            "logdir": self.logdir,
            "tensorboard": self.tensorboard,
            "wandb_project": self.wandb_project,
            "sweep": None if self.sweep is None else {self.sweep[0]: list(self.sweep[1])},
            "devices": self.devices,
            "config": dataclasses.asdict(self.config),
        }

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        algo = get_algorithm(data["algo"])
        config = build_config(algo.config_cls, data["config"])
        return cls(algo=data["algo"], env_id=data["env_id"], config=config,
                   total_steps=data["total_steps"], seed=data["seed"],
                   num_seeds=data.get("num_seeds", 1),
                   threshold=data.get("threshold"),
                   env_options=tuple(sorted(data.get("env_options", {}).items())),
                   chunk_steps=data.get("chunk_steps", 20_000),
                   checkpoint_steps=data.get("checkpoint_steps", 100_000),
                   stop_on_solve=data.get("stop_on_solve", False),
                   eval_every=data.get("eval_every", 0),
                   eval_episodes=data.get("eval_episodes", 10),
                   logdir=data.get("logdir", "runs"), preset=data.get("preset"),
                   tensorboard=data.get("tensorboard", True),
                   wandb_project=data.get("wandb_project"),
                   sweep=_sweep_from_dict(data.get("sweep")),
                   devices=data.get("devices", 1))


def _sweep_from_dict(data: dict | None) -> tuple[str, tuple[float, ...]] | None:
    if not data:
        return None
    (name, values), = data.items()
    return name, tuple(values)


def _field_types(config_cls: type) -> dict[str, Any]:
    return typing.get_type_hints(config_cls)


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


def _check_field(config_cls: type, name: str) -> None:
    """ValueError naming an unknown field, with close matches and the allowed names."""
    init_fields = [f.name for f in dataclasses.fields(config_cls) if f.init]
    if name not in init_fields:
        close = difflib.get_close_matches(name, init_fields, n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"unknown field {name!r} for {config_cls.__name__}{hint}; "
                         f"allowed: {', '.join(init_fields)}")


def build_config(config_cls: type, values: dict[str, Any], base: Any = None) -> Any:
    """Builds (or updates ``base`` of) ``config_cls`` from ``values``.

    Raises:
        ValueError: unknown field (with close matches and the allowed names), a
            value of the wrong type, or one the config's validation rejects.
    """
    types_ = _field_types(config_cls)
    coerced = {}
    for name, value in values.items():
        _check_field(config_cls, name)
        coerced[name] = _coerce(name, types_[name], value)
    if base is None:
        return config_cls(**coerced)
    return dataclasses.replace(base, **coerced)


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


def from_preset(preset: str | Preset, *, env: str | None = None, total_steps: int | None = None,
                seed: int | None = None, num_envs: int | None = None,
                num_seeds: int | None = None, sweep: tuple[str, Any] | str | None = None,
                devices: int | None = None,
                logdir: str | None = None, tensorboard: bool = True,
                wandb_project: str | None = None, eval_every: int | None = None,
                eval_episodes: int | None = None, **overrides: Any) -> RunConfig:
    """A RunConfig from a preset, with run-level and agent-field overrides.

    Agent fields may be given as strings (from ``--set``) or Python values.
    """
    p = preset if isinstance(preset, Preset) else get_preset(preset)
    algo = get_algorithm(p.algo)
    if num_envs is not None:
        overrides["num_envs"] = num_envs
    config = build_config(algo.config_cls, overrides, base=p.config)
    if env is not None:
        from rljax.envs.spec import check_task_id

        check_task_id(env)
    env_id = env or p.env_id
    if isinstance(sweep, str):
        sweep = parse_sweep(sweep)
    if sweep is not None:
        sweep = _coerce_sweep(algo.config_cls, *sweep)
    threshold = p.threshold if env is None or env == p.env_id else None
    if threshold is None and env is not None:
        threshold = _task_threshold(env_id)
    return RunConfig(
        algo=p.algo, env_id=env_id, config=config,
        total_steps=p.total_steps if total_steps is None else _coerce(
            "total_steps", int, total_steps),
        seed=0 if seed is None else _coerce("seed", int, seed), threshold=threshold,
        num_seeds=1 if num_seeds is None else _coerce("num_seeds", int, num_seeds),
        env_options=p.env_options if env is None else (), chunk_steps=p.chunk_steps,
        stop_on_solve=p.stop_on_solve,
        logdir=logdir or "runs", preset=p.name, tensorboard=tensorboard,
        wandb_project=wandb_project, sweep=sweep,
        devices=1 if devices is None else _coerce("devices", int, devices),
        eval_every=p.eval_every if eval_every is None else _coerce("eval_every", int, eval_every),
        eval_episodes=10 if eval_episodes is None else _coerce("eval_episodes", int,
                                                               eval_episodes))


def _coerce_sweep(config_cls: type, name: str, values: Any) -> tuple[str, tuple[float, ...]]:
    """``(field, values)`` with each value converted to the field's numeric type."""
    _check_field(config_cls, name)
    tp = _field_types(config_cls)[name]
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
    import envpool

    value = getattr(envpool.make_spec(env_id).config, "reward_threshold", None)
    return None if value is None else float(value)
