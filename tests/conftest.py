"""Settings for the whole test suite; makes ``_backend`` importable under
``--import-mode=importlib``, which does not put test folders on ``sys.path``."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

# Most test programs are short and compile-bound: they compile with JAX's
# ``jax_disable_most_optimizations`` (XLA backend -O0, LLVM's expensive passes off), which
# on this suite took 1,810 s of test time down to 1,579 s (2 workers on a 2-core CPU).
# Long compute-bound learning runs are marked ``optimized`` and compile at LLVM -O1
# (``XLA_FLAGS`` below; XLA's default, -O2, compiles 35-40% slower and runs them no faster).
# Set in the environment, so subprocess tests inherit both; runs outside the tests keep
# the defaults.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# The CLI and API keep compiled programs in JAX's persistent compilation cache
# (~/.cache/rljax/jax). The tests leave the user's cache alone: a test session starts with
# an empty cache folder of its own (made here, in the pytest process, and handed to the
# pytest-xdist workers and the tests' subprocesses through the environment; removed at the
# session's end), so a program that several tests or subprocesses build the same (a preset
# at the same sizes) compiles once per session. The tests of the cache itself use folders
# of their own. (On tests/run/test_resume.py alone this took 257 s down to 159 s.)
# jaxlib 0.9 writes C++ warnings to stderr on every program it loads from the cache (the
# tests that read a command's stderr would see them), so there the tests compile afresh.


def _jaxlib_version() -> tuple[int, ...]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return tuple(int(p) for p in version("jaxlib").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return (0, 0)


if "RLJAX_CACHE_DIR" not in os.environ and "RLJAX_COMPILE_CACHE" not in os.environ:
    _SESSION_CACHE = None
    if _jaxlib_version() < (0, 10):
        os.environ["RLJAX_COMPILE_CACHE"] = "0"
    else:
        os.environ["RLJAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="rljax-test-cache-")
        os.environ["RLJAX_COMPILE_CACHE"] = "1"
        _SESSION_CACHE = os.environ["RLJAX_CACHE_DIR"]
else:
    _SESSION_CACHE = None
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                               "--xla_backend_optimization_level=1").strip()

# XLA:CPU's older loop emitters instead of its MLIR fusion emitters: each program compiles
# in 35-60% of the CPU time (cartpole-dqn's chunk 1.4 s against 3.7-4.2 s, reacher-sac's
# 2.0 s against 5.0-5.3 s, cartpole-ppo's 4.5 s against 7.8-8.2 s), which took the suite
# from 772 s to 584 s on 2 cores; the long learning tests ran no slower. (Compiled
# programs of the library itself keep XLA's default: its fusion emitters run cartpole-dqn's
# loop ~15% faster.) XLA aborts the process on a flag it does not know, so the flag is
# tried once in a child process; the answer reaches the pytest-xdist workers and the
# tests' subprocesses through the environment.
_FUSION_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _xla_accepts(flag: str) -> bool:
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}")
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices('cpu')"], env=env,
                           capture_output=True, timeout=120)
    return probe.returncode == 0


if ("xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", "")
        and "RLJAX_TEST_FUSION_PROBED" not in os.environ):
    os.environ["RLJAX_TEST_FUSION_PROBED"] = "1"
    if _xla_accepts(_FUSION_FLAG):
        os.environ["XLA_FLAGS"] = f"{os.environ['XLA_FLAGS']} {_FUSION_FLAG}"


import jax  # noqa: E402  (after XLA_FLAGS: the backend reads them once)
import pytest  # noqa: E402

# The session's native libraries (the sum-tree kernels, ~6 s of C++ compiling, and the
# envpool FFI) are built into its cache folder by the pytest process that made the folder,
# in the background while the pytest-xdist workers start; a worker that needs one first
# waits for that build (rljax.buffers._native.build locks the folder) instead of compiling
# its own copy at collection, as each worker did before.
if _SESSION_CACHE:
    import threading

    def _build_native_libraries():
        try:
            from rljax.buffers import _native
            from rljax.envs import envpool_ffi

            _native.build()
            envpool_ffi.build()
        except Exception:  # noqa: BLE001  (the tests that use them build or report them)
            pass

    threading.Thread(target=_build_native_libraries, daemon=True).start()

# Test modules import gymnax at their top; imported here first, as rljax imports it, gymnax
# leaves its renderers' matplotlib.pyplot and seaborn (with scipy.stats) until a renderer
# runs, ~1.5 s less in each pytest-xdist worker's collection. (Only in the workers: the
# controller process collects nothing.)
if os.environ.get("PYTEST_XDIST_WORKER"):
    from rljax.envs.gymnax_import import gymnax as _gymnax

    try:
        _gymnax()
    except ImportError:  # the floors' environment: no gymnax
        pass

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# The tests' own programs go through the session's compilation cache too (not only the
# CLI's and rljax.train's), so a program several tests build the same compiles once per
# session; programs under 0.1 s of compiling (single operations) are not written, their
# load would cost about as much. (On five of the longest in-process test files, 231 CPU-s
# went down to 219.)
if os.environ.get("RLJAX_COMPILE_CACHE") == "1" and os.environ.get("RLJAX_CACHE_DIR"):
    from rljax.run import startup as _startup

    if _startup.enable_compile_cache():
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)

# The tests compare against float64 NumPy references. On GPUs, float32 matmuls and
# convolutions default to TF32 inputs (about 1e-3 relative error), so ask for full float32
# there (XLA:CPU computes float32 dots in full precision either way).
jax.config.update("jax_default_matmul_precision", "highest")


# The longest test files, longest first. With ``-n 2 --dist loadfile`` (the suite's command)
# each worker takes whole files in collection order, so these go first and the short
# files fill in behind them; files holding other slow tests follow, then the rest.
# (pytest-xdist would otherwise reorder the files by their number of tests, which puts
# test_devices.py, one test of two minutes, last: ``pytest_configure`` turns that off.)
LONGEST_FIRST = ("parallel/test_multihost.py", "parallel/test_devices.py",
                 "run/test_checkpoint_faults.py", "run/test_checkpoint.py",
                 "parallel/test_sweep.py", "run/test_resume.py")


# The tests whose outcome depends on the backend's numerics and compiled code (losses,
# networks, buffers, loops, random bits, the JAX-native envs): marked ``backend``, so an
# accelerator's first check is ``pytest -m backend`` (benchmarks/gpu_campaign.py runs it).
BACKEND_DEPENDENT = ("losses/", "networks/", "buffers/", "loops/", "envs/test_native.py",
                     "test_threefry.py", "test_lockstep.py", "test_normalization.py",
                     "test_minibatches.py", "test_next_values.py", "test_targets.py",
                     "test_exploration.py")


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if item.path.relative_to(pathlib.Path(_HERE)).as_posix().startswith(BACKEND_DEPENDENT):
            item.add_marker(pytest.mark.backend)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.relative_to(pathlib.Path(_HERE)).as_posix()
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (item.path not in slow_files)

    items.sort(key=rank)


def pytest_unconfigure(config):
    if _SESSION_CACHE:  # the pytest process that made it (not an xdist worker)
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist >= 3.6
        config.option.loadscopereorder = False


@pytest.fixture(autouse=True)
def _optimization_level(request, monkeypatch):
    """Tests marked ``optimized`` compile their programs at full optimization (their
    subprocesses too); the rest with most optimizations off (see the top of this file)."""
    if request.node.get_closest_marker("optimized") is None:
        yield
        return
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)
