"""Run configuration, overrides from the command line, and their validation."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from rljax import records, validate
from rljax.run import env_choice, settings
from rljax.run.registry import ALGORITHMS, get_algorithm
from rljax.run.settings import coerce, setting


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that defines a training run.

    A field made with :func:`~rljax.run.settings.setting` is a run setting: its metadata
    gives its command-line option, its ``rljax.train`` keyword, its bounds and whether a
    resume may change it (:data:`OPTIONS`, :data:`RESUMABLE_CHANGES`).

    Attributes:
        algo: algorithm name.
        env_id: task id (``CartPole-v1``, ``gymnax:CartPole-v1``, a registered backend's
            ``PREFIX:NAME``, or ``module:callable`` of an env factory); an env object given
            here (or as ``env=``) becomes the task ``object:NAME`` (:mod:`rljax.envs.objects`).
        config: the agent's config dataclass.
        total_steps: env-step budget over all envs; rounded up to whole chunks.
        seed: seeds parameters, exploration and the envs.
        num_seeds: independent runs with seeds ``seed .. seed + num_seeds - 1`` in one
            compiled program (one envpool pool of ``num_seeds * num_envs`` envs).
        threshold: solve threshold for ``solved_at_step`` (None: never); the task's own
            unless given (``solve_threshold=``).
        env_options: options of the env backend as ``((name, value), ...)``
            (``rljax.envs.make``'s keyword arguments: ``obs_indices``, ``max_episode_steps``).
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
        schedule_steps: env steps over which the agent's schedules tied to the run's length
            run (a learning rate annealed to 0, given to the agent as
            :class:`rljax.agents.base.RunLength`); None: ``total_steps``. A resume with
            another budget keeps the saved run's (:func:`rljax.run.resuming.keep_schedules`).
        cpu_threads: threads of XLA's CPU thread pool (0: one per CPU the process may run
            on, JAX's default); set before JAX starts its backends
            (:func:`rljax.cpu_threads.set_cpu_threads`), so it applies to the first run of
            a process only.
        cpu_devices: on a CPU, the host devices the members (seeds x sweep values) are
            split over in one program, one per core (:mod:`rljax.parallel.devices`); JAX is
            asked for them before it starts its backends
            (:func:`rljax.cpu_threads.set_cpu_devices`). Ignored where the run is on an
            accelerator.
    """

    algo: str
    env_id: str = setting(help="task id to use instead of the preset's, or module:callable of "
                          "a factory returning an env object", keyword="env")
    config: Any
    total_steps: int = setting(help="env-step budget over all envs", low=1,
                               high=validate.INT32_LIMIT - 1, resumable=True,
                               note="below 2**31: the training loop counts env steps in int32")
    seed: int = setting(0, help="random seed (default {default})", low=0,
                        high=validate.INT32_LIMIT - 1, learning=False)
    num_seeds: int = setting(1, help="train N independent seeds (seed .. seed+N-1) in one "
                             "program", flag="--seeds", metavar="N", low=1, high=4096,
                             learning=False)
    threshold: float | None = setting(None, help="mean return that counts as solved (default: "
                                      "the task's own, if it has one)", metavar="RETURN",
                                      keyword="solve_threshold", resumable=True, learning=False)
    env_options: tuple[tuple[str, Any], ...] = ()
    chunk_steps: int = setting(20_000, help="env steps per compiled chunk: the cadence of "
                               "metrics rows, progress and checkpoints (default: the preset's)",
                               metavar="STEPS", low=1, resumable=True)
    logdir: str = setting("runs", help="parent folder of run directories (default {default}/)",
                          resumable=True, learning=False)
    preset: str | None = None
    checkpoint_every: int = setting(100_000, help="save a checkpoint every STEPS env steps "
                                    "(default {default}; always at the end)", metavar="STEPS",
                                    low=1, resumable=True, learning=False)
    keep_checkpoints: int = setting(2, help="keep the N newest checkpoints (default {default})",
                                    metavar="N", low=1, resumable=True, learning=False)
    stop_on_solve: bool = setting(False, resumable=True)
    eval_every: int = setting(0, help="evaluate the noise-free policy every STEPS env steps "
                              "(default {default}: never)", metavar="STEPS", low=0,
                              resumable=True, learning=False)
    eval_episodes: int = setting(10, help="episodes per evaluation ({default})", metavar="N",
                                 low=1, resumable=True, learning=False)
    tensorboard: bool = setting(True, help="do not write TensorBoard event files",
                                flag="--no-tensorboard", resumable=True, learning=False)
    wandb_project: str | None = setting(None, help="also log to this Weights & Biases project "
                                        "(needs wandb)", flag="--wandb", metavar="PROJECT",
                                        resumable=True, learning=False)
    sweep: tuple[str, tuple[float, ...]] | None = setting(
        None, help="train one agent per value of a numeric hyperparameter, all in one program "
        "(times --seeds); e.g. --sweep actor_lr=1e-4,5e-4,1e-3", metavar="FIELD=V1,V2,...",
        once="a run sweeps one field: run one sweep per field")
    devices: int = setting(1, help="split the seeds (x sweep values) over N devices in one "
                           "program (all processes' devices with --distributed); one agent "
                           "learns data-parallel over them", metavar="N", low=1)
    schedule_steps: int | None = setting(
        None, help="env steps over which the agent's run-length schedules run, such as a "
        "learning rate annealed to 0 (default: total_steps; a resume keeps the saved run's)",
        metavar="STEPS", low=1, high=validate.INT32_LIMIT - 1)
    cpu_threads: int = setting(0, help="threads of XLA's CPU thread pool (0: one per CPU; "
                               "default: the preset's): 1 is faster for small networks on a "
                               "CPU", metavar="N", low=0, resumable=True, learning=False)
    cpu_devices: int = setting(1, help="on a CPU, split the seeds (x sweep values) over N host "
                               "devices in one program, one per core (default: the preset's; "
                               "1: one device)", metavar="N", low=1, high=4096, resumable=True,
                               learning=False)

    def __post_init__(self):
        if not isinstance(self.env_id, str):  # an env object, adapted once
            from rljax.envs import objects

            env_id, options = objects.add(self.env_id)
            object.__setattr__(self, "env_id", env_id)
            object.__setattr__(self, "env_options", tuple(sorted(
                {**dict(self.env_options), **dict(options)}.items())))
        algo = get_algorithm(self.algo)
        if not isinstance(self.config, algo.config_cls):
            raise ValueError(f"config for {self.algo} must be a {algo.config_cls.__name__}, "
                             f"got {type(self.config).__name__}")
        settings.check(self)
        validate.number("threshold", self.threshold, optional=True)
        if self.sweep is not None:
            from rljax.parallel.sweep import check_sweep

            check_sweep(self.config, *self.sweep)
            # One name per field: the canonical one (replay.alpha for alpha).
            object.__setattr__(self, "sweep", (records.canonical(type(self.config),
                                                                 self.sweep[0]),
                                               tuple(self.sweep[1])))
        if self.devices > 1 and self.num_members == 1:
            from rljax.parallel import data_parallel

            off_policy = isinstance(self.config.loop, records.OffPolicyLoop)
            data_parallel.check_split(self.config.loop.num_envs, self.devices,
                                      self.config.replay.batch_size if off_policy else None)
        if self.devices > 1 and self.num_members > 1 and self.num_members % self.devices:
            raise ValueError(f"{self.num_members} members (seeds x sweep values) cannot be "
                             f"split evenly over {self.devices} devices; use a multiple of "
                             f"{self.devices}")
        if self.cpu_devices > 1 and self.devices > 1:
            raise ValueError(f"cpu_devices={self.cpu_devices} and devices={self.devices} both "
                             f"split the members over devices; give one of them")
        if self.cpu_devices > 1 and self.num_members % self.cpu_devices:
            raise ValueError(f"{self.num_members} members (seeds x sweep values) cannot be "
                             f"split evenly over cpu_devices={self.cpu_devices} host CPU "
                             f"devices; use a multiple of {self.cpu_devices}, or cpu_devices=1")
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
        data = algo.upgrade_record(data)
        if data.get("schedule_steps") is not None:
            values["schedule_steps"] = data["schedule_steps"]
        values["config"] = build_config(algo.config_cls, records.from_dict(
            algo.config_cls, upgrade_fields(data["algo"], data["config"])))
        if "env_options" in values:  # JSON wrote tuple values (obs_indices) as lists
            values["env_options"] = tuple(sorted(
                (k, tuple(v) if isinstance(v, list) else v)
                for k, v in values["env_options"].items()))
        if "sweep" in values:
            values["sweep"] = _sweep_from_dict(values["sweep"], data["algo"])
        return cls(**values)


# Derived from the fields' metadata (rljax.run.settings): the options users set by flag
# or keyword, the fields a resume may change, and those that do not change what is learned.
OPTIONS: tuple[settings.Option, ...] = settings.options(RunConfig)
RESUMABLE_CHANGES: tuple[str, ...] = settings.resumable(RunConfig)
NOT_LEARNING: tuple[str, ...] = settings.not_learning(RunConfig)


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
    if out.get("anneal_lr") is False and out.get("total_updates") is not None:
        out["total_updates"] = None  # written by older runs, where it changed nothing
    for name in NOW_SCHEDULES.get(algo, ()):
        value = out.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = ((0, value),)
    return out


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
        coerced[path] = coerce(name, records.field_type(config_cls, path), value)
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
    values = values.strip()
    parts = tuple(v.strip() for v in (values[:-1] if values.endswith(",") else values).split(","))
    if not sep or not name.strip() or len(parts) < 2 or not all(parts):
        raise ValueError(f"--sweep expects field=value1,value2[,...] (two values or more, "
                         f"none empty), got {text!r}")
    return name.strip(), parts


def override(base: RunConfig, **changes: Any) -> RunConfig:
    """``base`` with run settings (:data:`OPTIONS`, by keyword), ``env_options`` and agent
    fields changed; a value of None keeps ``base``'s, an empty text is refused.

    Values may be strings (from the command line) or Python values. ``env`` may also be
    an env object, with ``env_params`` and ``max_episode_steps``
    (:func:`rljax.run.env_choice.env_changes`).
    Another ``env`` keeps ``base``'s env options (a memory preset's ``obs_indices``) where
    they apply to it, and refuses them where they do not; ``env_options`` (a dict)
    replaces them.
    """
    env_fields = env_choice.env_changes(base, changes)
    for old, new in RUN_RENAMED.items():
        if old in changes:
            raise ValueError(f"run field {old!r} was renamed {new!r}; set {new} instead")
    given = {o.name: (o, changes.pop(o.keyword)) for o in settings.options(type(base))
             if o.keyword in changes}
    for option, value in given.values():
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"{option.flag} ({option.keyword}) is empty; give a value, or "
                             f"leave it out for the default")
    given = {k: (o, v) for k, (o, v) in given.items() if v is not None}
    agent = {k: v for k, v in changes.items() if v is not None or k != "num_envs"}
    algo = get_algorithm(base.algo)
    new: dict[str, Any] = {"config": build_config(algo.config_cls, agent, base=base.config)}
    named = {records.canonical(algo.config_cls, k): k for k in agent}
    for name, (option, value) in given.items():
        if name != "sweep":
            new[name] = coerce(name, settings.without_none(option.type), value)
    new = {**env_fields, **new}  # a given solve_threshold over the task's
    if "sweep" in given:
        sweep = given["sweep"][1]
        new["sweep"] = _coerce_sweep(algo.config_cls,
                                     *(parse_sweep(sweep) if isinstance(sweep, str) else sweep))
        field = new["sweep"][0]
        if field in named and field != "loop.num_envs":
            # (a num_envs sweep is refused on its own: it sets the pool's size)
            raise ValueError(f"{field} is both swept and set (sweep {field}=... and "
                             f"{named[field]}={agent[named[field]]}); the sweep sets it, "
                             f"so give one")
    _check_priorities(new["config"], [*named, *new.get("sweep", ("",))[:1]])
    return dataclasses.replace(base, **new)


# Replay fields that only prioritized replay reads.
_PRIORITY_FIELDS = ("replay.alpha", "replay.beta", "replay.priority_eps",
                    "replay.priority_max_clip", "replay.initial_priorities")


def _check_priorities(config: Any, given: list[str]) -> None:
    """Refuses a prioritized-replay field set or swept where replay is uniform (it would
    change nothing: a sweep over it trains the same agent again and again)."""
    replay = getattr(config, "replay", None)
    if replay is None or replay.prioritized:
        return
    for name in given:
        if name in _PRIORITY_FIELDS:
            raise ValueError(f"{name} only acts with prioritized replay, and this run's "
                             f"replay is uniform (replay.prioritized=False); set "
                             f"prioritized=true as well, or leave {name.split('.')[-1]} out")


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
                         f"swept, and {name} is {settings.describe(tp)}")
    values = tuple(values)
    if len(values) < 2:
        raise ValueError(f"--sweep {name}: give two values or more, got {list(values)!r}")
    return name, tuple(coerce(name, tp, v) for v in values)
