"""What the benchmarks share: the shapes they time, building their models and batches, and the
one timer, which interleaves its rounds across the configurations being compared.

Import it before TensorFlow: it sets TensorFlow's environment (oneDNN on, quiet logs) as the
library does.
"""

import collections
import glob
import json
import os
import re
import tempfile
import time
from typing import Any, NamedTuple

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_lite import model_dir  # noqa: E402
from t2t_lite.hparams import get_hparams  # noqa: E402
from t2t_lite.token_ids import PAD_ID  # noqa: E402

# name: (hparams set, vocabulary size)
SHAPES = {"tiny": ("transformer_tiny", 8000), "base": ("transformer_base", 32000)}


def build_model(shape: str, seed: int = 0, overrides: str = "") -> keras.Model:
  """The built Transformer of a shape (random weights from `seed`)."""
  set_name, vocab = SHAPES[shape]
  keras.utils.set_random_seed(seed)
  return model_dir.build_model(get_hparams(set_name, overrides), vocab)


def random_batches(vocab: int, batch: int, length: int, count: int = 4, seed: int = 0) -> list[dict]:
  """`count` batches {"inputs", "targets"}: int32 [batch, length] of random non-special ids."""
  rng = np.random.default_rng(seed)
  return [{"inputs": rng.integers(2, vocab, (batch, length)).astype("int32"),
           "targets": rng.integers(2, vocab, (batch, length)).astype("int32")} for _ in range(count)]


def target_tokens(batch: dict) -> int:
  """Target tokens of a batch (not PAD): what a training step's tokens/s counts."""
  return int(np.sum(np.asarray(batch["targets"]) != PAD_ID))


class Timing(NamedTuple):
  seconds: float   # per call, in the function's best round
  calls: int       # calls in that round
  result: Any      # the last call's result


def interleaved(fns: dict, rounds: int = 3, min_calls: int = 1, min_seconds: float = 0.0,
                warm_up: int = 1, work=None) -> dict[str, Timing]:
  """{name: Timing} of each function's best of `rounds` timing rounds.

  `fns` maps names to `fn(i)`, `i` counting the calls of a round from 0 (a training step picks
  its batch with it); a call must block until its work is done. Each function is called
  `warm_up` times first (tracing, compiling). The rounds take turns across the functions, so a
  slow spell of this shared machine hits all of them alike; a round calls a function at least
  `min_calls` times and for at least `min_seconds`. The best round does the most work per
  second, `work(calls)` (default: the calls themselves): noise only ever slows a round down.
  """
  work = work or (lambda calls: calls)
  for fn in fns.values():
    for i in range(warm_up):
      fn(i)
  best, rates = {}, {}
  for _ in range(rounds):
    for name, fn in fns.items():
      calls, result, start = 0, None, time.perf_counter()
      while calls < min_calls or time.perf_counter() - start < min_seconds:
        result = fn(calls)
        calls += 1
      elapsed = time.perf_counter() - start
      if name not in best or work(calls) / elapsed > rates[name]:
        best[name], rates[name] = Timing(elapsed / calls, calls, result), work(calls) / elapsed
  return best


def milliseconds(fns: dict, repeats: int, rounds: int) -> dict[str, float]:
  """{name: ms per call} of zero-argument functions, interleaved (see `interleaved`)."""
  timings = interleaved({name: lambda _, fn=fn: fn() for name, fn in fns.items()}, rounds,
                        min_calls=repeats)
  return {name: timing.seconds * 1000 for name, timing in timings.items()}


def matmul_peak(n=2048, repeats=5, rounds=5, dtype="float32"):
  """FLOP/s of a [n, n] x [n, n] TF matmul in `dtype` (oneDNN when it is on): the fastest of
  `rounds` rounds of at least `repeats` calls. The training and decoding benchmarks' MFU is
  against it."""
  a = tf.cast(tf.random.normal((n, n)), dtype)
  b = tf.cast(tf.random.normal((n, n)), dtype)
  f = tf.function(lambda: tf.matmul(a, b))
  ms = milliseconds({"matmul": lambda: f().numpy()}, repeats, rounds)["matmul"]
  return 2 * n ** 3 / (ms / 1000)


# ---- Per-thunk profiles (scripts/profile_decode.py, profile_train.py) --------------------------
# XLA's CPU thunks appear in tf.profiler's trace only with XLA_FLAGS=--xla_cpu_enable_xprof_traceme
# (set by those scripts before TensorFlow is imported). Events that are not leaf work: the
# executor and loop/condition thunks that contain others, the Python, eager and graph layers
# around the calls (the graph executor's events and an XLA launch op contain others), the
# thread pool's own bookkeeping, and the end markers of asynchronous thunks. A TensorFlow op's
# event ("scope/name:OpType") counts under its op type. Caveat: a thunk XLA runs asynchronously
# (a dot beside another, e.g. the loss's two gradient products) shows only its launch, and the
# thunk it overlaps takes the time of both: read the shares of overlapping products together.
NOT_LEAVES = ("ThunkExecutor", "search", "TFE_", "Eager", "__inference", "CpuExecutable",
              "BlockUntil", "SlinkyThreadPool", "cond", "while", "body", "XlaLaunch", "_XlaRun",
              "_XlaCompile", "StatefulPartitionedCall", "PartitionedCall", "ExecutorState",
              "end: ")


def profile(run, passes):
  """({(plane, line, event): (ms, count)} of `passes` calls of `run()` under tf.profiler, wall
  ms per pass)."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(passes):
      run()
    wall = (time.perf_counter() - start) * 1000 / passes
    tf.profiler.experimental.stop()
    paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    if not paths:
      raise RuntimeError(f"tf.profiler wrote no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
      space.ParseFromString(f.read())
  times, counts = collections.Counter(), collections.Counter()
  for plane in space.planes:
    for line in plane.lines:
      for event in line.events:
        key = (plane.name, line.name, plane.event_metadata[event.metadata_id].name)
        times[key] += event.duration_ps / 1e9
        counts[key] += 1
  return {key: (times[key], counts[key]) for key in times}, wall


def _leaves(times):
  return {key: value for key, value in times.items()
          if key[1] != "python" and not key[2].startswith(NOT_LEAVES)}


def print_thunk_profile(times, passes, kinds=25, top=0, json_path=None):
  """Prints the leaf events' thread time summed by kind (the name without its number: `dot`,
  `loop_dynamic_update_slice_fusion`, ...), with shares and calls; the `top` longest single
  events; and writes every event's (ms, count) to `json_path` when given."""
  leaves = _leaves(times)
  ms, counts = collections.Counter(), collections.Counter()
  for (_, _, name), (t, n) in leaves.items():
    kind = name.rsplit(":", 1)[1] if ":" in name else re.sub(r"\.\d+$", "", name)
    ms[kind] += t
    counts[kind] += n
  total = sum(ms.values())
  print(f"leaf thunks' thread time: {total:.1f} ms ({total / passes:.1f} a pass)")
  print(f"{'ms':>9} {'share':>6} {'calls':>7}  kind")
  for kind, t in ms.most_common(kinds):
    print(f"{t:9.1f} {100 * t / total:5.1f}% {counts[kind]:7d}  {kind}")
  if top:
    print(f"\nthe {top} longest thunks:")
    for (_, _, name), (t, n) in sorted(leaves.items(), key=lambda kv: -kv[1][0])[:top]:
      print(f"{t:9.1f} ms {n:6d}x  {name[:110]}")
  if json_path:
    with open(json_path, "w", encoding="utf-8") as f:
      json.dump({"|".join(key): value for key, value in times.items()}, f)
