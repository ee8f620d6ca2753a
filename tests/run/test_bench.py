"""The benchmark suite's measurement and reports (tiny budgets)."""

import json
import math
import statistics
import time

import jax
import numpy as np
import pytest

from rljax.run import bench, bench_peers

MEASURED_KEYS = {"preset", "env_id", "num_envs", "num_seeds", "compile_time_s", "train_sps",
                 "samples", "env_only_sps", "ratio", "peak_host_mb", "loadavg_1min",
                 "cpu_threads"}


@pytest.mark.optimized
def test_measure_preset_reports_ceiling_training_compile_and_memory():
    start = time.perf_counter()
    r = bench.measure_preset("cartpole-a2c", num_envs=4, rounds=1, target_seconds=0.05)
    elapsed = time.perf_counter() - start
    assert MEASURED_KEYS <= set(r) <= MEASURED_KEYS | {"peak_device_mb"}
    assert (r["preset"], r["env_id"], r["num_envs"], r["num_seeds"]) == (
        "cartpole-a2c", "CartPole-v1", 4, 1)
    assert set(r["samples"]) == {"train", "env_only"}
    for name, key in (("train", "train_sps"), ("env_only", "env_only_sps")):
        samples = r["samples"][name]
        assert len(samples) == 1 and all(math.isfinite(x) and x > 0 for x in samples)
        assert r[key] == statistics.median(samples)
    assert math.isclose(r["ratio"], r["train_sps"] / r["env_only_sps"], rel_tol=1e-12)
    # Four CartPole envs with an A2C update every 5 steps: the learner, not the env, sets
    # the pace, so random actions alone run faster (about 3x on a 2-core CPU).
    assert r["ratio"] < 1
    assert 0 < r["compile_time_s"] < elapsed
    assert math.isfinite(r["peak_host_mb"]) and r["peak_host_mb"] > 100
    assert len(r["loadavg_1min"]) == 2 and all(x >= 0 for x in r["loadavg_1min"])
    assert json.loads(json.dumps(r)) == r  # what a subprocess hands back
    line = bench._row(r)
    assert line.startswith("cartpole-a2c") and "envs=4" in line and "seeds=1" in line
    assert f"train {r['train_sps']:>10,.0f}/s" in line
    assert f"env-only {r['env_only_sps']:>10,.0f}/s" in line
    text = bench.markdown({"machine": bench.machine(), "presets": [r], "num_envs_sweep": [],
                           "seeds_sweep": [], "peers": []})
    low, high = sorted(r["loadavg_1min"])
    assert f"load average during the timed rounds: {low:.1f} to {high:.1f}" in text
    assert (f"| cartpole-a2c | CartPole-v1 | 4 | {r['env_only_sps']:,.0f} | "
            f"{r['train_sps']:,.0f} | {r['ratio']:.2f} | {r['compile_time_s']:.1f} | "
            f"{r['peak_host_mb']:,.0f} |") in text


def test_machine_names_the_device_and_software():
    m = bench.machine()
    assert m["platform"] == jax.default_backend() and m["jax"] == jax.__version__
    assert m["device_count"] == jax.device_count() >= 1 and m["cpu_count"] >= 1
    assert m["device"] and m["cpu_model"] and m["python"].count(".") == 2


def test_markdown_and_plots(tmp_path):
    row = {"preset": "cartpole-a2c", "env_id": "CartPole-v1", "num_envs": 16, "num_seeds": 1,
           "env_only_sps": 100.0, "train_sps": 60.0, "ratio": 0.6, "compile_time_s": 3.0,
           "peak_host_mb": 500.0}
    results = {"machine": bench.machine(), "presets": [row, {"preset": "x", "error": "boom"}],
               "num_envs_sweep": [dict(row, num_envs=n, train_sps=10.0 * n) for n in (1, 2)],
               "seeds_sweep": [dict(row, num_seeds=s, train_sps=60.0 * s) for s in (1, 4)],
               "peers": [{"library": "peerlib 1.0", "preset": "cartpole-a2c", "train_sps": 20.0,
                          "differs": "optimizer"},
                         {"library": "peerlib 1.0", "preset": "x", "error": "ImportError: y"}]}
    text = bench.markdown(results)
    assert "| cartpole-a2c | peerlib 1.0 | 20 | 60 | 3.0x | optimizer |" in text
    assert "Peer peerlib 1.0 on x failed: ImportError: y" in text
    assert "| cartpole-a2c | CartPole-v1 | 16 | 100 | 60 | 0.60 | 3.0 | 500 |" in text
    assert "| x | error: boom |" in text and "| 4 | 240 | 100 | 4.0x |" in text
    bench.plot_sweeps(results, str(tmp_path))
    assert (tmp_path / "num_envs_sweep.png").exists() and (tmp_path / "seeds_sweep.png").exists()


def test_buffer_benchmark_scan_timings_and_table():
    """benchmarks/buffers.py on a small prioritized buffer: per-op, marginal and the table."""
    import sys
    from pathlib import Path

    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import buffers
    from rljax.buffers import make_prioritized

    buf = make_prioritized(1000, 32)
    state = buf.init(dict(obs=jnp.zeros(4)))
    state = buf.add(state, dict(obs=jnp.ones((1000, 4))))
    chain = {"state": state}
    keys = [(k,) for k in jax.random.split(jax.random.key(0), 4)]
    update_in = [(jnp.arange(32) * 7, jnp.ones(32))]
    cases = [
        buffers.Case("prioritized", "cartpole", "sample 32",
                     jax.jit(lambda s, k: buf.sample(s, k, 0.4)), chain, keys, False),
        buffers.Case("prioritized", "cartpole", "update 32",
                     jax.jit(buf.update_priorities, donate_argnums=0), chain, update_in, True),
    ]
    rows = buffers.run_round_robin(cases, reps=2, warmup=1)
    scans = buffers.run_in_scan(cases, reps=1)
    for r in rows:
        per_op, marginal = scans[(r["buffer"], r["transition"], r["op"])]
        assert per_op > 0 and marginal == marginal  # finite (noise may make it tiny)
        r["in_scan_us"], r["marginal_us"] = per_op, marginal
    fbx = [dict(r, buffer="flashbax", us=2 * r["us"], in_scan_us=3 * r["in_scan_us"],
                marginal_us=4 * r["marginal_us"]) for r in rows]
    text = buffers.table(rows + fbx)
    assert text.count("2.0x") == 2 and text.count("3.0x") == 2 and text.count("4.0x") == 2


def test_sbx_peer_not_installed_gives_a_clear_row(monkeypatch):
    """Without sbx the suite still runs: PPO, TD3 and SAC presets get a row saying so."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sbx" else real(name, *a))
    for preset in ("cartpole-ppo", "reacher-td3", "reacher-sac"):
        assert preset in bench_peers.SBX_PRESETS
        assert bench_peers._sbx_peer(preset) == [{"library": "sbx", "preset": preset,
                                            "missing": bench_peers.SBX_MISSING}]
    assert bench_peers._sbx_peer("cartpole-dqn") == []  # no sbx counterpart
    missing = bench_peers._sbx_peer("reacher-sac")[0]
    line = bench._peer_row(missing, {"train_sps": 100.0})
    assert line.startswith("reacher-sac") and "sbx-rl is not installed" in line
    row = {"preset": "reacher-sac", "env_id": "Reacher-v5", "num_envs": 20, "num_seeds": 1,
           "env_only_sps": 1000.0, "train_sps": 100.0, "ratio": 0.1, "compile_time_s": 3.0,
           "peak_host_mb": 500.0}
    peer = {"library": "sbx 0.1 (jax 0.1)", "preset": "reacher-sac", "train_sps": 50.0,
            "differs": "gymnasium's MuJoCo env"}
    text = bench.markdown({"machine": bench.machine(), "presets": [row], "num_envs_sweep": [],
                           "seeds_sweep": [], "peers": [missing, peer]})
    assert f"reacher-sac: {bench_peers.SBX_MISSING}." in text
    assert "| reacher-sac | sbx 0.1 (jax 0.1) | 50 | 100 | 2.0x | gymnasium's MuJoCo env |" in text
    assert bench._peer_row(peer, row).endswith("rljax / peer 2.0x")
    assert "failed: boom" in bench._peer_row(dict(peer, error="boom"), row)


def test_profiling_flop_counts_and_gemm_rate():
    """benchmarks/profiling.py: the analytic FLOP counts by hand, and a GEMM rate."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import profiling

    assert profiling.mlp_forward_flops(2, (3, 5, 1)) == 2 * 2 * (3 * 5 + 5 * 1)
    assert profiling.mlp_backward_flops(2, (3, 5, 1), params=True, input_grad=False) == (
        2 * 2 * (15 + 5) + 2 * 2 * 5)
    assert profiling.mlp_backward_flops(2, (3, 5, 1), params=False, input_grad=True) == (
        2 * 2 * (15 + 5))
    # TD3 on Reacher (obs 10, actions 2) with 256x256 networks at batch 256:
    n, h = 256, 256
    fwd_c = 2 * n * (12 * h + h * h + h)
    fwd_a = 2 * n * (10 * h + h * h + h * 2)
    bwd_c = fwd_c + 2 * n * (h * h + h)  # weights, and inputs past the first layer
    bwd_a = fwd_a + 2 * n * (h * h + h * 2)
    td3 = profiling.td3_step_flops(n, 10, 2, (h, h), (h, h), policy_delay=2)
    assert td3["target"] == fwd_a + 2 * fwd_c
    assert td3["critics"] == 2 * (fwd_c + bwd_c)
    assert td3["actor"] == (fwd_a + fwd_c + fwd_c + bwd_a) / 2
    assert td3["total"] == td3["target"] + td3["critics"] + td3["actor"]
    assert 400e6 < td3["total"] < 402e6
    sac = profiling.sac_step_flops(n, 10, 2, (h, h), (h, h))
    fwd_s = 2 * n * (10 * h + h * h + h * 4)
    assert sac["actor"] == fwd_s + 2 * (fwd_c + fwd_c) + fwd_s + 2 * n * (h * h + h * 4)
    rate = profiling.gemm_rate(64, seconds=0.01)()
    assert math.isfinite(rate) and rate > 0


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_compiled_twin_critic_updates_do_the_counted_work(algo):
    """XLA's own FLOP count of a compiled update is the analytic matmul count plus the
    small elementwise rest (Adam, activations, losses: 1.5% here). TD3's actor loss
    evaluated both critics and kept Q_1 (1.16x the count): the second critic's passes are
    work the algorithm does not need."""
    import functools
    import sys
    from pathlib import Path

    import jax.numpy as jnp
    import numpy as np

    from rljax.agents import sac, td3
    from rljax.buffers.nstep import NStepTransition
    from rljax.buffers.prioritized import PrioritizedSample
    from rljax.envs.spec import EnvSpec

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import profiling

    spec = EnvSpec(task_id="Reacher-v5", num_envs=1, obs_shape=(10,), obs_dtype=np.float32,
                   num_actions=None, action_shape=(2,), action_low=(-1.0, -1.0),
                   action_high=(1.0, 1.0), max_episode_steps=50, reward_threshold=None,
                   is_atari=False)
    n, h = 256, (256, 256)
    if algo == "td3":  # policy_delay 1: the actor step is in every update, no cond
        module, config = td3, td3.TD3Config(policy_delay=1)
        counted = profiling.td3_step_flops(n, 10, 2, h, h, policy_delay=1)["total"]
    else:
        module, config = sac, sac.SACConfig()
        counted = profiling.sac_step_flops(n, 10, 2, h, h)["total"]
    tr = NStepTransition(obs=jnp.ones((n, 10)), action=jnp.zeros((n, 2)),
                         reward=jnp.zeros(n), discount=jnp.ones(n), next_obs=jnp.ones((n, 10)))
    batch = PrioritizedSample(jnp.arange(n), tr, jnp.full(n, 1.0 / n), jnp.ones(n))
    parts = module.parts(config, spec)
    state = module.init(config, spec, parts, jax.random.key(0))
    compiled = jax.jit(functools.partial(module.update, config, spec, parts)).lower(
        state, batch, jax.random.key(1)).compile()
    cost = compiled.cost_analysis()
    flops = (cost if isinstance(cost, dict) else cost[0])["flops"]
    assert counted <= flops <= 1.03 * counted, (algo, flops / counted)

def test_on_policy_update_flops():
    import sys
    import types
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import profiling
    from rljax.agents.ppo import PPOConfig
    from rljax.agents.pqn import PQNConfig

    spec = types.SimpleNamespace(obs_shape=(4,), discrete=True, num_actions=2, action_shape=())
    ppo = PPOConfig()  # 32 x 16 samples, 4 epochs, 64-64 actor and critic
    per_sample = lambda sizes: 3 * profiling.mlp_forward_flops(1, sizes) - 2 * sizes[0] * sizes[1]
    assert profiling.on_policy_update_flops("ppo", ppo, spec) == 4 * 512 * (
        per_sample((4, 64, 64, 2)) + per_sample((4, 64, 64, 1)))
    pqn = PQNConfig()  # 128-128 Q-network
    q = (4, 128, 128, 2)
    assert profiling.on_policy_update_flops("pqn", pqn, spec) == (
        4 * 512 * per_sample(q) + (512 + 32) * profiling.mlp_forward_flops(1, q))
    assert profiling.on_policy_update_flops("a2c", ppo, spec) is None


@pytest.mark.slow
def test_cartpole_failures_names_how_each_members_episodes_end(tmp_path, capsys):
    """A barely trained memory run: every noise-free episode ends before the time limit,
    by the cart or the pole as the final state says, for each member."""
    import rljax
    from benchmarks import cartpole_failures

    run = rljax.train("cartpole-novel-ppo-rnn", logdir=str(tmp_path), num_seeds=2,
                      num_envs=8, hidden_sizes=(8, 8), **{"memory.size": 8},
                      total_steps=1024, chunk_steps=512, tensorboard=False, eval_every=0)
    for member in (0, 1):
        eps = cartpole_failures.episodes(run, member, 3)
        assert len(eps) == 3 and all(e["length"] < 500 for e in eps), eps
        for e in eps:  # (widest_x is rounded to 2 decimals)
            assert e["cause"] == "pole" or (e["cause"] == "cart" and e["widest_x"] >= 2.4), e
    assert cartpole_failures.main([run.run_dir, "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "member 0: lengths [" in out and "member 1: lengths [" in out, out


def _fake_run(path, threshold, curves, evals=None):
    """A run directory as rljax writes it: config, summary and one metrics file per seed."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"preset": "p", "threshold": threshold,
                                                  "total_steps": 400, "seed": 0}))
    (path / "summary.json").write_text(json.dumps({"seeds": [
        {"seed": s, "solved_at_step": None} for s in range(len(curves))]}))
    for s, curve in enumerate(curves):
        (path / f"seed_{s}").mkdir()
        rows = []
        for k, ret in enumerate(curve):
            row = {"env_steps": 100 * (k + 1), "return_mean_100": ret}
            if evals and evals[s][k] is not None:
                row["eval_return_mean"] = evals[s][k]
            rows.append(json.dumps(row))
        (path / f"seed_{s}" / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    return str(path)


def test_stability_table_reads_each_seed_from_its_first_solve(tmp_path, monkeypatch, capsys):
    """solved at / min after / final / stays per seed, against the run's threshold, another
    one, or the noise-free evaluations; each recorded under its own key."""
    from benchmarks import stability

    run = _fake_run(tmp_path / "run", -3.75,
                    [[-9.0, -3.7, -3.8, -3.6], [-9.0, -5.0, -4.0, -3.9], [-3.5, -3.6, -3.7, -3.7]],
                    evals=[[None, -3.6, None, -3.5], [None, -3.9, None, -3.7],
                           [None, -3.7, None, -3.8]])
    table = stability.analyze(run)
    got = {s: (t["solved_at"], t["min_after"], t["final"], t["stays"])
           for s, t in table["seeds"].items()}
    assert got == {0: (200, -3.8, -3.6, False), 1: (None, None, -3.9, False),
                   2: (100, -3.7, -3.7, True)}
    assert (table["solved"], table["stay_solved"], table["threshold"]) == (2, 1, -3.75)

    wider = stability.analyze(run, threshold=-6.0)
    assert [t["solved_at"] for t in wider["seeds"].values()] == [200, 200, 100]
    assert wider["stay_solved"] == 3 and wider["seeds"][1]["min_after"] == -5.0

    noise_free = stability.analyze(run, metric="eval_return_mean")
    got = {s: (t["solved_at"], t["min_after"], t["final"], t["stays"])
           for s, t in noise_free["seeds"].items()}
    assert got == {0: (200, -3.6, -3.5, True), 1: (400, -3.7, -3.7, True),
                   2: (200, -3.8, -3.8, False)}

    monkeypatch.setattr(stability, "RESULTS", str(tmp_path / "stability.json"))
    assert stability.main(["--analyze", run, "--metric", "eval_return_mean",
                           "--threshold", "-3.8", "--label", "check"]) == 0
    assert "3 of 3 seeds stay >= -3.8" in capsys.readouterr().out
    saved = json.loads((tmp_path / "stability.json").read_text())
    assert list(saved) == ["p seeds=3 steps=400 eval_return_mean threshold -3.8 check"]

    bare = _fake_run(tmp_path / "bare", 475.0, [[10.0, 500.0]])
    with pytest.raises(SystemExit):
        stability.main(["--analyze", bare, "--metric", "eval_return_mean"])
    assert "no metrics row has 'eval_return_mean'" in capsys.readouterr().err

    # Two-row means: seed 0 first reaches -3.76 at 300 (-3.75) and holds; seed 1 never.
    smooth = stability.analyze(run, threshold=-3.76, window=2)
    got = {s: (t["solved_at"], t["stays"]) for s, t in smooth["seeds"].items()}
    assert got == {0: (300, True), 1: (None, False), 2: (200, True)}
    assert smooth["seeds"][0]["min_after"] == pytest.approx(-3.75)
    assert smooth["seeds"][2]["final"] == pytest.approx(-3.7) and smooth["window"] == 2

    # Training for evaluations a preset does not make: refused before it trains.
    monkeypatch.setattr(stability, "train", lambda *a: pytest.fail("trained"))
    with pytest.raises(SystemExit):
        stability.main(["--presets", "reacher-ddpg", "--metric", "eval_return_mean"])
    assert "reacher-ddpg does not evaluate (eval_every 0)" in capsys.readouterr().err
    monkeypatch.setattr(stability, "train", lambda *a: run)  # reacher-td3 evaluates
    assert stability.main(["--presets", "reacher-td3", "--metric", "eval_return_mean"]) == 0


@pytest.mark.slow
def test_novel_prev_action_env_shows_the_last_action_and_trains(tmp_path, capsys):
    """The observation is (x, theta, one-hot previous action), zeros at an episode's start;
    only the cart or the pole terminate; a memory preset trains on it through env=."""
    from benchmarks import novel_prev_action

    env = novel_prev_action.NovelCartPole()
    params = env.default_params
    obs, state = env.reset_env(jax.random.key(0), params)
    assert obs.shape == (4,) and obs[2:].tolist() == [0.0, 0.0]
    for action in (1, 0, 1):
        obs, state, reward, terminated, _ = env.step_env(jax.random.key(1), state, action,
                                                         params)
        assert obs[2:].tolist() == [float(action == 0), float(action == 1)]
        assert float(reward) == 1.0 and not bool(terminated)
    far = state.replace(inner=state.inner.replace(x=2.45, time=499))
    assert bool(env.step_env(jax.random.key(2), far, 1, params)[3])
    plain = novel_prev_action.NovelCartPole(prev_action=False)
    assert plain.reset_env(jax.random.key(0), params)[0].shape == (2,)
    # --delta 50: the change of (x, theta) x 1 / tau reads as the velocities one step late
    late = novel_prev_action.NovelCartPole(prev_action=False, delta=50.0)
    obs, state = late.reset_env(jax.random.key(3), params)
    assert obs.shape == (4,) and obs[2:].tolist() == [0.0, 0.0]
    for action in (1, 1, 0):
        before = state.inner
        obs, state, *_ = late.step_env(jax.random.key(4), state, action, params)
        np.testing.assert_allclose(obs[2:], [before.x_dot, before.theta_dot], rtol=1e-3,
                                   atol=1e-5)
    with pytest.raises(ValueError, match="delta scales the change"):
        novel_prev_action.NovelCartPole(delta=-1.0)

    assert novel_prev_action.main([
        "--seeds", "2", "--total-steps", "1024", "--cpu-devices", "1",
        "--logdir", str(tmp_path), "--set", "num_envs=8", "--set", "hidden_sizes=8,8",
        "--set", "memory.size=8"]) == 0
    run_dir = capsys.readouterr().out.strip().splitlines()[-1]
    config = json.loads(open(f"{run_dir}/config.json").read())
    assert "obs_indices" not in config["env_options"] and config["threshold"] == 475.0
    assert config["env_id"].startswith("object:NovelCartPole"), config["env_id"]
    # a feed-forward control that anneals nothing trains on it too (no schedule_steps)
    assert novel_prev_action.main([
        "--preset", "cartpole-novel-ppo", "--no-prev", "--delta", "50", "--seeds", "1",
        "--total-steps", "1024", "--cpu-devices", "1", "--logdir", str(tmp_path),
        "--set", "num_envs=8", "--set", "hidden_sizes=8,8", "--set", "anneal_lr=false"]) == 0
    config = json.loads(open(capsys.readouterr().out.strip().splitlines()[-1]
                             + "/config.json").read())
    assert config["schedule_steps"] is None, config["schedule_steps"]


def test_frozen_policy_counts_blocks_and_matches_the_normal_approximation(tmp_path, monkeypatch,
                                                                          capsys):
    """Blocks of episodes below a threshold, counted and by the normal approximation: for
    normal returns the two agree; the table's chance of a run of evaluations all staying."""
    from benchmarks import frozen_policy as fp

    assert fp.blocks_below(np.array([1.0, 3.0, 0.0, 1.0, 9.0]), 2, 1.5) == (1, 2)
    with pytest.raises(ValueError, match="no block of 10"):
        fp.blocks_below(np.zeros(5), 10, 0.0)
    assert fp.stay_chance(-3.55, 1.4, 100, -3.55, 1) == pytest.approx(0.5)
    assert fp.stay_chance(-3.55, 1.4, 100, -3.55, 3) == pytest.approx(0.125)
    assert fp.stay_chance(0.0, 0.0, 100, 1.0, 5) == 0.0

    rng = np.random.default_rng(0)
    returns = rng.normal(-3.55, 1.4, size=200_000)  # 2,000 blocks, sd of a mean 0.14
    (row,) = fp.member_rows([returns], 100, -3.75, 10)
    share = row["blocks_below"] / row["blocks"]
    z = (-3.75 - -3.55) / 0.14
    normal = 0.5 * math.erfc(-z / math.sqrt(2.0))  # about 0.077
    assert abs(share - normal) < 0.02 and row["block_sd"] == pytest.approx(0.14, rel=0.02)
    assert row["stay_normal"] == pytest.approx((1 - normal) ** 10, rel=0.05)
    assert row["stay_counted"] == pytest.approx((1 - share) ** 10)

    class Config:
        threshold, eval_every, chunk_steps, total_steps = -3.75, 20_000, 20_000, 2_500_000
        preset, env_id = "reacher-ddpg", "Reacher-v5"

    played = []
    monkeypatch.setattr(fp, "RESULTS", str(tmp_path / "frozen_policy.json"))
    monkeypatch.setattr(fp, "play", lambda *a: (played.append(a) or [returns[:1000]],
                                                type("Run", (), {"config": Config})()))
    assert fp.main(["RUN", "--best", "--episodes", "500", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert played == [("RUN", True, None, 500, 2)]
    assert "125 evaluations in a row" in out and "of 10 |" in out
    saved = json.loads((tmp_path / "frozen_policy.json").read_text())
    assert list(saved) == ["reacher-ddpg seeds=1 best"]
    assert saved["reacher-ddpg seeds=1 best"]["members"][0]["blocks"] == 10
    with pytest.raises(SystemExit):
        fp.main(["RUN", "--episodes", "20", "--rounds", "2"])
    assert "less than one --block (100)" in capsys.readouterr().err
