"""The Python API: train, load and evaluate runs.

    run = rljax.train("cartpole-a2c", total_steps=300_000, seed=1)
    run.policy(obs)                 # greedy action(s), NumPy in and out
    run.save()                      # checkpoint into run.run_dir
    more = rljax.train(resume=run.run_dir, total_steps=600_000)   # continue it
    again = rljax.load(run.run_dir)
    rljax.evaluate(again, episodes=20)
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any

import jax
import numpy as np

from rljax import validate
from rljax.run import best as best_checkpoint
from rljax.run import checkpoint, preflight, resuming, startup
from rljax.run.build import build
from rljax.run.config import OPTIONS, RunConfig, override
from rljax.run.driver import train_run
from rljax.run.logging import read_json, read_jsonl
from rljax.run.presets import Preset, from_preset
from rljax.run.rundir import manifest, member_slice


@dataclasses.dataclass
class Run:
    """A trained (or loaded) run.

    Attributes:
        run_dir: where config.json, metrics.jsonl, summary.json and the checkpoint live.
        config: the :class:`RunConfig` it ran with.
        state: the train state (``LoopState``: agent, replay, counters, env statistics).
        metrics: one dict per logged chunk, as in metrics.jsonl.
        summary: as in summary.json.
        agent: the agent's functions.
        spec: the environment's :class:`~rljax.envs.EnvSpec`.
    """

    run_dir: str
    config: RunConfig
    state: Any
    metrics: list[dict]
    summary: dict
    agent: Any = dataclasses.field(repr=False)
    spec: Any = dataclasses.field(repr=False)
    _memory: Any = dataclasses.field(default=None, init=False, repr=False)

    @functools.cached_property
    def _greedy(self):
        return jax.jit(self.agent.policy)

    @property
    def params(self) -> Any:
        """Parameters of the evaluation policy."""
        return self.agent.params(self.state.agent)

    def policy(self, obs: Any, new_episode: Any = False) -> np.ndarray:
        """Greedy (noise-free) actions.

        Works on one observation (``obs_shape``, e.g. straight from a gymnasium env
        with the same spaces, returning one action) or a batch ``[N, *obs_shape]``.
        Observations are cast to the dtype the agent was trained on.

        An agent with memory (``agent.policy_init`` set, e.g. PPO or PQN with ``memory``)
        keeps the memory of the env(s) it is called for between calls: pass
        ``new_episode=True`` (or ``[N]`` flags) with the first observation of an episode,
        or call :meth:`reset_memory` after resetting the env(s). Calling it for another
        number of envs starts from a fresh memory. Stateless agents ignore
        ``new_episode``.
        """
        if self.config.num_members > 1:
            raise ValueError(f"policy serves one agent, but this run holds "
                             f"{self.config.num_members} members (seeds x sweep values); "
                             f"evaluate them with rljax.evaluate, or train one member alone")
        obs = np.asarray(obs)
        single = obs.shape == self.spec.obs_shape
        if not single and obs.shape[1:] != self.spec.obs_shape:
            raise ValueError(f"observation shape {obs.shape} does not match the run's "
                             f"{self.spec.obs_shape} (or a batch of them)")
        if obs.dtype.kind not in "biuf":
            raise ValueError(f"observations must be numbers, got dtype {obs.dtype}")
        if obs.dtype.kind == "f" and not np.all(np.isfinite(obs)):
            raise ValueError("observation holds NaN or infinite values; the policy's action "
                             "for it would be meaningless")
        batch = (obs[None] if single else obs).astype(self.spec.obs_dtype)
        if self.agent.policy_init is None:
            action = np.asarray(self._greedy(self.params, batch))
        else:
            n = batch.shape[0]
            if self._memory is None or self._memory[0] != n:
                self._memory = (n, self.agent.policy_init(n))
            flags = np.broadcast_to(np.asarray(new_episode, bool), (n,))
            action, carry = self._greedy(self.params, batch, self._memory[1], flags)
            self._memory = (n, carry)
            action = np.asarray(action)
        return action[0] if single else action

    def reset_memory(self) -> None:
        """Forgets the memory :meth:`policy` keeps (agents with memory; a no-op
        otherwise): the next call starts from the initial carry."""
        self._memory = None

    def __call__(self, obs: Any) -> np.ndarray:
        return self.policy(obs)

    def save(self) -> str:
        """Writes a checkpoint of the whole train state into ``run_dir`` (replacing one of
        the same env step); returns its folder."""
        return checkpoint.save(self.run_dir, self.state, manifest(self.config),
                               keep=self.config.keep_checkpoints)


def train(preset_or_config: str | Preset | RunConfig | None = None, *, progress: bool = False,
          run_dir: str | None = None, resume: str | None = None,
          from_checkpoint: int | None = None, **overrides: Any) -> Run:
    """Trains an agent and returns the :class:`Run`.

    Args:
        preset_or_config: a preset name (see ``rljax presets``), a Preset, or a
            RunConfig; None with ``resume``: the configuration the checkpoint was saved
            with (``overrides`` apply to it).
        progress: draw the progress line on stderr.
        run_dir: run directory (default: a new folder under ``logdir``).
        resume: a run directory to continue from its newest checkpoint; only the fields
            of :data:`rljax.run.config.RESUMABLE_CHANGES` may differ from it.
        from_checkpoint: with ``resume``, the env step of the checkpoint to continue from
            instead of the newest (say, the intact one before a corrupted newest); the
            newer ones are moved to ``RUN_DIR/checkpoint.superseded/``.
        **overrides: the run settings (:data:`rljax.run.config.OPTIONS`: {options};
            ``sweep`` as ``"field=v1,v2"`` or ``("field", [v1, v2])``), ``num_envs`` and
            any field of the agent's config (not with a RunConfig).
    """
    started = time.perf_counter()
    preflight.check_api_call(preset_or_config, overrides, progress)
    run_dir = preflight.check_path("run_dir", run_dir, optional=True)
    resume = preflight.check_path("resume", resume, optional=True)
    validate.integer("from_checkpoint", from_checkpoint, low=0, optional=True)
    if preset_or_config is None:
        if resume is None:
            raise ValueError("train needs a preset or RunConfig, or resume=RUN_DIR")
        run = override(resuming.saved_run(resume, from_checkpoint), **overrides)
    elif isinstance(preset_or_config, RunConfig):
        if overrides:
            raise ValueError("overrides apply to presets; pass a complete RunConfig instead "
                             f"(got {', '.join(overrides)})")
        run = preset_or_config
    else:
        run = from_preset(preset_or_config, **overrides)
    startup.enable_compile_cache()
    result = train_run(run, run_dir=run_dir, progress=progress, resume=resume,
                       started=started, from_checkpoint=from_checkpoint)
    return Run(result.run_dir, run, result.state, result.metrics, result.summary,
               result.agent, result.spec)


if train.__doc__:  # the keywords as RunConfig declares them (no docstrings under -OO)
    train.__doc__ = train.__doc__.replace("{options}",
                                          ", ".join(f"``{o.keyword}``" for o in OPTIONS))


def load(run_dir: str, from_checkpoint: int | None = None, best: bool = False) -> Run:
    """Loads a run directory (config and the checkpoint of env step ``from_checkpoint``,
    default the newest) as a :class:`Run`. A corrupted checkpoint is refused naming the
    intact earlier one, which ``from_checkpoint`` then loads. ``best=True`` loads the
    checkpoint of the run's best greedy evaluation instead (kept by runs with
    ``eval_every``; see :mod:`rljax.run.best`).

    Raises:
        ValueError: not a run directory, or its checkpoint is missing or unusable.
    """
    run_dir = preflight.check_path("run_dir", run_dir)
    validate.integer("from_checkpoint", from_checkpoint, low=0, optional=True)
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir!r} is not an rljax run directory (no config.json)")
    data = read_json(path)
    try:
        run = RunConfig.from_dict(data)
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path} is not an rljax run config ({type(e).__name__}: "
                         f"{e})") from None
    step = from_checkpoint
    if best and step is not None:
        raise ValueError("load takes best=True or from_checkpoint, not both")
    where = best_checkpoint.restore_args(run_dir, best)
    with resuming.naming_intact(run_dir):
        saved = checkpoint.read_manifest(run_dir, step, **where)
    checkpoint.check_compatible(saved, run.to_dict())
    startup.enable_compile_cache()
    env, agent, trainer, _ = build(run)
    fresh = lambda: trainer.init(jax.random.key(run.seed))
    state = (checkpoint.restore(run_dir, fresh(), **where) if best
             else resuming.restore(run_dir, fresh, step))
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    metrics = read_jsonl(metrics_path) if os.path.isfile(metrics_path) else []
    summary_path = os.path.join(run_dir, "summary.json")
    summary = read_json(summary_path) if os.path.isfile(summary_path) else {}
    return Run(run_dir, run, state, metrics, summary, agent, env.spec)


def evaluate(run: Run | str, episodes: int = 10, seed: int | None = None) -> dict:
    """Evaluates a run's noise-free policy on ``episodes`` fresh envs.

    Returns:
        ``{"episodes", "return_mean", "return_std", "length_mean", "returns"}``. For a run
        of several members (seeds, sweep values), each member is evaluated on the same
        envs: ``{"members": [{"seed", "sweep_value", "episodes", "return_mean", ...}, ...],
        "return_mean": mean of the members' means}``.
    """
    from rljax.loops.evaluation import make_evaluator
    from rljax.run.build import make_env

    validate.integer("episodes", episodes, low=1)
    validate.integer("seed", seed, low=0, high=validate.INT32_LIMIT - 1, optional=True)
    if isinstance(run, str):
        run = load(run)
    seed = run.config.seed + 10_000 if seed is None else seed
    eval_env = make_env(run.config.env_id, episodes, seed, run.config.env_options)
    evaluate_fn = make_evaluator(run.agent.policy, eval_env, policy_init=run.agent.policy_init)
    n = run.config.num_members
    if n == 1:
        return evaluate_fn(run.params)
    params = jax.device_get(run.params)
    members = [{"seed": member_seed, "sweep_value": value,
                **evaluate_fn(member_slice(params, k, n))}
               for k, (member_seed, value) in enumerate(run.config.members)]
    means = [m["return_mean"] for m in members if m["return_mean"] is not None]
    return {"members": members, "return_mean": float(np.mean(means)) if means else None}
