"""Training throughput: t2t_lite's training step against keras-hub peers of the same shape, and MFU.

    python scripts/bench_train.py                 # tiny and base, 64x32 and 16x128, + Multi30k
    python scripts/bench_train.py --shapes tiny --steps 10 --rounds 3
    python scripts/bench_train.py --shapes base --batches 16x128
    python scripts/bench_train.py --precisions float32   # float32 rows only (about half the time)
    python scripts/bench_train.py --loss          # only the projection + loss, 2048 tokens
    python scripts/bench_train.py --dropout       # only dropout: Keras' against the hashed mask
    python scripts/bench_train.py --adam          # only the optimizer update: Keras' Adam, fused
    python scripts/bench_train.py --projection    # only the projections' input-gradient matmul

Rows, each timed the same way (warm-up steps, every batch shape traced, excluded):
- `t2t_lite`: the trainer's own step (`Trainer.train_step`: the model with its hashed dropout,
  the pre-softmax projection fused with the label-smoothed loss and its gradient
  (`projected_cross_entropy`), Adam with the paper's betas and schedule (its update fused into one
  XLA kernel per variable, `t2t_lite.training.adam`), the NaN guard);
  `t2t_lite XLA`: the same with `xla_compile=True` (the whole step compiled).
- `keras-hub`: keras-hub's TransformerEncoder/TransformerDecoder with a tied ReversibleEmbedding
  and SinePositionEncoding (the same parameter count up to biases and LayerNorm placement),
  trained as a Keras user would: Adam (same betas) and `keras.losses.CategoricalCrossentropy(
  from_logits=True, label_smoothing=0.1)` over one-hot targets, padding masked by
  `sample_weight`. `keras-hub XLA`: the same step compiled with XLA (the issue's best peer setting
  on tiny). `keras-hub + our loss`: the peer's layers with t2t_lite's loss kernel, which isolates
  the layers (float32 only).
- `... bf16`: the same steps under Keras' `mixed_bfloat16` policy (float32 variables, Adam and
  softmaxes; bfloat16 matmuls), ours through `mixed_precision=mixed_bfloat16` and the peer through
  `keras.mixed_precision.set_global_policy`, as a Keras user turns it on. On a CPU with AVX512_BF16
  (this one) oneDNN runs bfloat16 matmuls about twice as fast as float32 ones; XLA's CPU dots do
  not. `--precisions float32` times float32 alone, as before.

FLOPs per training step = 3 x forward FLOPs (backward = 2 x forward), forward counted as
2 x multiply-adds of every matmul: projections and FFN per token, attention scores and
weighted sums (S^2 d per layer for encoder self-attention, T^2 d and T S d for the decoder),
and the output projection T d V. MFU = model FLOPs/s / this CPU's matmul peak at the row's
precision (float32, or bfloat16 for the bf16 rows), measured in the same run with a TF matmul of
2048x2048 (fastest of 5 rounds). Ratios are printed within each precision and across both (ours'
fastest row over the fastest peer row of any precision: each side in its best configuration).
A "ceiling" row is the tokens/s of a step that ran every counted FLOP at a precision's peak and
did nothing else (MFU 1.0), over the best peer of any precision. Timing: all configurations of
a row (each row in a process of its own, which measures its own matmul peaks) are built and
traced, then timed in `--rounds` interleaved rounds (each at least 5 s and
`--steps` steps); each reports its fastest.
Set TF_ENABLE_ONEDNN_OPTS=1 (the default here) for all.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_lite.hparams import get_hparams  # noqa: E402
from t2t_lite.training import train_loop  # noqa: E402
from t2t_lite.training.loss import (fast_smoothed_cross_entropy, projected_cross_entropy,  # noqa: E402
                                    smoothed_cross_entropy)

SHAPES = {"tiny": ("transformer_tiny", 8000), "base": ("transformer_base", 32000)}
# Keras dtype policy: (row-name suffix, matmul dtype of its peak)
PRECISIONS = {"float32": ("", "float32"), "mixed_bfloat16": (" bf16", "bfloat16")}


def fastest_ms(fns, repeats, rounds):
  """{name: milliseconds per call} of each function's fastest of `rounds` rounds of `repeats`
  calls, after one warm-up call each (which traces); the rounds take turns across the functions,
  so a slow spell of this shared machine hits them all alike."""
  for fn in fns.values():
    fn()
  best = {}
  for _ in range(rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      for _ in range(repeats):
        fn()
      best[name] = min(best.get(name, float("inf")), (time.perf_counter() - start) / repeats * 1000)
  return best


def matmul_peak(n=2048, repeats=5, rounds=5, dtype="float32"):
  """FLOP/s of a [n, n] x [n, n] TF matmul in `dtype`: the fastest of `rounds` rounds."""
  a = tf.cast(tf.random.normal((n, n)), dtype)
  b = tf.cast(tf.random.normal((n, n)), dtype)
  f = tf.function(lambda: tf.matmul(a, b))
  ms = fastest_ms({"matmul": lambda: f().numpy()}, repeats, rounds)["matmul"]
  return 2 * n ** 3 / (ms / 1000)


def forward_flops(hp, vocab, batch, source_len, target_len):
  d, ff, B, S, T = hp.hidden_size, hp.filter_size, batch, source_len, target_len
  enc = hp.num_encoder_layers * (B * S * (4 * d * d + 2 * d * ff) + 2 * B * S * S * d)
  dec = hp.num_decoder_layers * (B * T * (4 * d * d + 2 * d * d + 2 * d * ff) + B * S * 2 * d * d
                                 + 2 * B * T * T * d + 2 * B * T * S * d)
  return 2 * (enc + dec + B * T * d * vocab)


class KerasHubPeer(keras.Model):
  """keras-hub's encoder/decoder layers in the same shape (the peer users would assemble)."""

  def __init__(self, hp, vocab):
    super().__init__()
    import keras_hub
    self.embedding = keras_hub.layers.ReversibleEmbedding(vocab, hp.hidden_size, tie_weights=True)
    self.position = keras_hub.layers.SinePositionEncoding()
    kw = dict(intermediate_dim=hp.filter_size, num_heads=hp.num_heads,
              dropout=hp.layer_prepostprocess_dropout, normalize_first=hp.norm_type == "pre",
              layer_norm_epsilon=hp.layer_norm_epsilon)
    self.encoders = [keras_hub.layers.TransformerEncoder(**kw) for _ in range(hp.num_encoder_layers)]
    self.decoders = [keras_hub.layers.TransformerDecoder(**kw) for _ in range(hp.num_decoder_layers)]
    self.scale = hp.hidden_size ** 0.5

  def embed(self, ids):
    x = self.embedding(ids) * self.scale
    return x + self.position(x)

  def call(self, inputs, training=False):
    source, target = inputs["inputs"], inputs["targets"]
    decoder_input = tf.pad(target[:, :-1], [[0, 0], [1, 0]])
    x = self.embed(source)
    source_mask = source != 0
    for layer in self.encoders:
      x = layer(x, padding_mask=source_mask, training=training)
    y = self.embed(decoder_input)
    for layer in self.decoders:
      y = layer(y, x, encoder_padding_mask=source_mask, use_causal_mask=True, training=training)
    return self.embedding(y, reverse=True)


def make_step(model, hp, loss="keras", xla=False):
  """A Keras user's training step: Adam (paper betas) and a label-smoothed cross entropy.

  loss: "keras" (CategoricalCrossentropy on one-hot targets, padding masked) or "t2t_lite" (our
  fused kernel).
  """
  optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
  keras_loss = keras.losses.CategoricalCrossentropy(
      from_logits=True, label_smoothing=hp.label_smoothing, reduction="sum")

  def loss_fn(logits, targets):
    if loss == "keras":
      weights = tf.cast(targets != 0, tf.float32)
      one_hot = tf.one_hot(targets, tf.shape(logits)[-1])
      return keras_loss(one_hot, logits, sample_weight=weights) / tf.reduce_sum(weights)
    loss_sum, count, _ = fast_smoothed_cross_entropy(logits, targets, hp.label_smoothing)
    return loss_sum / count

  @tf.function(jit_compile=xla or None)
  def step(batch):
    with tf.GradientTape() as tape:
      value = loss_fn(model(batch, training=True), batch["targets"])
    grads = tape.gradient(value, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return value
  return step


def trainer_step(hp, vocab, xla=False, precision="float32"):
  """t2t_lite's own training step, through the Trainer (output in a temporary directory)."""
  trainer = train_loop.Trainer(hp.replace(xla_compile=xla, mixed_precision=precision), vocab,
                                tempfile.mkdtemp(prefix="bench_train_"))
  return lambda batch: trainer.train_step(batch)[0]


def bench_loss(shapes=((8000, 128), (32000, 512)), tokens=2048, repeats=20):
  """Forward + gradients of the pre-softmax projection and the loss on [tokens, d] features:
  the projection then the keras.ops reference (autodiff), the projection then the XLA loss
  kernel, and the fused projection + loss the trainer uses."""
  print("| vocab | d | projection + loss | ms (value + gradients) | speed-up |")
  print("|---|---|---|---|---|")
  for vocab, depth in shapes:
    rng = np.random.default_rng(0)
    features = tf.constant(rng.normal(size=(1, tokens, depth)).astype("float32"))
    table = tf.constant(rng.normal(size=(vocab, depth)).astype("float32") * depth ** -0.5)
    targets = tf.constant(rng.integers(1, vocab, (1, tokens)).astype("int32"))
    variants = {
        "matmul, keras.ops reference (autodiff)": lambda: smoothed_cross_entropy(
            tf.matmul(features, table, transpose_b=True), targets, 0.1),
        "matmul, XLA loss kernel (hand-written gradient)": lambda: fast_smoothed_cross_entropy(
            tf.matmul(features, table, transpose_b=True), targets, 0.1),
        "projected_cross_entropy (fused, the trainer's)": lambda: projected_cross_entropy(
            features, table, targets, 0.1)}
    times = {}
    for name, fn in variants.items():
      @tf.function
      def value_and_grads(fn=fn):
        with tf.GradientTape() as tape:
          tape.watch([features, table])
          loss = fn()[0]
        return [loss] + tape.gradient(loss, [features, table])

      [t.numpy() for t in value_and_grads()]
      start = time.perf_counter()
      for _ in range(repeats):
        [t.numpy() for t in value_and_grads()]
      times[name] = (time.perf_counter() - start) / repeats
      first = next(iter(times.values()))
      print(f"| {vocab} | {depth} | {name} | {times[name] * 1000:.1f} | {first / times[name]:.2f}x |",
            flush=True)


def bench_dropout(shape=(2048, 512), repeats=50):
  """Dropout (rate 0.1) with its gradient on one [2048, 512] tensor: Keras' layer in a graph
  and under XLA, against t2t_lite's hashed mask; then a tiny model's forward pass at 64x32 in
  training (dropout on) and at inference (off), the share of the step dropout takes."""
  from t2t_lite.layers import Dropout  # pylint: disable=import-outside-toplevel
  from t2t_lite.training.train_loop import build_model  # pylint: disable=import-outside-toplevel
  x = tf.random.normal(shape)

  def ms(fn):
    return fastest_ms({"fn": fn}, repeats, rounds=5)["fn"]

  def value_and_grad(layer, xla):
    @tf.function(jit_compile=xla or None)
    def fn():
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(layer(x, training=True))
      return y, tape.gradient(y, x)
    return lambda: [t.numpy() for t in fn()]

  print("| dropout 0.1, value + gradient, [2048, 512] | ms |")
  print("|---|---|")
  for name, layer, xla in (("keras.layers.Dropout, graph", keras.layers.Dropout(0.1), False),
                           ("keras.layers.Dropout, XLA", keras.layers.Dropout(0.1), True),
                           ("t2t_lite Dropout (hashed mask)", Dropout(0.1), False)):
    print(f"| {name} | {ms(value_and_grad(layer, xla)):.2f} |", flush=True)
  from t2t_lite.layers import dropout as dropout_lib  # pylint: disable=import-outside-toplevel
  hashed = dropout_lib.tf_dropout
  keras_mask = lambda x, rate, seed: tf.nn.experimental.stateless_dropout(  # what Keras runs
      x, rate, seed=tf.cast(seed, tf.int32))
  model = build_model(get_hparams("transformer_tiny"), 8000)
  batch = random_batches(8000, 64, 32)[0]
  print("| transformer_tiny forward, 64x32 | ms |")
  print("|---|---|")
  # Twice each, interleaved: the first configuration timed ran slow.
  for name, training, mask in 2 * (("inference (no dropout)", False, hashed),
                                   ("training, Keras' dropout mask", True, keras_mask),
                                   ("training, hashed dropout mask", True, hashed)):
    dropout_lib.tf_dropout = mask  # read when the forward is traced, just below
    forward = tf.function(lambda b, t=training: tf.reduce_sum(model.decoder_output(b, training=t)))
    print(f"| {name} | {ms(lambda f=forward: f(batch).numpy()):.1f} |", flush=True)
  dropout_lib.tf_dropout = hashed


def bench_adam(rounds=7):
  """One Adam update of all of a model's variables (random gradients) in a graph: Keras'
  `Adam.update_step`, about a dozen element-wise ops per variable, against t2t_lite's fused
  kernel. The fastest of `rounds` interleaved rounds."""
  from t2t_lite.training.adam import Adam  # pylint: disable=import-outside-toplevel
  from t2t_lite.training.train_loop import build_model  # pylint: disable=import-outside-toplevel
  print("| shape | parameters | keras.optimizers.Adam ms | t2t_lite Adam (fused) ms | speed-up |")
  print("|---|---|---|---|---|")
  for shape, (set_name, vocab) in SHAPES.items():
    variables = build_model(get_hparams(set_name), vocab).trainable_variables
    grads = [tf.random.normal(v.shape) * 1e-3 for v in variables]
    updates = {}
    for cls in (keras.optimizers.Adam, Adam):
      optimizer = cls(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
      optimizer.build(variables)
      update = tf.function(lambda o=optimizer: o.apply_gradients(zip(grads, variables)))
      updates[cls] = lambda u=update: u().numpy()
    best = fastest_ms(updates, repeats=20 if shape == "tiny" else 3, rounds=rounds)
    params = sum(int(np.prod(v.shape)) for v in variables)
    keras_ms, fused_ms = best[keras.optimizers.Adam], best[Adam]
    print(f"| {shape} | {params / 1e6:.1f}M | {keras_ms:.1f} | {fused_ms:.1f} | "
          f"{keras_ms / fused_ms:.2f}x |", flush=True)


def bench_projection(rounds=3):
  """The projections' input gradient `dy @ W^T` ([2048, k] x [512, k]^T): oneDNN's matmul with
  `transpose_b` against the transpose made first (through `Snapshot`, as `projection.project` does),
  in GFLOP/s; then a transformer_base training step at 64x32 in a graph with `projection.project`
  and with plain matmuls, interleaved rounds."""
  from keras import ops  # pylint: disable=import-outside-toplevel
  from t2t_lite.layers import projection  # pylint: disable=import-outside-toplevel
  print("| dy @ W^T | transpose_b GFLOP/s | transposed copy GFLOP/s |")
  print("|---|---|---|")
  for k in (512, 1024, 1536, 2048):
    dy, w = tf.random.normal((2048, k)), tf.random.normal((512, k))
    fns = {"transpose_b": tf.function(lambda: tf.matmul(dy, w, transpose_b=True)),
           "copy": tf.function(lambda: tf.matmul(dy, tf.raw_ops.Snapshot(input=tf.transpose(w))))}
    best = fastest_ms({name: lambda f=f: f().numpy() for name, f in fns.items()}, 10, 5)
    gflop = 2 * 2048 * k * 512 / 1e9
    print(f"| [2048, {k}] x [512, {k}]^T | {gflop / best['transpose_b'] * 1000:.0f} | "
          f"{gflop / best['copy'] * 1000:.0f} |", flush=True)
  fast = projection.project
  steps = {}
  for name, project in (("plain matmul", lambda x, kernel: ops.matmul(x, kernel)),
                        ("projection.project", fast)):
    projection.project = project  # read when the step is traced, in time_steps' warm-up
    keras.utils.set_random_seed(0)
    step = trainer_step(get_hparams("transformer_base"), 32000)
    step(random_batches(32000, 64, 32)[0]).numpy()
    steps[name] = step
  projection.project = fast
  print("| transformer_base step, 64x32, graph | target tok/s |")
  print("|---|---|")
  for name, (tok_s, _) in time_steps(steps, random_batches(32000, 64, 32), 1, 3,
                                     rounds=rounds).items():
    print(f"| {name} | {tok_s:,.0f} |", flush=True)


def time_steps(steps, batches, warmup, min_steps, min_seconds=5.0, rounds=3):
  """{name: (target tokens/s, s/step)} of each step function's fastest timing round.

  Every batch shape is traced before timing starts. The rounds are interleaved (each round times
  every step function once, in turn), so a slow spell of this shared machine hits all of them
  alike; a round runs at least `min_steps` steps and at least `min_seconds`. Each function's
  fastest round is reported: noise only ever slows a round down.
  """
  for step in steps.values():
    for i in range(max(warmup, len(batches))):
      step(batches[i % len(batches)]).numpy()
  best = {}
  for _ in range(rounds):
    for name, step in steps.items():
      tokens, count, start = 0, 0, time.perf_counter()
      while count < min_steps or time.perf_counter() - start < min_seconds:
        batch = batches[count % len(batches)]
        step(batch).numpy()
        tokens += int(np.sum(batch["targets"] != 0))
        count += 1
      elapsed = time.perf_counter() - start
      if name not in best or tokens / elapsed > best[name][0]:
        best[name] = (tokens / elapsed, elapsed / count)
  return best


def random_batches(vocab, batch, length, count=4, seed=0):
  rng = np.random.default_rng(seed)
  return [{"inputs": rng.integers(2, vocab, (batch, length)).astype("int32"),
           "targets": rng.integers(2, vocab, (batch, length)).astype("int32")} for _ in range(count)]


def multi30k_batches(hp, count=8):
  from t2t_lite.problems import get_problem
  here = os.path.dirname(os.path.abspath(__file__))
  raw = os.path.join(here, "..", "..", "shared", "data", "multi30k")
  problem = get_problem("translate_ende_multi30k", raw_data_dir=raw)
  data = problem.dataset("train", tempfile.mkdtemp(prefix="bench_train_"), hp, training=True)
  return [{k: v.numpy() for k, v in b.items()} for b, _ in zip(data, range(count))]


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="tiny,base")
  parser.add_argument("--steps", type=int, default=None,
                      help="at least this many steps per timing round (default: 10 tiny, 3 base)")
  parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--no_peer", action="store_true")
  parser.add_argument("--batches", default="64x32,16x128,multi30k",
                      help="comma-separated: BATCHxLENGTH random batches, multi30k (tiny only)")
  parser.add_argument("--precisions", default="float32,mixed_bfloat16",
                      help="comma-separated: float32, mixed_bfloat16 (each timed for ours and the peers)")
  parser.add_argument("--loss", action="store_true", help="only: the loss kernels alone")
  parser.add_argument("--dropout", action="store_true",
                      help="only: Keras' dropout against the hashed one, and its share of a forward")
  parser.add_argument("--adam", action="store_true",
                      help="only: one Adam update of all variables, Keras' against the fused one")
  parser.add_argument("--projection", action="store_true",
                      help="only: the projections' input-gradient matmul, transpose_b against a copy")
  parser.add_argument("--memory", action="store_true",
                      help="only: peak resident memory of base training steps at 4096 tokens (128x32)")
  args = parser.parse_args()
  if args.loss:
    bench_loss()
    return
  if args.dropout:
    bench_dropout()
    return
  if args.adam:
    bench_adam()
    return
  if args.projection:
    bench_projection()
    return
  if args.memory:
    import resource
    hp = get_hparams("transformer_base")
    batches = random_batches(32000, 128, 32)
    time_steps({"base": trainer_step(hp, 32000)}, batches, 1, 3, rounds=1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory, transformer_base (vocab 32k) training at 128x32 = 4096 tokens: "
          f"{peak:,.0f} MiB (the whole process: TensorFlow, model, Adam slots, activations)")
    return
  precisions = args.precisions.split(",")
  for precision in precisions:
    if precision not in PRECISIONS:
      parser.error(f"--precisions: {precision!r} is not one of {', '.join(PRECISIONS)}")
  rows = [(shape, batches) for shape in args.shapes.split(",") for batches in args.batches.split(",")
          if batches != "multi30k" or shape == "tiny"]
  if len(rows) > 1:
    # One process per row: TensorFlow does not give back a row's models, traces and XLA programs
    # (nine base configurations per row), and two base rows in one process ran out of 24 GiB.
    for shape, batches in rows:
      command = [sys.executable, os.path.abspath(__file__), "--shapes", shape, "--batches", batches]
      for flag in ("steps", "rounds", "warmup", "precisions"):
        if getattr(args, flag) is not None:
          command += [f"--{flag}", str(getattr(args, flag))]
      subprocess.run(command + (["--no_peer"] if args.no_peer else []), check=True)
    return
  peaks = {p: matmul_peak(dtype=PRECISIONS[p][1]) for p in precisions}
  for precision, peak in peaks.items():
    print(f"{PRECISIONS[precision][1]} matmul peak (TF, 2048^3): {peak / 1e9:.0f} GFLOP/s; oneDNN "
          f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS')}; threads: {os.cpu_count()}")
  print("| shape | batch | model | target tok/s | s/step | MFU (at its precision's peak) |")
  print("|---|---|---|---|---|---|")
  for shape, row in rows:  # at most one: more run in processes of their own (above)
    set_name, vocab = SHAPES[shape]
    hp = get_hparams(set_name)
    if row == "multi30k":
      label, batches = "Multi30k 4096-token", multi30k_batches(hp.replace(batch_size=4096))
    else:
      b, l = (int(n) for n in row.split("x"))
      label, batches = row, random_batches(vocab, b, l)
    vocab_here = vocab if "x" in label else 8000
    flops = np.mean([3 * forward_flops(hp, vocab_here, *b["inputs"].shape[:1], b["inputs"].shape[1],
                                       b["targets"].shape[1]) for b in batches])
    runs = {}  # name: (precision, builder)
    for precision in precisions:
      suffix = PRECISIONS[precision][0]
      for xla in (False, True):
        runs[f"t2t_lite{' XLA' * xla}{suffix}"] = (precision, lambda p=precision, x=xla: trainer_step(
            hp, vocab_here, xla=x, precision=p))
      if not args.no_peer:
        peer_configs = [("keras-hub", "keras", False), ("keras-hub XLA", "keras", True)]
        if precision == "float32":
          peer_configs.append(("keras-hub + our loss", "t2t_lite", False))
        for name, loss, xla in peer_configs:
          runs[name + suffix] = (precision, lambda p=precision, loss=loss, xla=xla: peer_step(
              hp, vocab_here, batches[0], loss, xla, p))
    steps = {}
    for name, (_, build) in runs.items():
      keras.utils.set_random_seed(0)
      steps[name] = build()
    keras.mixed_precision.set_global_policy("float32")
    min_steps = args.steps or (10 if shape == "tiny" else 3)
    timings = time_steps(steps, batches, args.warmup, min_steps, rounds=args.rounds)
    results = {}
    for name, (tok_s, s_step) in timings.items():
      results[name] = tok_s
      peak = peaks[runs[name][0]]
      print(f"| {shape} | {label} | {name} | {tok_s:,.0f} | {s_step:.3f} | {flops / s_step / peak:.2f} |",
            flush=True)
    # "keras-hub + our loss" contains our code: a diagnostic, not a peer.
    is_peer = lambda name: name.startswith("keras-hub") and "our loss" not in name  # noqa: E731
    groups = [(PRECISIONS[p][1], [n for n in results if runs[n][0] == p]) for p in precisions]
    if len(precisions) > 1:
      groups.append(("any precision", list(results)))
    for group, names in groups:
      peers = {n: results[n] for n in names if is_peer(n)}
      if not peers:
        continue
      ours = max((n for n in names if n.startswith("t2t_lite")), key=results.get)
      best = max(peers, key=peers.get)
      print(f"| {shape} | {label} | {group}: {ours} / best peer ({best}) | "
            f"{results[ours] / results[best]:.2f}x | | |", flush=True)
    peers = {n: v for n, v in results.items() if is_peer(n)}
    if not peers:
      continue
    best = max(peers, key=peers.get)
    tokens = np.mean([np.sum(b["targets"] != 0) for b in batches])
    for precision in precisions:
      # Every counted FLOP at this precision's matmul peak and nothing else: no step can be faster.
      ceiling = tokens * peaks[precision] / flops
      print(f"| {shape} | {label} | ceiling (MFU 1.0 at the {PRECISIONS[precision][1]} peak: "
            f"{ceiling:,.0f} tok/s) / best peer ({best}) | {ceiling / peers[best]:.2f}x | | |",
            flush=True)


def peer_step(hp, vocab, first_batch, loss, xla, precision="float32"):
  keras.mixed_precision.set_global_policy(precision)  # as a Keras user turns it on
  model = KerasHubPeer(hp, vocab)
  model(first_batch)
  return make_step(model, hp, loss, xla)


if __name__ == "__main__":
  main()
