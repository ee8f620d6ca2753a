"""Loop and replay settings as typed records, written once for every agent.

An agent config holds its algorithm's fields plus one loop record (``loop``:
:class:`OnPolicyLoop` or :class:`OffPolicyLoop`) and, for agents that learn from replay, a
:class:`Replay` (``replay``). The loops, preflight checks, sweeps and the run config read
these typed attributes; the agents read the few they need (``config.loop.num_envs``).
Each agent gives its own defaults as record instances, e.g. ``loop: OffPolicyLoop =
OffPolicyLoop(num_envs=8, env_steps_per_update=4, grad_steps=8)``.

Fields that set an array shape or a loop length (so that changing them recompiles, and a
sweep cannot give each member its own value) carry ``metadata={"shape": True}``; fields
that size a network also carry ``"network": True`` (see :func:`shape_field`).

Names. A setting's canonical name is its dotted path (``replay.batch_size``,
``loop.num_envs``, ``lr``); the last part alone (``batch_size``) names it too, since no
two parts of a config share a field name. :func:`canonical` resolves either form (unknown
names get close matches), :func:`configure` builds or updates a config from such names.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from typing import Any

from rljax import validate
from rljax.validate import Schedule

_INT32_MAX = validate.INT32_LIMIT - 1


def shape_field(default: Any, *, network: bool = False) -> Any:
    """A dataclass field that sets an array shape or a loop length (``network``: the size
    of a network, such as its hidden layer widths)."""
    meta = {"shape": True, "network": True} if network else {"shape": True}
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OnPolicyLoop:
    """The on-policy loop: each update collects a rollout of ``rollout_len`` steps of
    every env (:mod:`rljax.loops.on_policy`).

    Attributes:
        num_envs: parallel environments.
        rollout_len: steps of every env per rollout (per update).
    """

    num_envs: int = shape_field(16)
    rollout_len: int = shape_field(5)

    def __post_init__(self):
        for name in ("num_envs", "rollout_len"):
            validate.integer(name, getattr(self, name), low=1)

    @property
    def steps_per_update(self) -> int:
        """Env steps over all envs per loop update."""
        return self.num_envs * self.rollout_len


@dataclasses.dataclass(frozen=True, kw_only=True)
class OffPolicyLoop:
    """The off-policy loop: each update steps every env ``env_steps_per_update`` times,
    storing each step in replay, then (once replay holds ``learning_starts`` transitions)
    takes ``grad_steps`` gradient steps (:mod:`rljax.loops.off_policy`).

    Attributes:
        num_envs: parallel environments.
        env_steps_per_update: steps of every env per update.
        grad_steps: gradient steps per update.
        random_steps: env steps (over all envs) acting uniformly at random before the
            agent's policy takes over, rounded up to whole updates; 0: none. Only agents
            with a random initial phase (TD3, SAC) take a nonzero value.
        unroll: unroll gradient steps and updates in the compiled chunk (XLA:CPU can run
            conv-net gradients faster unrolled).
    """

    num_envs: int = shape_field(1)
    env_steps_per_update: int = shape_field(1)
    grad_steps: int = shape_field(1)
    random_steps: int = 0
    unroll: bool = False

    def __post_init__(self):
        for name in ("num_envs", "env_steps_per_update", "grad_steps"):
            validate.integer(name, getattr(self, name), low=1)
        validate.integer("random_steps", self.random_steps, low=0, high=_INT32_MAX,
                         note=validate.INT32_NOTE)
        validate.boolean("unroll", self.unroll)

    @property
    def steps_per_update(self) -> int:
        """Env steps over all envs per loop update."""
        return self.num_envs * self.env_steps_per_update


@dataclasses.dataclass(frozen=True, kw_only=True)
class Replay:
    """Replay memory and sampling (:mod:`rljax.loops.memory`): uniform or proportional
    prioritized (Schaul et al. 2016), n-step, flat or Atari frame storage.

    Attributes:
        batch_size: transitions per gradient step.
        buffer_size: replay capacity in transitions.
        learning_starts: transitions in replay before learning starts, from
            ``batch_size`` to ``buffer_size``; None: a full buffer (frame replay: every
            row written). :attr:`min_replay` is the count.
        n_step: n-step return length (1: one-step TD).
        prioritized: proportional prioritized replay; False: uniform.
        alpha: priority exponent: priorities are ``(|delta| + priority_eps)^alpha``.
        beta: importance-sampling exponent schedule over loop updates,
            ``((update, value), ...)``.
        priority_eps: added to ``|delta|`` in priorities.
        initial_priorities: new transitions get their TD error as priority (flat replay
            only), else the largest priority so far.
        frame_replay: store Atari frames once (stacks rebuilt at sample time); None: for
            Atari tasks.
        flush_every: empty the replay after every this many sampled batches; None: never.
        priority_max_clip: TD errors are clipped to ``[-c, c]`` before they set
            priorities, so that none exceeds ``(c + priority_eps)^alpha`` and one outlier
            cannot take over the sampling; None: no clip.
    """

    batch_size: int = shape_field(256)
    buffer_size: int = shape_field(1_000_000)
    learning_starts: int | None = None
    n_step: int = shape_field(1)
    prioritized: bool = False
    alpha: float = 0.6
    beta: Schedule = ((0, 0.4), (1_000_000, 1.0))
    priority_eps: float = 1e-6
    initial_priorities: bool = False
    frame_replay: bool | None = None
    flush_every: int | None = None
    priority_max_clip: float | None = None

    def __post_init__(self):
        for name in ("batch_size", "n_step"):
            validate.integer(name, getattr(self, name), low=1)
        # Replay slots and the sampled-batch counter (flush_every divides it) are int32.
        validate.integer("buffer_size", self.buffer_size, low=1, high=_INT32_MAX,
                         note=validate.INT32_NOTE)
        if self.learning_starts is not None and self.batch_size > self.buffer_size:
            raise ValueError(f"batch_size must be at most buffer_size ({self.buffer_size:,}): "
                             f"learning starts once a batch is in replay, got "
                             f"{self.batch_size!r}")
        validate.integer("learning_starts", self.learning_starts, low=self.batch_size,
                         high=self.buffer_size, optional=True,
                         note="from batch_size to buffer_size; None: a full buffer")
        validate.integer("flush_every", self.flush_every, low=1, high=_INT32_MAX,
                         optional=True, note=validate.INT32_NOTE)
        for name in ("alpha", "priority_eps"):
            validate.number(name, getattr(self, name), low=0.0, high=1e6)
        validate.schedule("beta", self.beta, low=0.0, high=1.0)
        validate.number("priority_max_clip", self.priority_max_clip, low=0.0, low_open=True,
                        optional=True)
        for name in ("prioritized", "initial_priorities"):
            validate.boolean(name, getattr(self, name))
        validate.boolean("frame_replay", self.frame_replay, optional=True)

    @property
    def min_replay(self) -> int:
        """Transitions in replay before learning starts."""
        return self.buffer_size if self.learning_starts is None else self.learning_starts


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory:
    """A recurrent memory for an agent that has one (PPO-RNN, PQN-RNN;
    :mod:`rljax.agents.recurrent`).

    Attributes:
        core: the recurrent cell, a name in :data:`rljax.networks.recurrent.CORES` ("gru",
            "lstm", "rnn").
        size: units of the core (the carry's width).
        reset_every_step: reset the core's carry before every step (an ablation: the
            network keeps its shape but remembers nothing).
        separate_critic: PPO-RNN: the critic has a torso and core of its own, so the
            value loss does not move the actor's memory (False: one torso and core feed
            both heads). PQN, with one head, refuses it.
    """

    core: str = "gru"
    size: int = shape_field(128)
    reset_every_step: bool = False
    separate_critic: bool = shape_field(False, network=True)

    def __post_init__(self):
        if not isinstance(self.core, str):
            raise ValueError(f"memory.core must be the name of a recurrent core, got "
                             f"{self.core!r}")
        validate.integer("memory.size", self.size, low=1)
        validate.boolean("reset_every_step", self.reset_every_step)
        validate.boolean("separate_critic", self.separate_critic)


def record_field(default: Any, record: type) -> Any:
    """A config field holding an optional ``record`` (default None), named like the loop
    records: ``memory.size`` or ``size``."""
    return dataclasses.field(default=default, metadata={"record": record})


RECORDS = (OnPolicyLoop, OffPolicyLoop, Replay, Memory)


def no_random_phase(algo: str, loop: OffPolicyLoop) -> None:
    """Refuses ``loop.random_steps`` for an agent without a random initial phase."""
    if loop.random_steps:
        raise ValueError(f"random_steps must be 0 for {algo}, which has no random initial "
                         f"phase (TD3 and SAC have one), got {loop.random_steps!r}")


# --- names --------------------------------------------------------------------------


def _record_fields(config_cls: type) -> dict[str, type]:
    """``{field: record class}`` of the config's record fields (by their defaults)."""
    return {f.name: type(f.default) if isinstance(f.default, RECORDS)
            else f.metadata["record"] for f in dataclasses.fields(config_cls)
            if isinstance(f.default, RECORDS) or "record" in f.metadata}


def names(config_cls: type) -> dict[str, str]:
    """Every settable name of ``config_cls`` and its canonical (dotted) name: agent fields
    as themselves, record fields as ``record.field`` and by the field name alone."""
    out = {}
    records = _record_fields(config_cls)
    for f in dataclasses.fields(config_cls):
        if not f.init:
            continue
        if f.name in records:
            if "record" in f.metadata:  # an optional record is set as a whole too (None)
                out[f.name] = f.name
            for sub in dataclasses.fields(records[f.name]):
                out[f"{f.name}.{sub.name}"] = f"{f.name}.{sub.name}"
                out.setdefault(sub.name, f"{f.name}.{sub.name}")
        else:
            out[f.name] = f.name
    return out


def canonical(config_cls: type, name: str) -> str:
    """The canonical name of ``name`` (dotted or flat) in ``config_cls``.

    Raises:
        ValueError: an unknown name, with close matches and the allowed names.
    """
    known = names(config_cls)
    if name in known:
        return known[name]
    allowed = list(dict.fromkeys(known.values()))
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
    raise ValueError(f"unknown field {name!r} for {config_cls.__name__}{hint}; allowed: "
                     f"{', '.join(allowed)}")


def field_of(config_cls: type, name: str) -> dataclasses.Field:
    """The dataclass field that canonical ``name`` (``lr``, ``replay.alpha``) stands for."""
    head, _, tail = name.partition(".")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    if not tail:
        return fields[head]
    return {f.name: f for f in dataclasses.fields(_record_fields(config_cls)[head])}[tail]


def field_type(config_cls: type, name: str) -> Any:
    """The type of canonical ``name`` in ``config_cls`` (annotations resolved)."""
    import typing

    head, _, tail = name.partition(".")
    if not tail:
        return typing.get_type_hints(config_cls)[head]
    return typing.get_type_hints(_record_fields(config_cls)[head])[tail]


def get(config: Any, name: str) -> Any:
    """The value of canonical ``name`` in ``config``."""
    for part in name.split("."):
        if config is None:  # an optional record (memory) that is not set
            return None
        config = getattr(config, part)
    return config


def configure(config: Any, values: dict[str, Any] | None = None, /, **more: Any) -> Any:
    """``config`` (an instance, or a class for its defaults) with ``values`` and ``more``
    set, keyed by flat or dotted names; the records a value goes into keep their other
    fields: ``configure(DQNConfig, batch_size=64, lr=1e-3)`` or ``configure(config,
    {"replay.batch_size": 64})``.

    Raises:
        ValueError: an unknown name, or a value a record or the config refuses.
    """
    cls = config if isinstance(config, type) else type(config)
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in {**(values or {}), **more}.items():
        path = canonical(cls, name)
        head, _, tail = path.partition(".")
        if path in top or tail in nested.get(head, {}):
            raise ValueError(f"{path} is given twice (as {name!r} and another name)")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            top[path] = value
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for head, sub in nested.items():
        record = top.pop(head, None)
        if record is None:
            record = defaults[head] if isinstance(config, type) else getattr(config, head)
        if record is None:  # an optional record (memory) not set yet: from its defaults
            record = field_of(cls, head).metadata["record"]()
        top[head] = dataclasses.replace(record, **sub)
    return cls(**top) if isinstance(config, type) else dataclasses.replace(config, **top)


def from_dict(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a config as JSON: records as dicts, or older flat names) as flat
    ``{canonical name: value}`` for :func:`configure`."""
    records = _record_fields(config_cls)
    out = {}
    for name, value in values.items():
        if name in records and isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in value.items()})
        else:
            out[name] = value
    return out


def shape_names(config: Any) -> tuple[str, ...]:
    """Canonical names of the fields of ``config`` that set a shape or a loop length."""
    cls = config if isinstance(config, type) else type(config)
    return tuple(n for n in sorted(set(names(cls).values()))
                 if field_of(cls, n).metadata.get("shape"))


def network_sizes(config: Any) -> dict[str, Any]:
    """``{name: value}`` of the fields that size the config's networks and are in use
    (a non-empty tuple of widths, a count above 1)."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("network") and value and not (isinstance(value, int)
                                                         and value <= 1):
            out[f.name] = value
    return out


def with_value(config: Any, name: str, value: Any) -> Any:
    """A copy of the frozen ``config`` with canonical ``name`` set to ``value`` (a traced
    scalar in a sweep), bypassing validation, which the concrete values already passed."""
    head, _, tail = name.partition(".")
    if tail:
        value = with_value(getattr(config, head), tail, value)
    out = copy.copy(config)
    object.__setattr__(out, head, value)
    return out
