"""Which env a run trains on, when an override names another: a task id, a
``module:callable`` factory or an env object, with the env options that still apply to it
and its solve threshold (:func:`rljax.run.config.override` asks :func:`env_changes`)."""

from __future__ import annotations

from typing import Any

from rljax import validate


def env_options(env_id: str, kept: tuple, given: Any) -> tuple[tuple[str, Any], ...]:
    """``given`` (a dict or ``(name, value)`` pairs; None: ``kept``, the run's own) as
    sorted pairs, checked against ``env_id``'s backend."""
    from rljax.envs import check_options, check_task

    check_task(env_id)
    if given is None:
        options = dict(kept)
    elif isinstance(given, dict | tuple | list) and all(
            isinstance(pair, tuple | list) and len(pair) == 2
            for pair in (given.items() if isinstance(given, dict) else given)):
        options = dict(given)
    else:
        raise ValueError(f"env_options must be a dict of option names and values, got "
                         f"{given!r}")
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    try:
        check_options(env_id, options)
    except ValueError as e:
        if given is not None:
            raise
        raise ValueError(f"the run's env options {options} do not apply to {env_id} ({e}); "
                         f"choose another preset, or give env_options (rljax.train)") from None
    return tuple(sorted(options.items()))


def env_changes(base: Any, changes: dict[str, Any]) -> dict[str, Any]:
    """The fields that ``env`` (a task id, an import string or an env object),
    ``env_params`` and ``max_episode_steps`` set, taken out of ``changes``: the task id,
    its options and (for another task) its solve threshold."""
    from rljax import envs
    from rljax.envs import objects

    env, params = changes.pop("env", None), changes.pop("env_params", None)
    steps = changes.pop("max_episode_steps", None)
    given_options = changes.pop("env_options", None)
    if isinstance(env, str) and not env.strip():
        raise ValueError("--env (env) is empty; give a value, or leave it out for the default")
    if params is not None and (env is None or isinstance(env, str)):
        raise ValueError("env_params applies to an env object given as env=...")
    if env is None:
        if steps is None and given_options is None:
            return {}
        env = base.env_id
        options = dict(env_options(env, base.env_options, given_options))
    elif isinstance(env, str):
        options = dict(env_options(env, base.env_options, given_options))
    else:
        env, spaces = objects.add(env, params)
        # the same object again (a resume): its recorded options stand unless given
        options = {**(dict(base.env_options) if env == base.env_id else {}), **dict(spaces)}
    if steps is not None:
        options["max_episode_steps"] = validate.integer("max_episode_steps", steps, low=1)
    out = {"env_id": env, "env_options": tuple(sorted(options.items()))}
    if env != base.env_id or base.threshold is None:
        # A preset's threshold is for its own task; another task brings its own.
        out["threshold"] = envs.reward_threshold(env)
    return out
