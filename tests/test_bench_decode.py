"""The decoding benchmark's FLOP count (`scripts/bench_decode.py`, `decode_products`) against an
independent count: the matrix products of the program itself. The HLO that XLA gets for the
encoder (with the encoder-decoder keys/values) and for the decoding step at each position lists
every dot with its shapes; their FLOPs, the step's at each position and hypothesis count, summed,
must equal the count from the config. A config whose every width differs (keys, values, model,
filter, heads, layers, vocabulary, source length) catches a width used in the wrong place.

The training benchmark's (`scripts/bench_train.py`) arithmetic the same way: its forward FLOPs
against the dots of the model's own forward pass, and its tokens/s against a fake clock.
"""

import math
import pathlib
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams.model_config import ModelConfig
from t2t_lite.models.transformer import Transformer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import bench_decode  # noqa: E402  pylint: disable=wrong-import-position
import bench_train  # noqa: E402  pylint: disable=wrong-import-position
import benchmarking  # noqa: E402  pylint: disable=wrong-import-position

# An HLO dot: `name = f32[2,3]{1,0} dot(f32[2,4]{1,0} lhs, f32[4,3]{1,0} rhs), lhs_contracting_dims={1}, ...`
DOT = re.compile(r"= \w+\[([\d,]*)\]\S* dot\(\w+\[([\d,]*)\]")
CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")


def dims(text):
  return [int(n) for n in text.split(",") if n]


def hlo_dot_flops(hlo):
  """FLOPs of every dot of an HLO module: 2 x the output's elements x the contracted size."""
  total, dots = 0, 0
  for line in hlo.splitlines():
    dot = DOT.search(line)
    if dot:
      output, lhs = dims(dot.group(1)), dims(dot.group(2))
      contracted = [lhs[i] for i in dims(CONTRACTING.search(line).group(1))]
      total += 2 * math.prod(output) * math.prod(contracted)
      dots += 1
  return total, dots


def compiled_flops(fn, *args):
  """Dot FLOPs of `fn(*args)` as XLA gets it (the HLO before XLA's optimizations)."""
  return hlo_dot_flops(tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo"))


CONFIG = ModelConfig(hidden_size=24, filter_size=40, num_heads=2, num_encoder_layers=2,
                     num_decoder_layers=3, attention_key_channels=16, attention_value_channels=12)
VOCAB, SOURCE_LENGTH, STEPS, BATCH = 37, 5, 4, 2


@pytest.fixture(scope="module")
def model():
  model = Transformer(CONFIG, VOCAB)
  model.build()
  return model


def decode_step(model, step):
  return lambda ids, cache: model.decode_step(ids, step, cache)


@pytest.mark.parametrize("beam", [1, 3])
def test_decode_flops_equal_the_compiled_dots(model, beam):
  source = tf.constant(np.random.default_rng(0).integers(2, VOCAB, (BATCH, SOURCE_LENGTH)), tf.int32)
  # Once per sentence: the encoder and the encoder-decoder keys/values (`init_cache`).
  sentence, dots = compiled_flops(lambda s: model.init_cache(*model.encode(s), max_length=1), source)
  assert dots == CONFIG.num_encoder_layers * 6 + CONFIG.num_decoder_layers
  steps = 0
  for step in range(STEPS):
    # The first step has one hypothesis per sentence; later ones `beam`. At step t the cache
    # holds exactly the t + 1 positions attended.
    hypotheses = 1 if step == 0 else beam
    rows = tf.repeat(source, hypotheses, axis=0)
    cache = model.init_cache(*model.encode(rows), max_length=step + 1)
    ids = tf.zeros((BATCH * hypotheses,), tf.int32)
    flops, _ = compiled_flops(decode_step(model, step), ids, cache)
    steps += flops
  counted = bench_decode.decode_products(CONFIG, VOCAB, SOURCE_LENGTH, STEPS, beam)
  assert BATCH * sum(p.flops for p in counted if not p.per_hypothesis) == sentence
  assert BATCH * sum(p.flops for p in counted if p.per_hypothesis) == steps
  assert BATCH * bench_decode.decode_flops(CONFIG, VOCAB, SOURCE_LENGTH, STEPS, beam) == sentence + steps


def test_base_flops_per_token():
  """transformer_base with a 32k vocabulary: 6 decoder layers of 6 d^2 + 2 d ff multiply-adds
  and the d x V output projection per hypothesis-step, about 77 MFLOP, besides attention."""
  config = ModelConfig()
  products = bench_decode.decode_products(config, 32000, 30, 30)
  weights = sum(p.flops for p in products if p.per_hypothesis and p.weights) / 30
  assert weights == 2 * (6 * (6 * 512 ** 2 + 2 * 512 * 2048) + 512 * 32000)
  assert round(weights / 1e6) == 77


def test_ceiling_seconds_charge_each_shape_its_rate():
  """At one rate for every shape, equal to the peak, the decoder-shape ceiling is the FLOPs at the
  peak; halving one shape's rate adds exactly that shape's FLOPs once more."""
  products = bench_decode.decode_products(CONFIG, VOCAB, SOURCE_LENGTH, STEPS, 3)
  shapes = bench_decode.product_shapes({3: products}, BATCH)
  peak = 1e9
  rates = {shape: {"XLA": peak, "TF graph": peak / 2} for shape in shapes}
  total = BATCH * sum(p.flops for p in products)
  assert bench_decode.ceiling_seconds(products, BATCH, 3, rates, peak) == pytest.approx(total / peak)
  output = (BATCH * 3, CONFIG.hidden_size, VOCAB)
  rates[output] = {"XLA": peak / 2, "TF graph": peak / 4}
  extra = BATCH * sum(p.flops for p in products if p.name == "output projection")
  assert bench_decode.ceiling_seconds(products, BATCH, 3, rates, peak) == pytest.approx(
      (total + extra) / peak)


@pytest.mark.parametrize("jit", [False, True])
def test_mask_eos_writes_only_the_eos_column(jit):
  """The fixed work's EOS mask (an in-place column write) against numpy: EOS's logit is -1e9 in
  every row, even where it was the largest, and every other logit is untouched; the same under
  XLA, where the search runs it."""
  logits = np.random.default_rng(0).normal(size=(5, 11)).astype("float32")
  logits[2, bench_decode.EOS_ID] = 50.0                       # EOS the argmax of a row
  expected = logits.copy()
  expected[:, bench_decode.EOS_ID] = -1e9
  mask = tf.function(bench_decode.mask_eos, jit_compile=True) if jit else bench_decode.mask_eos
  masked = mask(tf.constant(logits)).numpy()
  np.testing.assert_array_equal(masked, expected)
  assert (masked.argmax(-1) != bench_decode.EOS_ID).all()


def test_train_forward_flops_equal_the_compiled_dots():
  """`bench_train.forward_flops` (3x it is every row's FLOPs per step, hence its MFU and ceilings)
  against the dots of the model's teacher-forced forward pass: projections, FFN, the attention
  scores and weighted sums of all three attentions (the causal one computed in full, as counted)
  and the output projection. Source and target lengths, layer counts and widths all differ, so
  a length or width in the wrong place, or a product left out, changes the count."""
  from t2t_lite import model_dir  # pylint: disable=import-outside-toplevel
  from t2t_lite.hparams import get_hparams  # pylint: disable=import-outside-toplevel

  hp = get_hparams("transformer_tiny", "hidden_size=24,filter_size=40,num_heads=2,"
                   "num_encoder_layers=2,num_decoder_layers=3")
  batch, source_length, target_length = 2, 5, 7
  model = model_dir.build_model(hp, VOCAB)
  rng = np.random.default_rng(0)
  inputs = {"inputs": tf.constant(rng.integers(2, VOCAB, (batch, source_length)), tf.int32),
            "targets": tf.constant(rng.integers(2, VOCAB, (batch, target_length)), tf.int32)}
  flops, dots = compiled_flops(lambda b: model(b, training=False), inputs)
  # Per encoder layer the fused QKV and the output projections, 2 FFN and 2 attention products;
  # per decoder layer QKV, output, the cross Q, fused KV and output, 2 FFN and 4 attention
  # products; the output projection.
  assert dots == 6 * hp.num_encoder_layers + 11 * hp.num_decoder_layers + 1
  assert bench_train.forward_flops(hp, VOCAB, batch, source_length, target_length) == flops


def test_train_tokens_per_second_are_the_best_rounds_work_over_its_time(monkeypatch):
  """`bench_train.time_steps` on a fake clock: each step advances it by its own schedule, slow
  warm-up calls (tracing) first. A row's tokens/s is the target tokens (PAD not counted) of the
  calls of its fastest round, cycling through the batches, over that round's time; s/step that
  round's time per step. Written out: 3 steps a round over batches of 3 and 5 tokens are
  3 + 5 + 3 = 11 tokens; in 3 x 1 s (the middle round of "slow"), 11/3 tokens/s."""
  now = [0.0]
  monkeypatch.setattr(benchmarking, "time", type("Clock", (), {"perf_counter": lambda: now[0]}))
  durations = {"slow": iter([100.0] * 2 + [2.0] * 3 + [1.0] * 3 + [1.5] * 3),
               "fast": iter([100.0] * 2 + [0.5] * 9)}

  def step(name):
    def run(batch):
      assert batch["targets"].shape == (2, 3)
      now[0] += next(durations[name])
      return tf.constant(0.0)
    return run

  batches = [{"inputs": np.ones((2, 3), "int32"), "targets": np.array([[5, 6, 0], [7, 0, 0]], "int32")},
             {"inputs": np.ones((2, 3), "int32"), "targets": np.array([[5, 6, 7], [8, 9, 0]], "int32")}]
  timings = bench_train.time_steps({name: step(name) for name in durations}, batches, warmup=1,
                                   min_steps=3, min_seconds=0, rounds=3)
  assert timings == {"slow": (pytest.approx(11 / 3), pytest.approx(1.0)),
                     "fast": (pytest.approx(11 / 1.5), pytest.approx(0.5))}
  assert all(next(d, None) is None for d in durations.values())  # 2 warm-up calls, 3 rounds of 3
