"""Training throughput: t2t_lite's training step against keras-hub peers of the same shape, and MFU.

    python scripts/bench_train.py                 # tiny and base, 64x32 and 16x128, + Multi30k
    python scripts/bench_train.py --shapes tiny --steps 10 --rounds 3
    python scripts/bench_train.py --shapes base --batches 16x128
    python scripts/bench_train.py --precisions float32   # float32 rows only (about half the time)
    python scripts/bench_train.py --shapes multi30k --batches multi30k   # the Multi30k recipe's model
    python scripts/bench_train.py --loss          # only the projection + loss, 2048 tokens
    python scripts/bench_train.py --dropout       # only dropout: Keras' against the hashed mask
    python scripts/bench_train.py --adam          # only the optimizer update: Keras' Adam, fused
    python scripts/bench_train.py --projection    # only the projections' input-gradient matmul
    python scripts/bench_train.py --smoke         # seconds: tiny, one 2x8 batch, one round (a test)

Rows, each timed the same way (warm-up steps, every batch shape traced, excluded):
- `t2t_lite`: the trainer's own step (`Trainer.train_step`: the model with its hashed dropout,
  the pre-softmax projection fused with the label-smoothed loss and its gradient
  (`projected_cross_entropy`), Adam with the paper's betas and schedule (its update fused into one
  XLA kernel per variable, `t2t_lite.training.adam`), the NaN guard);
  `t2t_lite XLA`: the same with `xla_compile=True` (the forward and backward pass compiled;
  the update is Adam's own XLA kernel per variable, as without it).
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
traced, then timed in `--rounds` interleaved rounds (each at least `--min_seconds` and
`--steps` steps; `benchmarking.interleaved`); each reports its fastest.
TF_ENABLE_ONEDNN_OPTS=1 (the default here) for all. Each row's header says which of its
configurations the hparams' `auto` (t2t_lite.fast_path) picks on this machine.
"""

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

# First: it sets TensorFlow's environment before TensorFlow is imported.
from benchmarking import (SHAPES, build_model, interleaved, matmul_peak, milliseconds, random_batches,
                          target_tokens)

import keras
import numpy as np
import tensorflow as tf

from t2t_lite import fast_path
from t2t_lite.hparams import get_hparams
from t2t_lite.layers import Dropout, dropout, projection
from t2t_lite.training import train_loop
from t2t_lite.training.adam import Adam
from t2t_lite.training.loss import (fast_smoothed_cross_entropy, projected_cross_entropy,
                                    smoothed_cross_entropy)

# Keras dtype policy: (row-name suffix, matmul dtype of its peak)
PRECISIONS = {"float32": ("", "float32"), "mixed_bfloat16": (" bf16", "bfloat16")}
# The shapes rows time: the benchmarks' shared ones and the Multi30k recipe's model.
TRAIN_SHAPES = {**SHAPES, "multi30k": ("transformer_multi30k", 8000)}
SMOKE = ["--shapes", "tiny", "--batches", "2x8", "--precisions", "float32", "--steps", "1",
         "--rounds", "1", "--warmup", "1", "--min_seconds", "0", "--no_peer"]


def forward_flops(hp, vocab, batch, source_len, target_len):
  d, ff = hp.hidden_size, hp.filter_size
  enc = hp.num_encoder_layers * (batch * source_len * (4 * d * d + 2 * d * ff)
                                 + 2 * batch * source_len * source_len * d)
  dec = hp.num_decoder_layers * (batch * target_len * (4 * d * d + 2 * d * d + 2 * d * ff)
                                 + batch * source_len * 2 * d * d
                                 + 2 * batch * target_len * target_len * d
                                 + 2 * batch * target_len * source_len * d)
  return 2 * (enc + dec + batch * target_len * d * vocab)


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


def peer_step(hp, vocab, first_batch, loss, xla, precision="float32"):
  keras.mixed_precision.set_global_policy(precision)  # as a Keras user turns it on
  model = KerasHubPeer(hp, vocab)
  model(first_batch)
  return make_step(model, hp, loss, xla)


def scratch_dir():
  """A new temporary directory, removed when the script exits (a run left one behind per trainer
  and data set before)."""
  path = tempfile.mkdtemp(prefix="bench_train_")
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  return path


def trainer_step(hp, vocab, xla=False, precision="float32"):
  """t2t_lite's own training step, through the Trainer (output in a temporary directory)."""
  trainer = train_loop.Trainer(hp.replace(xla_compile=xla, mixed_precision=precision), vocab,
                               scratch_dir())
  return lambda batch: trainer.train_step(batch)[0]


def time_steps(steps, batches, warmup, min_steps, min_seconds=5.0, rounds=3):
  """{name: (target tokens/s, s/step)} of each step function's fastest timing round.

  Every batch shape is traced before timing starts (`max(warmup, len(batches))` warm-up steps);
  each round runs at least `min_steps` steps and `min_seconds`, cycling through `batches`.
  """
  tokens = [target_tokens(batch) for batch in batches]
  fns = {name: lambda i, step=step: step(batches[i % len(batches)]).numpy()
         for name, step in steps.items()}
  timings = interleaved(fns, rounds, min_steps, min_seconds, warm_up=max(warmup, len(batches)),
                        work=lambda calls: sum(tokens[i % len(tokens)] for i in range(calls)))
  return {name: (sum(tokens[i % len(tokens)] for i in range(t.calls)) / (t.seconds * t.calls),
                 t.seconds) for name, t in timings.items()}


def bench_loss(shapes=((8000, 128), (32000, 512)), tokens=2048, repeats=20):
  """Forward + gradients of the pre-softmax projection and the loss on [tokens, d] decoder
  outputs: the projection then the keras.ops reference (autodiff), the projection then the XLA
  loss kernel, and the fused projection + loss the trainer uses."""
  print("| vocab | d | projection + loss | ms (value + gradients) | speed-up |")
  print("|---|---|---|---|---|")
  for vocab, depth in shapes:
    rng = np.random.default_rng(0)
    outputs = tf.constant(rng.normal(size=(1, tokens, depth)).astype("float32"))
    table = tf.constant(rng.normal(size=(vocab, depth)).astype("float32") * depth ** -0.5)
    targets = tf.constant(rng.integers(1, vocab, (1, tokens)).astype("int32"))

    def logits(outputs=outputs, table=table):
      return tf.matmul(outputs, table, transpose_b=True)

    losses = {
        "matmul, keras.ops reference (autodiff)": lambda o, t, targets=targets: smoothed_cross_entropy(
            logits(o, t), targets, 0.1),
        "matmul, XLA loss kernel (hand-written gradient)":
            lambda o, t, targets=targets: fast_smoothed_cross_entropy(logits(o, t), targets, 0.1),
        "projected_cross_entropy (fused, the trainer's)":
            lambda o, t, targets=targets: projected_cross_entropy(o, t, targets, 0.1)}
    runs = {name: value_and_gradients(loss, outputs, table) for name, loss in losses.items()}
    # One round each, as the figures in the README were taken.
    times = milliseconds(runs, repeats, rounds=1)
    first = next(iter(times.values()))
    for name, ms in times.items():
      print(f"| {vocab} | {depth} | {name} | {ms:.1f} | {first / ms:.2f}x |", flush=True)


def value_and_gradients(loss, outputs, table):
  """A zero-argument function: `loss(outputs, table)[0]` and its gradients, in a graph."""
  @tf.function
  def run():
    with tf.GradientTape() as tape:
      tape.watch([outputs, table])
      value = loss(outputs, table)[0]
    return [value] + tape.gradient(value, [outputs, table])
  return lambda: [t.numpy() for t in run()]


def bench_dropout(shape=(2048, 512), repeats=50):
  """Dropout (rate 0.1) with its gradient on one [2048, 512] tensor: Keras' layer in a graph
  and under XLA, against t2t_lite's hashed mask; then a tiny model's forward pass at 64x32 in
  training (dropout on) and at inference (off), the share of the step dropout takes."""
  x = tf.random.normal(shape)

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
    ms = milliseconds({name: value_and_grad(layer, xla)}, repeats, rounds=5)[name]
    print(f"| {name} | {ms:.2f} |", flush=True)
  model = build_model("tiny")
  batch = random_batches(SHAPES["tiny"][1], 64, 32)[0]
  forwards = {}
  for name, training, hashed in (("inference (no dropout)", False, True),
                                 ("training, Keras' dropout mask", True, False),
                                 ("training, hashed dropout mask", True, True)):
    with dropout.hashed_masks(hashed):  # read when the forward is traced, here
      forward = tf.function(lambda b, t=training: tf.reduce_sum(model.decoder_output(b, training=t)))
      forward(batch).numpy()
    forwards[name] = lambda f=forward: f(batch).numpy()
  print("| transformer_tiny forward, 64x32 | ms |")
  print("|---|---|")
  for name, ms in milliseconds(forwards, repeats, rounds=5).items():
    print(f"| {name} | {ms:.1f} |", flush=True)


def bench_adam(rounds=7):
  """One Adam update of all of a model's variables (random gradients) in a graph: Keras'
  `Adam.update_step`, about a dozen element-wise ops per variable, against t2t_lite's fused
  kernel. The fastest of `rounds` interleaved rounds."""
  print("| shape | parameters | keras.optimizers.Adam ms | t2t_lite Adam (fused) ms | speed-up |")
  print("|---|---|---|---|---|")
  for shape in SHAPES:
    variables = build_model(shape).trainable_variables
    grads = [tf.random.normal(v.shape) * 1e-3 for v in variables]
    updates = {cls: adam_update(cls, variables, grads) for cls in (keras.optimizers.Adam, Adam)}
    best = milliseconds(updates, repeats=20 if shape == "tiny" else 3, rounds=rounds)
    params = sum(int(np.prod(v.shape)) for v in variables)
    keras_ms, fused_ms = best[keras.optimizers.Adam], best[Adam]
    print(f"| {shape} | {params / 1e6:.1f}M | {keras_ms:.1f} | {fused_ms:.1f} | "
          f"{keras_ms / fused_ms:.2f}x |", flush=True)


def adam_update(cls, variables, grads):
  """A zero-argument function: one update of `variables` by the optimizer `cls`, in a graph."""
  optimizer = cls(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
  optimizer.build(variables)
  update = tf.function(lambda: optimizer.apply_gradients(zip(grads, variables)))
  return lambda: update().numpy()


def bench_projection(rounds=3):
  """The projections' input gradient `dy @ W^T` ([2048, k] x [512, k]^T): oneDNN's matmul with
  `transpose_b` against the transpose made first (through `Snapshot`, as `projection.project`
  does), in GFLOP/s; then a transformer_base training step at 64x32 in a graph with and without
  the transposed copy (`projection.transposed_gradients`), interleaved rounds."""
  print("| dy @ W^T | transpose_b GFLOP/s | transposed copy GFLOP/s |")
  print("|---|---|---|")
  for k in (512, 1024, 1536, 2048):
    best = milliseconds(input_gradient_products(k), 10, 5)
    gflop = 2 * 2048 * k * 512 / 1e9
    print(f"| [2048, {k}] x [512, {k}]^T | {gflop / best['transpose_b'] * 1000:.0f} | "
          f"{gflop / best['copy'] * 1000:.0f} |", flush=True)
  batches = random_batches(SHAPES["base"][1], 64, 32)
  steps = {}
  for name, transposed in (("plain matmul", False), ("projection.project", True)):
    with projection.transposed_gradients(transposed):  # read when the step is traced, here
      keras.utils.set_random_seed(0)
      step = trainer_step(get_hparams("transformer_base"), SHAPES["base"][1])
      step(batches[0]).numpy()
    steps[name] = step
  print("| transformer_base step, 64x32, graph | target tok/s |")
  print("|---|---|")
  for name, (tok_s, _) in time_steps(steps, batches, 1, 3, rounds=rounds).items():
    print(f"| {name} | {tok_s:,.0f} |", flush=True)


def input_gradient_products(k):
  """{"transpose_b", "copy"}: zero-argument functions, [2048, k] x [512, k]^T in a graph."""
  dy, w = tf.random.normal((2048, k)), tf.random.normal((512, k))
  fns = {"transpose_b": tf.function(lambda: tf.matmul(dy, w, transpose_b=True)),
         "copy": tf.function(lambda: tf.matmul(dy, tf.raw_ops.Snapshot(input=tf.transpose(w))))}
  return {name: lambda f=f: f().numpy() for name, f in fns.items()}


def bench_memory():
  import resource
  batches = random_batches(SHAPES["base"][1], 128, 32)
  time_steps({"base": trainer_step(get_hparams("transformer_base"), SHAPES["base"][1])}, batches,
             1, 3, rounds=1)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  print(f"peak resident memory, transformer_base (vocab 32k) training at 128x32 = 4096 tokens: "
        f"{peak:,.0f} MiB (the whole process: TensorFlow, model, Adam slots, activations)")


def multi30k_batches(hp, count=8):
  from t2t_lite.problems import get_problem
  here = os.path.dirname(os.path.abspath(__file__))
  raw = os.path.join(here, "..", "..", "shared", "data", "multi30k")
  problem = get_problem("translate_ende_multi30k", raw_data_dir=raw)
  data = problem.dataset("train", scratch_dir(), hp, training=True)
  return [{k: v.numpy() for k, v in b.items()} for b, _ in zip(data, range(count))]


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="tiny,base",
                      help=f"comma-separated: {', '.join(TRAIN_SHAPES)} (multi30k: transformer_multi30k)")
  parser.add_argument("--steps", type=int, default=None,
                      help="at least this many steps per timing round (default: 10 tiny, 3 base)")
  parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
  parser.add_argument("--min_seconds", type=float, default=5.0, help="at least this long per round")
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--no_peer", action="store_true")
  parser.add_argument("--batches", default="64x32,16x128,multi30k",
                      help="comma-separated: BATCHxLENGTH random batches, multi30k (real "
                           "4096-token batches; shapes tiny and multi30k only)")
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
  parser.add_argument("--smoke", action="store_true",
                      help="the smallest run (seconds; tests run it): " + " ".join(SMOKE))
  args = parser.parse_args(argv)
  if args.smoke:
    args = parser.parse_args(SMOKE + (argv if argv is not None else sys.argv[1:]))
  for precision in args.precisions.split(","):
    if precision not in PRECISIONS:
      parser.error(f"--precisions: {precision!r} is not one of {', '.join(PRECISIONS)}")
  return args


def main(argv=None):
  args = parse_args(argv)
  for flag, bench in (("loss", bench_loss), ("dropout", bench_dropout), ("adam", bench_adam),
                      ("projection", bench_projection), ("memory", bench_memory)):
    if getattr(args, flag):
      bench()
      return
  precisions = args.precisions.split(",")
  rows = [(shape, batches) for shape in args.shapes.split(",") for batches in args.batches.split(",")
          if batches != "multi30k" or shape in ("tiny", "multi30k")]
  if len(rows) > 1:
    # One process per row: TensorFlow does not give back a row's models, traces and XLA programs
    # (nine base configurations per row), and two base rows in one process ran out of 24 GiB.
    for shape, batches in rows:
      command = [sys.executable, os.path.abspath(__file__), "--shapes", shape, "--batches", batches]
      for flag in ("steps", "rounds", "min_seconds", "warmup", "precisions"):
        if getattr(args, flag) is not None:
          command += [f"--{flag}", str(getattr(args, flag))]
      subprocess.run(command + (["--no_peer"] if args.no_peer else []), check=True)
    return
  time_row(*rows[0], precisions, args)


def time_row(shape, row, precisions, args):
  """Times one shape and batch row: every configuration, its MFU, ratios and ceilings."""
  peaks = {p: matmul_peak(dtype=PRECISIONS[p][1]) for p in precisions}
  for precision, peak in peaks.items():
    print(f"{PRECISIONS[precision][1]} matmul peak (TF, 2048^3): {peak / 1e9:.0f} GFLOP/s; oneDNN "
          f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS')}; threads: {os.cpu_count()}")
  path = fast_path.choose(fast_path.this_machine())
  print(f"auto (t2t_lite.fast_path) here: {path} = the row "
        f"t2t_lite{' XLA' * path.xla_compile}{PRECISIONS[path.mixed_precision][0]}")
  print("| shape | batch | model | target tok/s | s/step | MFU (at its precision's peak) |")
  print("|---|---|---|---|---|---|")
  set_name, vocab = TRAIN_SHAPES[shape]
  hp = get_hparams(set_name)
  if row == "multi30k":
    label, batches = "Multi30k 4096-token", multi30k_batches(hp.replace(batch_size=4096))
  else:
    b, length = (int(n) for n in row.split("x"))
    label, batches = row, random_batches(vocab, b, length)
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
  timings = time_steps(steps, batches, args.warmup, min_steps, args.min_seconds, args.rounds)
  results = {}
  for name, (tok_s, s_step) in timings.items():
    results[name] = tok_s
    peak = peaks[runs[name][0]]
    print(f"| {shape} | {label} | {name} | {tok_s:,.0f} | {s_step:.3f} | {flops / s_step / peak:.2f} |",
          flush=True)
  # "keras-hub + our loss" contains our code: a diagnostic, not a peer.
  is_peer = lambda name: name.startswith("keras-hub") and "our loss" not in name
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
    return
  best = max(peers, key=peers.get)
  tokens = np.mean([target_tokens(b) for b in batches])
  for precision in precisions:
    # Every counted FLOP at this precision's matmul peak and nothing else: no step can be faster.
    ceiling = tokens * peaks[precision] / flops
    print(f"| {shape} | {label} | ceiling (MFU 1.0 at the {PRECISIONS[precision][1]} peak: "
          f"{ceiling:,.0f} tok/s) / best peer ({best}) | {ceiling / peers[best]:.2f}x | | |",
          flush=True)


if __name__ == "__main__":
  main()
