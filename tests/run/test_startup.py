"""Start-up: the phases on the progress display, a jitted agent init, the summary's
compile_time_s and startup_s, and JAX's persistent compilation cache."""

import json
import os
import subprocess
import sys
import time

import jax
import pytest

from rljax.run import startup
from rljax.run.build import build
from rljax.run.presets import from_preset


def _train(tmp_path, *extra, cache=True):
    env = dict(os.environ, RLJAX_CACHE_DIR=str(tmp_path / "cache"),
               RLJAX_COMPILE_CACHE="1" if cache else "0")
    return subprocess.run([sys.executable, "-m", "rljax.run.cli", "train", "cartpole-a2c",
                           "--total-steps", "2000", "--chunk-steps", "1000", "--logdir",
                           str(tmp_path / "runs"), "--no-tensorboard", *extra],
                          capture_output=True, text=True, timeout=300, env=env)


def test_agent_init_is_one_compiled_program():
    _, agent, _, _ = build(from_preset("cartpole-a2c", total_steps=2000))
    assert hasattr(agent.init, "lower"), "agent.init runs eagerly, op by op"
    state = agent.init(jax.random.key(0))
    assert jax.tree.leaves(state)


def test_phases_shown_and_summary_times_and_cache(tmp_path):
    cold = _train(tmp_path)
    assert cold.returncode == 0, cold.stderr
    err = cold.stderr
    for phase in ("building envs and agent: ", "initializing: ", "compiling: "):
        assert f"[cartpole-a2c] {phase}" in err, err
    # the phases come before the first progress row, in order
    positions = [err.index(p) for p in ("building envs", "initializing", "compiling",
                                        "steps/s")]
    assert positions == sorted(positions), err
    summary = json.loads(cold.stdout)
    assert 0 < summary["compile_time_s"] < summary["startup_s"]
    cached = os.listdir(tmp_path / "cache" / "jax")
    assert any(name.startswith("jit_init") for name in cached), cached
    began = time.perf_counter()
    warm = _train(tmp_path)
    external = time.perf_counter() - began
    assert warm.returncode == 0, warm.stderr
    assert "from the cache" in warm.stderr, warm.stderr
    # the command's time from the process's start: its parts add up to it, and it is no
    # more than the time seen from outside (which adds the interpreter's teardown)
    s = json.loads(warm.stdout)
    parts = s["setup_s"] + s["compile_time_s"] + s["train_time_s"] + s["finish_s"]
    assert parts == pytest.approx(s["wall_time_s"], rel=0.05), s
    assert min(s["setup_s"], s["compile_time_s"]) > 0, s
    assert s["wall_time_s"] < external, (s, external)


def test_compile_cache_can_be_turned_off(tmp_path):
    # (--no-compile-cache sets RLJAX_COMPILE_CACHE=0 for the process: the variable's own
    # path, below, is the same)
    proc = _train(tmp_path, "--no-compile-cache")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "cache" / "jax").exists()


def test_cache_dir_follows_rljax_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("RLJAX_CACHE_DIR", str(tmp_path))
    assert startup.cache_dir() == str(tmp_path / "jax")
    monkeypatch.setenv("RLJAX_COMPILE_CACHE", "0")
    assert not startup.cache_enabled()


def test_cache_on_by_default_except_with_jaxlib_0_9(monkeypatch):
    monkeypatch.delenv("RLJAX_COMPILE_CACHE", raising=False)
    assert startup._jaxlib_version() >= (0, 9)
    monkeypatch.setattr(startup, "_jaxlib_version", lambda: (0, 10))
    assert startup.cache_enabled()
    monkeypatch.setattr(startup, "_jaxlib_version", lambda: (0, 9))
    assert not startup.cache_enabled()  # its loads warn on stderr
    monkeypatch.setenv("RLJAX_COMPILE_CACHE", "1")
    assert startup.cache_enabled()


@pytest.mark.parametrize("spans,total", [([], 0.0), ([(0, 2), (1, 3)], 3.0),
                                         ([(0, 1), (2, 3), (0.5, 0.7)], 2.0)])
def test_compile_clock_counts_overlaps_once(spans, total):
    clock = startup.CompileClock()
    clock.spans = list(spans)
    assert clock.seconds == pytest.approx(total)


def _compiles_while_training(monkeypatch) -> list:
    """Patches the driver so that the programs JAX traces or compiles while the chunks
    run (the loop of ``_train``: chunks, rows, checks, evaluations, checkpoints) are
    recorded; returns the list they go to."""
    from rljax.run import driver

    seen, train = [], driver._train

    def listen(event, start, end, fun_name=None, **kwargs):
        if event in startup._COMPILE_EVENTS:
            seen.append((event.rsplit("/", 1)[-1], fun_name))

    def recorded(*args, **kwargs):
        jax.monitoring.register_event_time_span_listener(listen)
        try:
            return train(*args, **kwargs)
        finally:
            jax.monitoring.unregister_event_time_span_listener(listen)

    monkeypatch.setattr(driver, "_train", recorded)
    return seen


def test_nothing_compiles_between_chunks_and_times_add_up(monkeypatch, tmp_path):
    from rljax.run.driver import train_run

    # importing envpool (2-13 s here, once per process) is no part of the run's time
    pytest.importorskip("envpool")
    seen = _compiles_while_training(monkeypatch)
    # an evaluation and a checkpoint between chunks, not only at the end
    run = from_preset("cartpole-ppo", total_steps=4096, chunk_steps=1024,
                      checkpoint_every=2048, eval_every=2048, eval_episodes=2,
                      tensorboard=False)
    result = train_run(run, run_dir=str(tmp_path / "run"), progress=False)
    assert [r.get("eval_return_mean") is not None for r in result.metrics] == [
        False, True, False, True]
    assert seen == [], f"compiled while training: {seen}"
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s == json.loads(json.dumps(result.summary))
    assert 0 <= s["finish_s"] < s["wall_time_s"]
    assert 0 < s["train_time_s"]
    assert s["sps"] == pytest.approx(4096 / s["train_time_s"])
    # the rest of the start-up (building the agent and the envs, the state's first copy)
    # is setup_s; nothing compiled after the first chunk, so the four parts add up
    total = s["setup_s"] + s["compile_time_s"] + s["train_time_s"] + s["finish_s"]
    assert total == pytest.approx(s["wall_time_s"], rel=0.05), s
    assert s["setup_s"] > 0, s


def test_the_compile_listener_sees_a_compile_while_training(monkeypatch):
    """The check above can fail: a program compiled inside ``_train`` is seen (here the
    final checkpoint's zeros made by a jitted function of their own)."""
    from rljax.run import driver

    def train(*args):
        return jax.jit(lambda x: jax.numpy.zeros_like(x))(jax.numpy.ones(3))

    monkeypatch.setattr(driver, "_train", train)
    seen = _compiles_while_training(monkeypatch)
    driver._train()
    assert ("backend_compile_duration", "jit(<lambda>)") in seen, seen
