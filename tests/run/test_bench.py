"""The benchmark suite's measurement and reports (tiny budgets; no timing asserted)."""

from rljax.run import bench


def test_measure_preset_reports_ceiling_training_compile_and_memory():
    r = bench.measure_preset("cartpole-a2c", num_envs=4, rounds=1, target_seconds=0.05)
    assert r["num_envs"] == 4 and r["num_seeds"] == 1
    assert r["train_sps"] > 0 and r["env_only_sps"] > 0 and r["compile_time_s"] > 0
    assert abs(r["ratio"] - r["train_sps"] / r["env_only_sps"]) < 1e-9
    assert r["peak_host_mb"] > 100


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
