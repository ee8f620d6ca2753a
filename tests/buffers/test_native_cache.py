"""The cached native libraries (the sum-tree kernels and envpool's forwarder) are checked
against the size and SHA-256 recorded at their build before they are loaded: one cut
short, emptied or overwritten is built again, so it neither kills later runs (SIGBUS when
a truncated library is mapped) nor warns on every run. Every build here goes into a
temporary cache folder, never the user's."""

import os
import shutil
import subprocess
import sys

import pytest

from rljax.buffers import _native
from rljax.envs import envpool_ffi

pytestmark = pytest.mark.skipif(_native.find_compiler() is None, reason="no C++ compiler")

# Loads both libraries as a run does, with every warning an error.
_LOAD = """
import warnings
warnings.simplefilter("error")
from rljax.buffers import _native
from rljax.envs import envpool_ffi
assert _native._load()
envpool_ffi._library()
print("loaded")
"""


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _zero_length(path):
    open(path, "w").close()


def _random(path):
    with open(path, "wb") as f:
        f.write(os.urandom(os.path.getsize(path)))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """XDG_CACHE_HOME holding intact builds of both libraries, and their original contents.
    The builds are copied (each with its record) from the test session's cache folder
    (tests/conftest.py), where the sum-tree kernels are built once for every test anyway
    (a build of them takes ~9 s of CPU); the tests below build again only where a rebuild
    is what they check."""
    home = tmp_path_factory.mktemp("xdg")
    folder = os.path.join(home, "rljax")
    os.makedirs(folder)
    session = os.environ.get("RLJAX_CACHE_DIR") or str(tmp_path_factory.mktemp("built"))
    paths = []
    for built in (_native.build(session), envpool_ffi.build(session)):
        for name in (built, built + ".sha256"):
            shutil.copy(name, folder)
        paths.append(os.path.join(folder, os.path.basename(built)))
        assert _native.intact(paths[-1])
    return str(home), {p: open(p, "rb").read() for p in paths}


def _damage_and_load(cache, damages):
    home, original = cache
    for (path, data), damage in zip(original.items(), damages, strict=True):
        with open(path, "wb") as f:
            f.write(data)
        damage(path)
        assert not _native.intact(path)
    env = {k: v for k, v in os.environ.items() if k != "RLJAX_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = home
    out = subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "loaded", (out.returncode,
                                                                     out.stderr[-2000:])
    for path, data in original.items():
        assert _native.intact(path) and os.path.getsize(path) == len(data)
    assert not [n for n in os.listdir(os.path.join(home, "rljax")) if n.startswith("tmp")]


def test_truncated_cached_libraries_are_built_again_and_load(cache):
    # Before, loading the truncated envpool forwarder killed the process with SIGBUS.
    _damage_and_load(cache, [_truncate, _truncate])


@pytest.mark.exhaustive  # four C++ builds
@pytest.mark.slow
def test_emptied_or_overwritten_cached_libraries_are_built_again_and_load(cache):
    # Before, each run warned that the library could not be loaded, forever.
    _damage_and_load(cache, [_zero_length, _random])


def test_a_library_without_its_record_is_built_again(cache):
    # envpool's forwarder: the same build function as the sum-tree kernels', which take
    # 30 times as long to compile (and are rebuilt in the test above).
    path = list(cache[1])[1]
    os.remove(path + ".sha256")
    assert not _native.intact(path)
    stamp = os.stat(path).st_mtime_ns
    assert envpool_ffi.build(os.path.dirname(path)) == path and _native.intact(path)
    assert os.stat(path).st_mtime_ns != stamp  # built again, not only recorded


def test_builds_started_together_compile_once(tmp_path):
    """Two builds of one library at once (two processes of a run, two test workers): the
    second waits for the first's and loads it instead of compiling its own."""
    log = tmp_path / "calls"
    compiler = tmp_path / "cxx"
    compiler.write_text(f"#!/bin/sh\necho call >> {log}\nsleep 1\nexec g++ \"$@\"\n")
    compiler.chmod(0o755)
    build = [sys.executable, "-c", "import sys; from rljax.envs import envpool_ffi; "
             "print(envpool_ffi.build(sys.argv[1], sys.argv[2]))", str(tmp_path / "lib"),
             str(compiler)]
    procs = [subprocess.Popen(build, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    paths = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(paths) == 1 and _native.intact(paths.pop())
    assert log.read_text().splitlines() == ["call"]
