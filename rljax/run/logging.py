"""Metric sinks and the progress display (host side)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, TextIO

import numpy as np


def to_jsonable(value: Any) -> Any:
    """Converts NumPy/JAX scalars and arrays to JSON values; NaN and inf become None."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "shape") and getattr(value, "shape", None) not in (None, ()):
        return to_jsonable(np.asarray(value).tolist())
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating) or hasattr(value, "dtype"):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def write_json(path: str, data: Any) -> None:
    """Writes JSON atomically (temp file + rename), so a crash never leaves half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(to_jsonable(data), f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


class JsonlWriter:
    """Appends one JSON object per line and flushes, so rows survive a crash."""

    def __init__(self, path: str):
        self.path = path
        self._file = open(path, "a")

    def write(self, row: dict) -> None:
        try:
            self._file.write(json.dumps(to_jsonable(row)) + "\n")
            self._file.flush()
        except OSError as e:  # a full disk: name the file
            raise OSError(e.errno, e.strerror, self.path) from None

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as e:
            raise OSError(e.errno, e.strerror, self.path) from None


def _reason(error: Exception) -> str:
    return getattr(error, "strerror", None) or str(error).splitlines()[0][:200]


def read_json(path: str) -> Any:
    """A JSON file's value.

    Raises:
        ValueError: naming the file and why it cannot be read or parsed.
    """
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: {_reason(e)}") from None


def read_jsonl(path: str) -> list[dict]:
    """The rows of a JSON-lines file (blank lines skipped).

    Raises:
        ValueError: naming the file (and line) that cannot be read or parsed, or a line
            that is not a JSON object.
    """
    rows = []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"cannot read {path}, line {number}: {e}") from None
                if not isinstance(row, dict):
                    raise ValueError(f"cannot read {path}, line {number}: a row must be a "
                                     f"JSON object, got {type(row).__name__}")
                rows.append(row)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {_reason(e)}") from None
    return rows


def _fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """One-line live progress: env steps, steps/s, recent mean return, ETA.

    On a terminal the line is redrawn in place; otherwise (a log file of a batch job,
    ``nohup``, CI) a plain line is written for every metrics row (at most one every
    ``interval`` seconds, default: every row), so a log being tailed shows the run going.
    """

    def __init__(self, total_steps: int, stream: TextIO | None = None, enabled: bool = True,
                 interval: float = 0.0, label: str = ""):
        self.total = total_steps
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval
        self.label = label
        self._last_print = -math.inf
        self._width = 0

    def update(self, steps: int, sps: float, mean_return: float | None, eta_s: float,
               force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not (self.tty or force or now - self._last_print >= self.interval):
            return
        self._last_print = now
        pct = 100.0 * steps / max(self.total, 1)
        ret = "   n/a" if mean_return is None or not math.isfinite(mean_return) else (
            f"{mean_return:8.2f}")
        line = (f"{self.label}{steps:>11,}/{self.total:,} steps ({pct:5.1f}%) | "
                f"{sps:>9,.0f} steps/s | return(100) {ret} | ETA {_fmt_duration(eta_s)}")
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


class TensorBoardSink:
    """Writes numeric metrics as TensorBoard scalars (tensorboardX; no TensorFlow).

    Scalars are logged against ``env_steps``; ``tensorboard --logdir RUN_DIR`` reads them.
    """

    def __init__(self, logdir: str):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir=logdir, flush_secs=10)

    def write(self, row: dict) -> None:
        step = int(row.get("env_steps", 0))
        for name, value in row.items():
            if name == "env_steps" or isinstance(value, bool) or value is None:
                continue
            if isinstance(value, int | float | np.integer | np.floating) and math.isfinite(
                    float(value)):
                self._writer.add_scalar(name, float(value), global_step=step)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


class WandbSink:
    """Logs rows to Weights & Biases; needs the ``wandb`` package."""

    def __init__(self, project: str, config: dict, name: str):
        try:
            import wandb
        except ImportError:
            raise ValueError("wandb logging was asked for but the wandb package is not "
                             "installed; `pip install wandb` or drop --wandb") from None
        self._run = wandb.init(project=project, config=config, name=name, reinit=True)

    def write(self, row: dict) -> None:
        self._run.log({k: v for k, v in row.items() if v is not None},
                      step=int(row.get("env_steps", 0)))

    def close(self) -> None:
        self._run.finish()


class Sinks:
    """Fans rows out to several sinks."""

    def __init__(self, sinks: list):
        self.sinks = sinks

    def write(self, row: dict) -> None:
        for sink in self.sinks:
            sink.write(row)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
