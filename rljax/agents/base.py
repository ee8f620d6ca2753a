"""The one contract every rljax agent provides.

An agent is a bundle of pure functions over an immutable train state, in the manner of
optax's ``GradientTransformation``: nothing is hidden in objects, and the loops in
:mod:`rljax.loops` call the same five functions whether the agent learns from rollouts
(on-policy) or from replay (off-policy).

Every agent is built by a factory of one signature, ``make_<algo>(config, spec, *,
parallel=ONE_DEVICE) -> Agent``, which builds the agent's networks and optimizers once and
closes its pure functions over them (``functools.partial`` over module-level functions).
Data-parallel learning is not the agent's business: the parallel layer
(:mod:`rljax.parallel.data_parallel`) passes a :class:`Parallel` record whose
``grad_transform`` (averaging gradients over devices) the factory chains in front of the
agent's optimizers, and handles everything else.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax.numpy as jnp
import optax

from rljax import validate
from rljax.envs.spec import EnvSpec
from rljax.gradients import with_grad_transform
from rljax.networks.recurrent import CORES, check_core
from rljax.records import Memory
from rljax.types import WHOLE, Array, Metrics, Params, PRNGKey, Split


class InitFn(Protocol):
    def __call__(self, key: PRNGKey) -> Any:
        """The agent's initial train state."""


class ActFn(Protocol):
    def __call__(self, state: Any, obs: Array, key: PRNGKey, step: Array,
                 new_episode: Array) -> tuple[Array, dict[str, Array], Any]:
        """The exploring policy for a batch of envs.

        Args:
            state: the agent's train state (exploration state such as OU noise lives here).
            obs: observations ``[B, *obs_shape]``.
            key: PRNG key for this step.
            step: loop updates done so far (schedules such as epsilon read it).
            new_episode: ``[B]`` True where the previous step ended an episode.

        Returns:
            ``(action [B, ...], extras, state)``: ``extras`` (a dict of ``[B, ...]`` arrays,
            possibly empty) travels with the action into an on-policy rollout (log-probs,
            values).
        """


class Update(NamedTuple):
    """What one learning step returns.

    Attributes:
        state: the new train state.
        metrics: scalar metrics of the step.
        td_error: ``[N]`` per-sample TD errors, from which prioritized replay sets new
            priorities (None for agents that learn from rollouts).
    """

    state: Any
    metrics: Metrics
    td_error: Array | None = None


class UpdateFn(Protocol):
    def __call__(self, state: Any, batch: Any, key: PRNGKey) -> Update:
        """One learning step on a :class:`rljax.types.Rollout` or a replay
        :class:`rljax.types.Sample`."""


class PolicyFn(Protocol):
    def __call__(self, params: Params, obs: Array) -> Array:
        """The noise-free policy (evaluation): actions ``[B, ...]`` for ``obs [B, ...]``."""


class PolicyInitFn(Protocol):
    def __call__(self, batch_size: int) -> Any:
        """The initial carry (memory) of a stateful policy for ``batch_size`` envs."""


class StatefulPolicyFn(Protocol):
    def __call__(self, params: Params, obs: Array, carry: Any,
                 new_episode: Array) -> tuple[Array, Any]:
        """The noise-free policy of an agent with memory: ``(actions [B, ...], carry)``, the
        carry reset before the step where ``new_episode [B]`` (the previous step ended an
        episode) and advanced by it. Agents with ``Agent.policy_init`` have this policy."""


class ParamsFn(Protocol):
    def __call__(self, state: Any) -> Params:
        """The part of the state that :class:`PolicyFn` needs."""


class TdErrorFn(Protocol):
    def __call__(self, state: Any, transition: Any) -> Array:
        """Noise-free TD errors ``[N]`` of new transitions (their initial priorities)."""


class Agent(NamedTuple):
    """An agent as a bundle of pure functions (see the module docstring).

    Attributes:
        init: ``init(key) -> state``.
        act: ``act(state, obs, key, step, new_episode) -> (action, extras, state)``.
        update: ``update(state, batch, key) -> Update(state, metrics, td_error)``.
        policy: ``policy(params, obs) -> action``, noise-free; for an agent with memory
            (``policy_init`` set) ``policy(params, obs, carry, new_episode) -> (action,
            carry)`` (:class:`StatefulPolicyFn`).
        params: ``params(state) -> params`` for ``policy``.
        td_error: optional ``td_error(state, transition) -> [N]`` giving new transitions
            their TD error as initial priority (None: the agent cannot).
        policy_init: for agents with memory, ``policy_init(batch_size) -> carry``, the
            initial carry of the stateful ``policy``; None: ``policy`` is stateless.

    An agent with memory keeps the memory of its envs in its train state: ``act`` resets
    it where ``new_episode`` and advances it, and returns what ``update`` needs to replay
    the rollout's memory in ``extras`` (see :mod:`rljax.agents.recurrent`).
    """

    init: InitFn
    act: ActFn
    update: UpdateFn
    policy: PolicyFn | StatefulPolicyFn
    params: ParamsFn
    td_error: TdErrorFn | None = None
    policy_init: PolicyInitFn | None = None


def stateful_policy(agent: Agent) -> tuple[PolicyInitFn, StatefulPolicyFn]:
    """``(policy_init, policy)`` of any agent in the stateful form: an agent without memory
    gets an empty carry and its policy ignores it."""
    if agent.policy_init is not None:
        return agent.policy_init, agent.policy

    def policy(params, obs, carry, new_episode):
        del new_episode
        return agent.policy(params, obs), carry

    return (lambda batch_size: ()), policy


def check_epochs(config: Any) -> None:
    """Validates an on-policy config's ``num_epochs`` and ``num_minibatches``: integers >= 1,
    the minibatches dividing a rollout's ``num_envs * rollout_len`` steps."""
    for name in ("num_epochs", "num_minibatches"):
        validate.integer(name, getattr(config, name), low=1)
    loop = config.loop
    if loop.steps_per_update % config.num_minibatches:
        raise ValueError(
            f"num_minibatches must divide num_envs * rollout_len = {loop.num_envs} * "
            f"{loop.rollout_len} = {loop.steps_per_update}, got {config.num_minibatches!r}")


def check_memory(config: Any) -> None:
    """Validates an on-policy config's ``memory``: None, a :class:`rljax.records.Memory`
    whose core is one of :data:`rljax.networks.recurrent.CORES`, or a core's name (made
    ``Memory(core=name)`` here); with memory, minibatches are whole env sequences, so
    ``num_minibatches`` must divide ``num_envs``."""
    memory = config.memory
    if isinstance(memory, str):
        memory = Memory(core=memory)
        object.__setattr__(config, "memory", memory)  # before the frozen config is used
    if memory is None:
        return
    if not isinstance(memory, Memory):
        raise ValueError(f"memory must be None, a core's name ({', '.join(CORES)}) or a "
                         f"rljax.records.Memory, got {memory!r}")
    check_core(memory.core)
    if config.loop.num_envs % config.num_minibatches:
        raise ValueError(f"with memory, minibatches hold whole env sequences: num_minibatches "
                         f"must divide num_envs = {config.loop.num_envs}, got "
                         f"{config.num_minibatches!r}")


def upgrade_on_policy_record(data: dict) -> dict:
    """A saved PPO or PQN run (config.json, a checkpoint manifest's ``run``) as an older
    rljax wrote it, in today's form: ``memory``, ``memory_size`` and
    ``memory_reset_every_step`` become one :class:`rljax.records.Memory`, and the agent
    config's ``total_updates`` (the schedule length in loop updates, None: the run's)
    becomes the run's ``schedule_steps``."""
    config = dict(data.get("config") or {})
    out = dict(data)
    if ("memory_size" in config or "memory_reset_every_step" in config
            or isinstance(config.get("memory"), str)):
        core = config.pop("memory", None)
        size = config.pop("memory_size", Memory.size)
        reset = config.pop("memory_reset_every_step", False)
        config["memory"] = (None if core is None else
                            {"core": core, "size": size, "reset_every_step": reset})
    updates = config.pop("total_updates", None)
    if updates is not None and out.get("schedule_steps") is None:
        loop = config.get("loop") or config  # records, or the flat names of older runs
        out["schedule_steps"] = updates * loop["num_envs"] * loop["rollout_len"]
    out["config"] = config
    return out


class Parallel(NamedTuple):
    """What an agent needs to know of data-parallel learning, the same record for every
    ``make_<algo>`` (the parallel layer fills it in; the default is one device).

    Attributes:
        grad_transform: an optax transformation applied to the gradients before each of
            the agent's optimizers (the parallel layer's averages them over devices); None:
            nothing.
        split: how one shard sees every shard's envs (agents with running statistics of
            their rollouts or memory of all envs use it); default: one device.
        batch_norm_axis: the mesh axis over which batch-norm layers take their training
            statistics (the one place an agent names an axis: flax's BatchNorm can take the
            whole batch's statistics only through it, and averaging gradients afterwards
            cannot recover them); None: the local batch's.
    """

    grad_transform: optax.GradientTransformation | None = None
    split: Split = WHOLE
    batch_norm_axis: str | None = None

    def optimizer(self, optimizer: optax.GradientTransformation
                  ) -> optax.GradientTransformation:
        """``optimizer`` with :attr:`grad_transform` in front of it."""
        return with_grad_transform(optimizer, self.grad_transform)


ONE_DEVICE = Parallel()
"""The default :class:`Parallel`: one device, nothing to average or gather."""


class RunLength(NamedTuple):
    """What an agent may know of the length of the run that trains it, the same record for
    every ``make_<algo>`` and ``check_run`` (the run layer fills it in from its budget).

    Attributes:
        updates: loop updates the run makes (its env steps over ``loop.steps_per_update``,
            rounded up).
        schedule_updates: loop updates over which schedules tied to the run's length run
            (a learning rate annealed to 0): ``updates``, or the saved run's on a resume
            with another budget (``schedule_steps`` of the run).
    """

    updates: int
    schedule_updates: int


# The rljax agents that take each kind of action space, and those that need flat
# observations (see check_action_space).
DISCRETE_AGENTS = ("a2c", "dqn", "pqn", "ppo")
CONTINUOUS_AGENTS = ("ddpg", "td3", "sac", "ppo")
FLAT_OBS_AGENTS = ("ddpg", "td3", "sac")


def check_action_space(algo: str, spec: EnvSpec, *, discrete: bool,
                       flat_obs: bool = False) -> None:
    """ValueError, before anything is built, unless ``spec``'s actions are of the kind the
    agent ``algo`` (its name in messages, e.g. "DQN") takes: discrete, or
    (``discrete=False``) a bounded vector ``[A]``; with ``flat_obs``, observations must be
    flat too. The message names the task, its action space and the rljax agents that fit.
    """
    if spec.discrete:
        space, fits = f"a discrete one ({spec.num_actions} actions)", DISCRETE_AGENTS
    else:
        space = (f"a continuous one (Box of shape {spec.action_shape}, low {spec.action_low}, "
                 f"high {spec.action_high})")
        fits = CONTINUOUS_AGENTS
    kind = "discrete" if spec.discrete else "continuous"
    if spec.discrete != discrete or not discrete and (len(spec.action_shape) != 1
                                                      or spec.action_low is None):
        wanted = "a discrete" if discrete else "a continuous (bounded, [A]-shaped)"
        raise ValueError(f"{algo} needs {wanted} action space, but {spec.task_id} has "
                         f"{space}; rljax agents for a {kind} action space: "
                         f"{', '.join(fits)}")
    if flat_obs and len(spec.obs_shape) != 1:
        others = [a for a in fits if a not in FLAT_OBS_AGENTS]
        raise ValueError(f"{algo} needs flat observations, but {spec.task_id} has "
                         f"observations of shape {spec.obs_shape}; rljax agents for them "
                         f"and a {kind} action space: {', '.join(others)}")



def annealed_learning_rate(lr: float, anneal: bool, run: RunLength | None,
                           steps_per_update: int) -> optax.Schedule:
    """Learning rate against the optimizer's step count: ``lr``, or with ``anneal``
    ``lr * max(0, 1 - u / total_updates)`` where ``u`` is the loop update the step belongs
    to (``steps_per_update`` optimizer steps each) and ``total_updates`` the run's
    ``schedule_updates``, as in PPO's reference implementations."""
    if not anneal:
        return lambda count: jnp.asarray(lr, jnp.float32)
    total_updates = run.schedule_updates

    def schedule(count):
        frac = 1.0 - (count // steps_per_update).astype(jnp.float32) / total_updates
        return lr * jnp.maximum(frac, 0.0)

    return schedule
