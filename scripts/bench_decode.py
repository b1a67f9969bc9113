"""Decoding throughput: cached beam search and greedy against uncached decoding, fixed work.

    python scripts/bench_decode.py                          # tiny and base, batch 64 and 1
    python scripts/bench_decode.py --shapes base --batches 64
    python scripts/bench_decode.py --top_k                  # only the beam search's candidate top-k
    python scripts/bench_decode.py --gemv                   # only base's batch-1 matrix-vector products
    python scripts/bench_decode.py --smoke                  # seconds: tiny, batch 1, length 4 (a test)
    python scripts/bench_decode.py --model_dir=DIR --lines=FILE [--cache_phases_only | --no_in_process]
                                                            # a trained model on real lines
    python scripts/bench_decode.py --make_base_model_dir=DIR --raw_data_dir=../shared/data/multi30k
                                                            # a base-shaped DIR for --model_dir

Random weights; every source has 30 tokens and every output exactly 30 (EOS is masked out and
`extra_length=0`, so each sentence runs to its length limit): the work is fixed, as in
CTranslate2's benchmark. Target tokens/s counts batch x 30 per sentence (the best beam only).
"cached" is t2t_lite's decoder (key/value cache, search loop compiled with XLA: the default);
"graph (xla=false)" the same search as a plain TF graph. "uncached" recomputes the decoder over
the whole prefix at every step (the encoder once, logits only for the last position): stricter
than T2T's slow decoding; "uncached, whole model (T2T)" is T2T's slow decoding itself
(`_slow_greedy_infer`: the whole model, encoder included, re-run on the prefix at every step).
Both must give the cached search's greedy outputs; the run counts identical sentences.
Timing: every configuration of a shape and batch is traced first, then timed in `--rounds` (3)
interleaved rounds of at least `--min_seconds` (1 s) and `--repeats` calls each
(`benchmarking.interleaved`); each configuration's fastest round counts.
CTranslate2 (`pip install ctranslate2`, not a dependency; skipped when missing) runs the same
random weights, written into a CTranslate2 model by `ctranslate2_twin`, with `intra_threads` =
the cores; the run prints how many greedy outputs are identical token for token. Its float32
products are oneDNN's, whose kernels follow the CPU's instruction sets, and the widest is not
always the fastest: on a CPU with AVX-512 the float32 model runs again in a process of its own
with oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA`; `--ctranslate2_isa_caps`), and every ratio and
ceiling is printed over each, so that the peer is taken at its best setting, not at its default.

At batch 1 a greedy step is bound by memory bandwidth: it reads every float32 weight of the
decoder (the encoder-decoder keys/values are projected once per source) and the output
projection's table. The run measures this machine's streaming read bandwidth (a reduction over
1 GiB) and prints the resulting ceiling on greedy tokens/s: no float32 decoder can beat it, cached
or not.

At batch 64 a step is bound by its matrix products. The run counts the FLOPs of translating one
sentence from the model's config (`decode_products`: every matrix product, 2 FLOPs a
multiply-add: the encoder and the encoder-decoder keys/values once per sentence; per hypothesis
and step the decoder's projections, feed-forward networks, attention scores and weighted sums over
the cached and source positions, and the output projection; the first step with one hypothesis
per sentence) and gives every row its GFLOP/s and MFU: the same FLOPs for every row of a search,
ours and CTranslate2's alike, since they compute the same model (the uncached rows compute more
than that). MFU is against the float32 matmul peak measured in the same run: the fastest of 5
rounds of a [2048, 2048] x [2048, 2048] TF matmul (`benchmarking.matmul_peak`, as
bench_train.py). Small-row products do not reach that peak, so the run also times the model's own
weight products at each batch, [batch x beam, k] x [k, n] for a step's (rows = batch x source
length for the encoder's), each shape as the chain of its distinct matrices (one per layer) in
sequence, compiled with XLA and as a TF graph (oneDNN), and prints their GFLOP/s. The ceiling rows
give the target tok/s of greedy and beam 4 if every counted FLOP ran at the square matmul peak,
and if every weight product ran at the best rate measured at its own shape (attention's products
at the peak) with nothing else in the step; then each ceiling over CTranslate2 float32. Neither
is a proof about every kernel there may be; the first is the fastest this machine's best large
float32 matmul allows, and a float32 decoder over CTranslate2 float32 by more than that ratio would
have to run its small products faster than TF runs a 2048^3 one.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

# First: it sets TensorFlow's environment before TensorFlow is imported.
from benchmarking import SHAPES, build_model, interleaved, matmul_peak

import numpy as np
import tensorflow as tf

from t2t_lite import cpu
from t2t_lite.decoding.translator import make_search_fn
from t2t_lite.graph_functions import graph_function
from t2t_lite.hparams import DecodeHParams, get_hparams
from t2t_lite.hparams.model_config import ModelConfig
from t2t_lite.token_ids import EOS_ID

SMOKE = ["--shapes", "tiny", "--batches", "1", "--length", "4", "--repeats", "1", "--rounds", "1",
         "--min_seconds", "0", "--bandwidth_gib", "0.01", "--matmul_size", "256", "--chain_gflop", "0.01",
         "--num_lines", "24"]
UNCACHED = ("greedy, uncached", "greedy, uncached, whole model (T2T)")  # decoder only; T2T's


def mask_eos(logits):
  """EOS made impossible by writing -1e9 into its column of the logits [rows, V] in place, as
  CTranslate2's `min_decoding_length` does: a write of one value a row. Not an added one-hot
  mask (XLA fuses an add into the output projection's matrix-vector product, which then ran
  1.22-1.27x slower at batch 1, `--gemv`), nor a select over every logit (a pass over the
  whole [rows, V], which XLA wrote out twice, once per layout its consumers read: 3.2% of a
  base beam-4 search on the Zen 4): decoding proper does neither, so the benchmark must not."""
  rows = tf.shape(logits)[0]
  column = tf.stack([tf.range(rows), tf.fill([rows], EOS_ID)], axis=1)        # [rows, 2]
  return tf.tensor_scatter_nd_update(logits, column, tf.fill([rows], tf.constant(-1e9, logits.dtype)))


class NoEos:
  """The model with EOS made impossible (`mask_eos`), so every output has its full length."""

  def __init__(self, model):
    self.model, self.vocab_size = model, model.vocab_size

  def encode(self, *args, **kwargs):
    return self.model.encode(*args, **kwargs)

  def init_cache(self, *args):
    return self.model.init_cache(*args)

  def __getattr__(self, name):  # weights, config, ... (what an export reads)
    return getattr(self.model, name)

  def output_projection(self):
    return self.model.output_projection()

  def decode_step(self, ids, step, cache, **kwargs):
    logits, cache = self.model.decode_step(ids, step, cache, **kwargs)
    return mask_eos(logits), cache


def fixed_sources(vocab_size, batch, length):
  """The fixed work's sources: int32 [batch, length] random non-special ids ending in EOS (as the
  decoder's sources: the SavedModel and CTranslate2 append it)."""
  source = np.random.default_rng(0).integers(2, vocab_size, (batch, length))
  source[:, -1] = EOS_ID
  return tf.constant(source, tf.int32)


def fixed_work_search(model, beam, xla=True):
  """The compiled cached search of the fixed work: EOS impossible, so every output is as long as
  its source (extra_length 0)."""
  dh = DecodeHParams(beam_size=beam, extra_length=0, xla=xla)
  return graph_function(make_search_fn(NoEos(model), dh, 1024), jit_compile=xla)


def restore_for_search(model_dir, batch):
  """(model, vocabulary, decode defaults at `batch`, constraint or None) of a trained model
  directory, set up as the decoder sets them up."""
  from t2t_lite import model_dir as model_dir_lib  # pylint: disable=import-outside-toplevel
  _, model, _ = model_dir_lib.restore_model(model_dir)
  vocab = model_dir_lib.load_vocab(model_dir)
  problem = model_dir_lib.find_problem(model_dir_lib.read_record(model_dir)["problem"])
  defaults = model_dir_lib.decode_defaults(problem).replace(batch_size=batch)
  return model, vocab, defaults, model_dir_lib.decode_constraint(model_dir, vocab, defaults)


def length_sorted_chunks(sources, size):
  """Indices of the non-empty `sources`, shortest first, in chunks of `size` (the decoder's
  batching of a file)."""
  order = sorted((i for i, s in enumerate(sources) if s), key=lambda i: len(sources[i]))
  return [order[start:start + size] for start in range(0, len(order), size)]


def uncached_greedy(model, length):
  @tf.function(input_signature=[tf.TensorSpec([None, None, None]), tf.TensorSpec([None, None], tf.bool),
                                tf.TensorSpec([None, None], tf.int32)])
  def next_token(memory, source_mask, prefix):
    x = model._embed(prefix, False)  # pylint: disable=protected-access
    x = model.decoder(x, memory, memory_padding_mask=source_mask, training=False)
    logits = model.embedding(x[:, -1:], reverse=True)[:, 0]
    return tf.argmax(mask_eos(logits), -1, output_type=tf.int32)

  def run(source):
    memory, mask = model.encode(source)
    prefix = tf.zeros((source.shape[0], 1), tf.int32)
    for _ in range(length):
      prefix = tf.concat([prefix, next_token(memory, mask, prefix)[:, None]], 1)
    return prefix.numpy()
  return run


def uncached_whole_model(model, length):
  """T2T's slow decoding (`_slow_greedy_infer`): every step re-runs the whole model, encoder
  included, on the source and the prefix, and takes the last position's logits."""
  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                tf.TensorSpec([None, None], tf.int32)])
  def next_token(source, targets):
    logits = model({"inputs": source, "targets": targets}, training=False)[:, -1]
    return tf.argmax(mask_eos(logits), -1, output_type=tf.int32)

  def run(source):
    decoded = tf.zeros((source.shape[0], 0), tf.int32)
    for _ in range(length):
      # The model shifts targets right, so position t sees decoded[:t]; the last slot is a dummy.
      targets = tf.concat([decoded, tf.zeros((source.shape[0], 1), tf.int32)], 1)
      decoded = tf.concat([decoded, next_token(source, targets)[:, None]], 1)
    return tf.pad(decoded, [[0, 0], [1, 0]]).numpy()
  return run


TOKENS = ("<s>", "</s>", "<unk>")  # ids 0, 1, 2 of the benchmark's CTranslate2 vocabulary


def ctranslate2_twin(model, directory, quantization="float32"):
  """Writes `model` with t2t-lite-exporter's converter (`t2t_lite.export.ctranslate2`) as a
  CTranslate2 model directory; returns its path. Token `t<i>` is our id i; id 0 (`<s>`) is the
  decoder start (T2T starts from PAD), id 1 (`</s>`) the EOS that CTranslate2 appends to sources."""
  from t2t_lite.export import ctranslate2 as exporter  # pylint: disable=import-outside-toplevel
  tokens = list(TOKENS) + [f"t{i}" for i in range(3, model.vocab_size)]
  exporter.check_convertible(model, DecodeHParams())
  exporter.converter(model, tokens).convert(directory, quantization=quantization, force=True)
  return directory


# A user's process: tensorflow (and tensorflow_text, if installed) only; t2t_lite cannot be
# imported. It loads a SavedModel, then on each line of stdin translates the lines of a file in
# batches, in file order, and answers with the seconds and the translations. (The client does not
# sort: the exported graph sorts each request and searches it in sub-batches of `sub_batch_size`,
# or decodes it through slots refilled as sentences finish, decode hparam `refill_slots`, as a TF
# Serving user's requests would be.)
SERVE_WORKER = """
import json, sys, time
sys.modules["t2t_lite"] = None
import tensorflow as tf
try:
  import tensorflow_text  # noqa: F401  (SentencePiece ops; a symbol vocabulary needs none)
except ImportError:
  pass
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
with open(sys.argv[2], encoding="utf-8") as f:
  lines = [line.rstrip("\\n") for line in f]
batch = int(sys.argv[3])
print(json.dumps({"ready": True}), flush=True)
for _ in sys.stdin:
  start, out = time.perf_counter(), []
  for i in range(0, len(lines), batch):
    out += [t.decode("utf-8") for t in serve(text=tf.constant(lines[i:i + batch]))["translations"].numpy()]
  print(json.dumps({"seconds": time.perf_counter() - start, "translations": out}), flush=True)
"""


def clean_environment():
  """What a user's shell gives a process: no TF_* settings, no PYTHONPATH."""
  return {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}


class WorkerProcess:
  """A Python worker (`code` run with `args`, `env` its whole environment) that prints one JSON
  line when ready and one per request line it reads: `request(line)` sends one and returns the
  answer. `startup_seconds`: from the start of the process to ready."""

  def __init__(self, code, args, env):
    start = time.perf_counter()
    self.process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    self._read()
    self.startup_seconds = time.perf_counter() - start

  def _read(self):
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f"the {type(self).__name__} worker ended (status {self.process.wait()})")
    return json.loads(line)

  def request(self, line):
    self.process.stdin.write(line + "\n")
    self.process.stdin.flush()
    return self._read()

  def close(self):
    self.process.stdin.close()
    self.process.wait(timeout=60)


class SavedModelProcess(WorkerProcess):
  """The SavedModel in a default process (`SERVE_WORKER`, clean environment); calling it
  translates `lines_file` once and returns the translations."""

  def __init__(self, export_path, lines_file, batch):
    super().__init__(SERVE_WORKER, (export_path, lines_file, batch), clean_environment())

  def __call__(self, _=None):
    return self.request("run")["translations"]


def saved_model_of(model, directory, beam, length):
  """`model` (EOS masked) as a text-in/text-out SavedModel whose text is space-separated ids."""
  from t2t_lite.data.vocab import SymbolTokenizer  # pylint: disable=import-outside-toplevel
  from t2t_lite.export.saved_model import TranslationModule  # pylint: disable=import-outside-toplevel
  # sub_batch_size=0, refill_slots=0: the whole batch in one search, as the other rows run it
  # (every source and output has the same length here, so sorting or refilling would gain nothing).
  module = TranslationModule(NoEos(model), SymbolTokenizer(model.vocab_size),
                             DecodeHParams(beam_size=beam, extra_length=0, max_input_size=length,
                                           sub_batch_size=0, refill_slots=0))
  tf.saved_model.save(module, directory, signatures={"serving_default": module.serve})
  return directory


def saved_model_run(model, source, workdir, beam):
  """The SavedModel of `model` in a default process on `source` (each row ends with EOS, which
  the SavedModel appends itself). Returns (name, fn, process)."""
  tag = f"{model.config.hidden_size}_{model.config.num_decoder_layers}_{source.shape[0]}_{beam}"
  path = saved_model_of(model, os.path.join(workdir, f"saved_model_{tag}"), beam, source.shape[1])
  lines_file = os.path.join(workdir, f"sources_{tag}.txt")
  with open(lines_file, "w", encoding="utf-8") as f:
    f.writelines(" ".join(map(str, row[:-1])) + "\n" for row in source.numpy())
  process = SavedModelProcess(path, lines_file, source.shape[0])
  name = f"{search_name(beam)}, SavedModel in a default process"
  return name, process, process


def read_bandwidth(gib=1.0, rounds=5):
  """Bytes/s of the fastest of `rounds` reductions over a `gib` GiB float32 tensor."""
  x = tf.random.uniform((int(gib * 2 ** 28),))
  total = tf.function(lambda: tf.reduce_sum(x))
  timing = interleaved({"sum": lambda _: total().numpy()}, rounds)["sum"]
  return int(gib * 2 ** 28) * 4 / timing.seconds


def _is_kv_kernel(variable):
  """The encoder-decoder key/value kernel (not the self-attention's `qkv_kernel`)."""
  return variable.path.rsplit("/", 1)[-1] == "kv_kernel"


def weight_bytes_per_step(model):
  """Float32 bytes a greedy step at batch 1 must read: the decoder's weights, except the
  encoder-decoder key/value kernels (used once per source), and the output projection's table."""
  decoder = sum(int(np.prod(v.shape)) for v in model.decoder.weights if not _is_kv_kernel(v))
  return 4 * (decoder + int(np.prod(model.embedding.embeddings.shape)))


class Product(NamedTuple):
  """`count` matrix products [rows, k] x [k, n] made in translating one sentence, 2 x rows x k x n
  FLOPs each (a multiply-add is two). `rows` are the source positions for a sentence's products
  (encoder, encoder-decoder keys/values) and 1 for a hypothesis' step; batched, the rows of a
  product are batch x rows, or batch x beam for a step's (`per_hypothesis`). `weights`: how many
  distinct weight matrices the products multiply by (one per layer; 0 for attention's products of
  activations, scores and weighted sums)."""
  name: str
  rows: int
  k: int
  n: int
  count: int
  weights: int
  per_hypothesis: bool

  @property
  def flops(self):
    return 2 * self.rows * self.k * self.n * self.count


def decode_products(config, vocab_size, source_length, steps, beam=1):
  """Every matrix product of translating one sentence of `source_length` tokens in `steps`
  decoding steps with `beam` hypotheses, for a Transformer of `config` (a ModelConfig): the
  encoder, the encoder-decoder keys/values (projected once per source), and per hypothesis and
  step the decoder's self-attention q/k/v and output, encoder-decoder queries and output,
  feed-forward network, the output projection, and attention's scores and weighted sums over the
  source positions and the t + 1 cached positions of step t. The first step runs one hypothesis
  per sentence (its beams are all the same; CTranslate2 expands after it; t2t_lite's search
  computes all `beam` there: at beam 4 and 30 steps 120 hypothesis-steps, 117 counted). Not
  counted: what is no matrix product (softmax, layer norm, top-k, the cache's copies), and the
  positions past step t that a padded cache also attends over, with zero weight.
  """
  d, ff, heads = config.hidden_size, config.filter_size, config.num_heads
  kc = config.attention_key_channels or d
  vc = config.attention_value_channels or d
  s, enc, dec = source_length, config.num_encoder_layers, config.num_decoder_layers
  hyps = [1] + [beam] * (steps - 1)                   # hypotheses at each step
  h = sum(hyps)                                       # hypothesis-steps
  positions = sum(n * (t + 1) for t, n in enumerate(hyps))  # cached positions attended, summed
  return [
      Product("encoder self-attention q/k/v", s, d, 2 * kc + vc, enc, enc, False),
      Product("encoder self-attention scores", s, kc // heads, s, enc * heads, 0, False),
      Product("encoder self-attention weighted sums", s, s, vc // heads, enc * heads, 0, False),
      Product("encoder self-attention output", s, vc, d, enc, enc, False),
      Product("encoder feed-forward in", s, d, ff, enc, enc, False),
      Product("encoder feed-forward out", s, ff, d, enc, enc, False),
      Product("encoder-decoder keys/values", s, d, kc + vc, dec, dec, False),
      Product("decoder self-attention q/k/v", 1, d, 2 * kc + vc, dec * h, dec, True),
      # One product per cached position attended: [1, d_k] x [d_k, 1] and [1, 1] x [1, d_v].
      Product("decoder self-attention scores", 1, kc // heads, 1, dec * heads * positions, 0, True),
      Product("decoder self-attention weighted sums", 1, 1, vc // heads, dec * heads * positions, 0,
              True),
      Product("decoder self-attention output", 1, vc, d, dec * h, dec, True),
      Product("encoder-decoder queries", 1, d, kc, dec * h, dec, True),
      Product("encoder-decoder scores", 1, kc // heads, s, dec * heads * h, 0, True),
      Product("encoder-decoder weighted sums", 1, s, vc // heads, dec * heads * h, 0, True),
      Product("encoder-decoder output", 1, vc, d, dec * h, dec, True),
      Product("decoder feed-forward in", 1, d, ff, dec * h, dec, True),
      Product("decoder feed-forward out", 1, ff, d, dec * h, dec, True),
      Product("output projection", 1, d, vocab_size, h, 1, True),
  ]


def decode_flops(config, vocab_size, source_length, steps, beam=1):
  """FLOPs of translating one sentence: the sum of `decode_products`."""
  return sum(p.flops for p in decode_products(config, vocab_size, source_length, steps, beam))


def batched_shape(product, batch, beam):
  """(rows, k, n) of `product` made for `batch` sentences at once: a sentence's products have
  batch x rows rows, a step's batch x beam."""
  return (batch * (beam if product.per_hypothesis else product.rows), product.k, product.n)


def product_shapes(products_by_beam, batch):
  """{(rows, k, n): (distinct weight matrices, names)} of the weight products of
  {beam: `decode_products`} at `batch` sentences, each shape once."""
  shapes = {}
  for beam, products in products_by_beam.items():
    for p in products:
      if p.weights:
        name = f"{search_name(beam)}: {p.name}" if p.per_hypothesis else p.name
        weights, names = shapes.get(batched_shape(p, batch, beam), (0, ()))
        if name not in names:
          shapes[batched_shape(p, batch, beam)] = (weights + p.weights, names + (name,))
  return shapes


def search_name(beam):
  return "greedy" if beam == 1 else f"beam {beam}"


def chained_products(rows, k, n, weights, xla, repeats):
  """A zero-argument function: a [rows, k] matrix times `weights` distinct random [k, n]
  matrices in sequence, each product waiting for the one before (as a decoding step's do: its
  input gets the previous product's mean, times 1e-30), the chain `repeats` times in a loop
  inside the program (so that a call's own cost does not count), compiled with XLA or as a TF
  graph."""
  x = tf.random.normal((rows, k))
  matrices = [tf.random.normal((k, n)) * k ** -0.5 for _ in range(weights)]

  def chain(i, h, total):
    for w in matrices:
      mean = tf.reduce_mean(tf.matmul(h, w))
      h, total = h + mean * 1e-30, total + mean
    return i + 1, h, total

  @tf.function(jit_compile=xla)
  def run():
    return tf.while_loop(lambda i, h, total: i < repeats, chain, (tf.constant(0), x, tf.constant(0.0)))[2]
  return lambda _: run().numpy()


def gflops(rate):
  """FLOP/s as GFLOP/s for a table: one decimal, more below 0.1 (the smoke run's tiny products,
  timed once on a loaded machine, can be that slow, and must not read 0.0)."""
  return f"{rate / 1e9:.1f}" if rate >= 1e8 else f"{rate / 1e9:.4f}"


def product_rates(shapes, rounds, min_seconds, flops_per_call=2e9):
  """{(rows, k, n): {"XLA": FLOP/s, "TF graph": FLOP/s}}: each shape's chain of products
  (`chained_products`, repeated to about `flops_per_call`) with XLA and as a TF graph (oneDNN),
  fastest of `rounds` interleaved rounds."""
  repeats = {(rows, k, n): max(1, round(flops_per_call / (2 * rows * k * n * weights)))
             for (rows, k, n), (weights, _) in shapes.items()}
  fns = {(shape, kind): chained_products(*shape, shapes[shape][0], kind == "XLA", repeats[shape])
         for shape in shapes for kind in ("XLA", "TF graph")}
  timings = interleaved(fns, rounds, min_seconds=min_seconds)
  rates = {}
  for (shape, kind), timing in timings.items():
    rows, k, n = shape
    flops = 2 * rows * k * n * shapes[shape][0] * repeats[shape]
    rates.setdefault(shape, {})[kind] = flops / timing.seconds
  return rates


def ceiling_seconds(products, batch, beam, rates, peak):
  """Seconds to translate `batch` sentences if every weight product ran at the best rate
  measured at its batched shape (`product_rates`, XLA or TF graph) and attention's products at the
  matmul peak, and nothing else ran: no float32 decoder built on these kernels can be faster."""
  return sum(batch * p.flops / (max(rates[batched_shape(p, batch, beam)].values()) if p.weights
                                else peak) for p in products)


def ct2_float32_name(isa=None):
  """The row name of CTranslate2 float32 as it starts, or with its oneDNN capped at `isa`."""
  return "CTranslate2 float32" + (f", oneDNN at most {isa}" if isa else "")


def onednn_environment(isa=None):
  """This process's environment, with oneDNN capped at `isa` (ONEDNN_MAX_CPU_ISA) when given."""
  return {**os.environ, **({"ONEDNN_MAX_CPU_ISA": isa} if isa else {})}


def ctranslate2_runs(model, source, workdir, threads, length, isa_caps=()):
  """CTranslate2 greedy and beam 4 on the exporter's float32 and int8 models of the same weights
  and sources (each source ends with EOS, which CTranslate2 appends itself), in this process;
  and for each oneDNN ISA in `isa_caps` (e.g. "AVX2"), the float32 model again in a process of
  its own whose oneDNN is capped at that ISA (`CTranslate2Process`). Returns (runs, processes)."""
  import ctranslate2  # pylint: disable=import-outside-toplevel
  tokens = [[f"t{i}" for i in row[:-1]] for row in source.numpy()]
  runs, processes = {}, []
  for quantization in ("float32", "int8"):
    path = ctranslate2_twin(model, os.path.join(
        workdir, f"ct2_{model.config.hidden_size}_{model.config.num_decoder_layers}_{quantization}"),
        quantization)
    translator = ctranslate2.Translator(path, device="cpu", compute_type=quantization,
                                        inter_threads=1, intra_threads=threads)
    for beam in (1, 4):
      name = f"CTranslate2 {quantization}, {search_name(beam)}"
      runs[name] = lambda _, t=translator, b=beam: [r.hypotheses[0] for r in t.translate_batch(
          tokens, beam_size=b, length_penalty=0.6, min_decoding_length=length,
          max_decoding_length=length)]
    if quantization == "float32":
      for isa in isa_caps:
        process = CTranslate2Process(path, tokens, threads, length, isa)
        processes.append(process)
        for beam in (1, 4):
          runs[f"{ct2_float32_name(isa)}, {search_name(beam)}"] = (
              lambda _, p=process, b=beam: p(b))
  return runs, processes


# CTranslate2 in a process of its own: float32, its oneDNN capped at an instruction set by
# ONEDNN_MAX_CPU_ISA, which oneDNN reads once, when it first runs (so not in this process, whose
# CTranslate2 has run). On each line of stdin (a beam size) it translates the tokens it was given
# (JSON, its last argument) and answers with the seconds and the best hypotheses.
CT2_WORKER = """
import json, sys, time
import ctranslate2
path, threads, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokens = json.loads(sys.argv[4])
translator = ctranslate2.Translator(path, device="cpu", compute_type="float32", inter_threads=1,
                                    intra_threads=threads)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
  start = time.perf_counter()
  results = translator.translate_batch(tokens, beam_size=int(line), length_penalty=0.6,
                                       min_decoding_length=length, max_decoding_length=length)
  print(json.dumps({"seconds": time.perf_counter() - start,
                    "hypotheses": [r.hypotheses[0] for r in results]}), flush=True)
"""


class CTranslate2Process(WorkerProcess):
  """`CT2_WORKER` on the float32 model at `path`, with this process's environment and
  ONEDNN_MAX_CPU_ISA=`isa`; calling it with a beam size translates `tokens` and returns the best
  hypotheses. oneDNN picks its kernels by the CPU's instruction sets, and the fastest set is not
  always the widest: on the AMD Zen 4 (AVX-512 on 256-bit units) the oneDNN that CTranslate2
  bundles ran base's float32 greedy search about 1.5x as fast capped at AVX2 (see
  docs/performance.md), so a fair peer is CTranslate2 at its best cap, not at its default."""

  def __init__(self, path, tokens, threads, length, isa):
    super().__init__(CT2_WORKER, (path, threads, length, json.dumps(tokens)),
                     onednn_environment(isa))

  def __call__(self, beam):
    return self.request(str(beam))["hypotheses"]


# CTranslate2 and SentencePiece only, as docs/ctranslate2.md translates with an exported model
# folder: on each line of stdin, the lines of a file in batches, in file order (an empty line
# gives an empty translation without decoding); answers with the seconds and the translations.
CT2_LINES_WORKER = """
import json, os, sys, time
import ctranslate2, sentencepiece
folder, lines_file, batch, compute_type = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(os.path.join(folder, "t2t_lite_decode.json"), encoding="utf-8") as f:
  record = json.load(f)
options, extra = record["translate_batch"], record["decode_hparams"]["extra_length"]
source = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "source.spm"))
target = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "target.spm"))
translator = ctranslate2.Translator(folder, device="cpu", compute_type=compute_type,
                                    intra_threads=len(os.sched_getaffinity(0)))
with open(lines_file, encoding="utf-8") as f:
  lines = [line.rstrip("\\n") for line in f]
print(json.dumps({"ready": True}), flush=True)
for _ in sys.stdin:
  start, out = time.perf_counter(), []
  for i in range(0, len(lines), batch):
    pieces = source.encode(lines[i:i + batch], out_type=str)
    longest = max(len(p) for p in pieces) + 1
    results = translator.translate_batch(pieces, max_decoding_length=longest + extra, **options)
    out += [target.decode_pieces(r.hypotheses[0]) if line.strip() else ""
            for r, line in zip(results, lines[i:i + batch])]
  print(json.dumps({"seconds": time.perf_counter() - start, "translations": out}), flush=True)
"""


class CTranslate2LinesProcess(WorkerProcess):
  """`CT2_LINES_WORKER` on an exported CTranslate2 folder, with this process's environment and,
  given `isa`, oneDNN capped at it (as `CTranslate2Process`); calling it translates `lines_file`
  once and returns the translations."""

  def __init__(self, folder, lines_file, batch, compute_type, isa=None):
    super().__init__(CT2_LINES_WORKER, (folder, lines_file, batch, compute_type),
                     onednn_environment(isa))

  def __call__(self, _=None):
    return self.request("run")["translations"]


# The values oneDNN's ONEDNN_MAX_CPU_ISA accepts on x86 (its documentation's list).
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
               "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16",
               "AVX10_1_512_AMX", "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16",
               "AVX512_CORE_AMX_FP16", "DEFAULT", "ALL")


def ctranslate2_isa_caps(setting):
  """The oneDNN caps `--ctranslate2_isa_caps` names: "auto" is AVX2 on a CPU with AVX-512 (where
  oneDNN would otherwise pick its AVX-512 kernels) and none elsewhere; "" none."""
  if setting != "auto":
    return tuple(isa for isa in setting.split(",") if isa)
  return ("AVX2",) if "avx512f" in (cpu.flags(cpu.read()) or ()) else ()


def same_greedy_tokens(our_ids, ct2_hypotheses):
  """How many sentences got exactly the same greedy tokens from both engines (CTranslate2's best
  hypothesis of each sentence, a list of tokens)."""
  special = {"<s>": 0, "</s>": 1, "<unk>": 2}
  theirs = [[special.get(t) if t in special else int(t[1:]) for t in hypothesis]
            for hypothesis in ct2_hypotheses]
  return sum(list(map(int, a)) == b for a, b in zip(our_ids[:, 0], theirs))


def bench_top_k(batch=64, beam=4, repeats=50):
  """The beam search's candidate ranking alone, on random logits [batch, beam, vocab] and beam
  log-probabilities, k = 2 x beam, each compiled with XLA as in the search: log_softmax, the sum
  and XLA's top_k over the materialised [batch, beam x vocab] scores, against `top_candidates`."""
  from t2t_lite.decoding.beam_search import top_candidates  # pylint: disable=import-outside-toplevel

  def materialised(logits, alive, k):
    scores = tf.nn.log_softmax(logits) + alive[..., None]
    return tf.math.top_k(tf.reshape(scores, (batch, -1)), k)

  print("| logits | k | log_softmax + XLA top_k ms | top_candidates ms | speed-up "
        "| same values and indices |")
  print("|---|---|---|---|---|---|")
  for vocab in (8000, 32000):
    rng = np.random.default_rng(vocab)
    logits = tf.constant(rng.normal(size=(batch, beam, vocab)) * 3, tf.float32)
    alive = tf.constant(rng.normal(size=(batch, beam)) * 5, tf.float32)
    fns = {fn: compiled_candidates(fn, logits, alive, 2 * beam) for fn in (materialised, top_candidates)}
    # One round each, as the figures in the README were taken.
    timings = interleaved(fns, rounds=1, min_calls=repeats, min_seconds=1.0)
    times = [timings[fn].seconds * 1000 for fn in fns]
    same = all(np.array_equal(a, b) for a, b in zip(*(timings[fn].result for fn in fns)))
    print(f"| [{batch}, {beam}, {vocab}] | {2 * beam} | {times[0]:.2f} | {times[1]:.2f} | "
          f"{times[0] / times[1]:.1f}x | {same} |", flush=True)


def compiled_candidates(fn, logits, alive, k):
  """`fn(i)`: `fn(logits, alive, k)` compiled with XLA, as numpy arrays."""
  compiled = tf.function(lambda: fn(logits, alive, k), jit_compile=True)
  return lambda _: [t.numpy() for t in compiled()]


def bench_gemv(repeats=30):
  """Where base's batch-1 greedy step goes: its matrix-vector products alone, compiled with XLA.

  The decoder's per-step kernels (self-attention qkv and output, encoder-decoder query and
  output, the two feed-forward kernels; the encoder-decoder key/value kernel is used once per
  source) multiplied in sequence, one [1, d] row through each as in a step, then the output
  projection [1, d] x [d, 32000] alone; each as GB/s of weights read, beside the streaming read
  bandwidth. XLA's CPU backend runs a matrix-vector product as its own single-threaded loop, so
  the small kernels (1-4 MB each) stream at about one core's bandwidth. A peer kernel on the
  same weights: numpy's BLAS (OpenBLAS's sgemv, multi-threaded), the same chain.

  Then the cost of an add right after a product, which XLA fuses into it (an "output fusion",
  run by a slower loop than the plain product): the six feed-forward networks with the biases
  added the usual way against `FeedForward` at one row (the bias moved past the product), and the
  output projection with a one-hot add against the plain product. Outputs are checked equal.
  """
  model = build_model("base")
  d = model.config.hidden_size
  kernels = [v for v in model.decoder.weights if len(v.shape) == 2 and not _is_kv_kernel(v)]
  table = tf.transpose(model.embedding.embeddings)                      # [d, V], as in the search
  row = tf.random.normal((1, d))

  # What each kernel's product feeds, in step order.
  roles = ["residual" if k.shape[-1] == d          # output projections, second feed-forward kernel
           else "relu" if k.shape[0] == d and "feed_forward" in k.path  # first feed-forward kernel
           else "cache" for k in kernels]          # qkv: its keys and values go to the cache

  def step_chain(row, weights, relu, total):
    """One row through the step's kernels in sequence, on TF tensors or numpy arrays alike."""
    h = residual = row
    live = 0.0
    for kernel, role in zip(weights, roles):
      y = h @ kernel
      if role == "residual":
        residual = residual + y
        h = residual
      elif role == "relu":
        h = relu(y)
      else:
        live += total(y)
    return total(h[..., :1]) + live

  decoder_kernels = tf.function(lambda: step_chain(row, kernels, tf.nn.relu, tf.reduce_sum),
                                jit_compile=True)
  output = tf.function(lambda: tf.matmul(row, table)[0, 0], jit_compile=True)
  # The same chain on numpy's BLAS (OpenBLAS: sgemv on a 1-D row, all cores).
  np_kernels, np_table, np_row = [k.numpy() for k in kernels], table.numpy(), row.numpy()[0]
  numpy_decoder_kernels = lambda: step_chain(  # noqa: E731
      np_row, np_kernels, lambda y: np.maximum(y, 0), np.sum)

  feed_forwards = [layer.feed_forward for layer in model.decoder.layers]
  for ffn in feed_forwards:  # non-zero biases, so that adding them is real work
    ffn.bias_1.assign(tf.random.normal(ffn.bias_1.shape))
    ffn.bias_2.assign(tf.random.normal(ffn.bias_2.shape))

  def ffn_chain(layer_call):
    def chain():
      h = row
      for ffn in feed_forwards:
        h = tf.math.l2_normalize(h + layer_call(ffn, h), -1) * d ** 0.5
      return h
    return tf.function(chain, jit_compile=True)

  ffn_fused = ffn_chain(lambda f, h: tf.nn.relu(h @ f.kernel_1 + f.bias_1) @ f.kernel_2 + f.bias_2)
  ffn_layer = ffn_chain(lambda f, h: f(h, training=False))
  eos_mask = tf.one_hot(EOS_ID, table.shape[1]) * -1e9
  output_add = tf.function(lambda: tf.reduce_max(tf.matmul(row, table) + eos_mask), jit_compile=True)
  output_plain = tf.function(lambda: tf.reduce_max(tf.matmul(row, table)), jit_compile=True)
  ffn_bytes = 4 * sum(int(np.prod(f.kernel_1.shape)) + int(np.prod(f.kernel_2.shape))
                      for f in feed_forwards)
  table_bytes = 4 * int(np.prod(table.shape))
  kernel_bytes = 4 * sum(int(np.prod(k.shape)) for k in kernels)
  runs = {"decoder kernels of one step, in sequence": (decoder_kernels, kernel_bytes),
          "output projection [1, 512] x [512, 32000]": (output, table_bytes),
          "decoder kernels of one step, in sequence, numpy (OpenBLAS)": (numpy_decoder_kernels,
                                                                         kernel_bytes),
          "output projection, numpy (OpenBLAS)": (lambda: (np_row @ np_table)[0], table_bytes),
          "6 feed-forward networks, relu(x W1 + b1) W2 + b2": (ffn_fused, ffn_bytes),
          "6 feed-forward networks, FeedForward at one row": (ffn_layer, ffn_bytes),
          "output projection, then + one-hot (fused), max": (output_add, table_bytes),
          "output projection, then max": (output_plain, table_bytes)}
  np.testing.assert_allclose(ffn_fused().numpy(), ffn_layer().numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(decoder_kernels().numpy(), numpy_decoder_kernels(), rtol=1e-4)
  bandwidth = read_bandwidth()
  print(f"streaming read bandwidth (reduce_sum over 1 GiB): {bandwidth / 1e9:.1f} GB/s")
  print("| base, batch 1 (XLA unless named) | MB | ms | GB/s |")
  print("|---|---|---|---|")
  timings = interleaved({name: lambda _, f=fn: np.asarray(f()) for name, (fn, _) in runs.items()},
                        min_calls=repeats, min_seconds=1.0)
  for name, (seconds, _, _) in timings.items():
    size = runs[name][1]
    print(f"| {name} | {size / 1e6:.0f} | {seconds * 1000:.2f} | {size / seconds / 1e9:.1f} |",
          flush=True)
  for slow, fast in ((4, 5), (6, 7)):
    slow, fast = list(runs)[slow], list(runs)[fast]
    print(f"{fast}: {timings[slow].seconds / timings[fast].seconds:.2f}x the speed of {slow}",
          flush=True)


class StepCounter:
  """The model with a counter of its `decode_step` calls: every search calls it once per step
  (for all the sentences of a batch at once), so `steps` read after a batch is the steps it ran."""

  def __init__(self, model):
    self.model = model
    self.steps = tf.Variable(0, dtype=tf.int64, trainable=False)

  def decode_step(self, *args, **kwargs):
    logits, cache = self.model.decode_step(*args, **kwargs)
    with tf.control_dependencies([self.steps.assign_add(1)]):
      return tf.identity(logits), cache

  def __getattr__(self, name):  # encode, init_cache, config, vocab_size, ...
    return getattr(self.model, name)


def cache_phase_runs(args, lines):
  """The decoder's in-process search (`Translator`, the problem's decode defaults, batches of
  --batch sentences sorted by length and padded to the width buckets) with the self-attention
  cache grown in phases (`cache_phases=true`, the default) and with one cache for the longest
  output (`cache_phases=false`), each stopping a sentence once its best beam is final (as the
  decoder), and in phases stopping once its whole n-best list is (`best_only=False`, as the
  SavedModel's `nbest`), timed in the same interleaved rounds (--rounds), each batch's best
  time kept; untimed passes count each batch's steps (`StepCounter`) under either stop. Prints
  the outputs compared, per batch shape the first call's excess over the best (its
  compilation, roughly), and per width bucket the steps run and the ms per step of each.

  Returns ({row name: (seconds, outputs)} for the main table, the one-phase search's outputs).
  """
  from t2t_lite.data.vocab import strip_ids  # pylint: disable=import-outside-toplevel
  from t2t_lite.decoding.translator import Translator, encode_sources  # pylint: disable=import-outside-toplevel
  model, vocab, defaults, constraint = restore_for_search(args.model_dir, args.batch)
  quiet = lambda _: None  # noqa: E731  (long lines are truncated as the decoder does)
  # (cache phases, best_only): what the decoder runs; one cache; the stop of the n-best list.
  names = {(True, True): "t2t_lite search, cache in phases",
           (False, True): "t2t_lite search, one cache phase",
           (True, False): "t2t_lite search, cache in phases, stopping when the n-best list is final"}
  translators = {phases: Translator(model, vocab, defaults.replace(cache_phases=phases), warn=quiet,
                                    constraint=constraint) for phases in (True, False)}
  counter = StepCounter(model)
  counting = Translator(counter, vocab, defaults, warn=quiet, constraint=constraint)
  sources = encode_sources(vocab, lines, counting.limit, warn=quiet)
  chunks = length_sorted_chunks(sources, counting.batch_sizes[-1])
  shapes = [counting.batch_shape(len(c), max(len(sources[i]) for i in c)) for c in chunks]

  def translate(key):
    """(outputs, seconds of each batch), the batches as `Translator.translate_ids` makes them."""
    (phases, best_only), outputs, seconds = key, [""] * len(lines), []
    for chunk in chunks:
      start = time.perf_counter()
      beams = translators[phases].translate_ids([sources[i] for i in chunk], best_only=best_only)
      seconds.append(time.perf_counter() - start)
      for i, line_beams in zip(chunk, beams):
        outputs[i] = vocab.decode(line_beams[0][0])
    return outputs, seconds

  first = {key: translate(key)[1] for key in names}  # compiles every shape once
  best = {key: list(first[key]) for key in names}

  def timed(key):
    outputs, seconds = translate(key)
    best[key] = [min(a, b) for a, b in zip(best[key], seconds)]
    return outputs
  timings = interleaved({key: lambda _, k=key: timed(k) for key in names}, args.rounds, warm_up=0)
  phases, one_phase, nbest = names
  # Steps run, as the decoder runs them (the best beam wanted) and for the whole n-best list.
  steps, nbest_steps, longest = [], [], []
  for chunk in chunks:
    for counted, best_only in ((steps, True), (nbest_steps, False)):
      counter.steps.assign(0)
      beams = counting.translate_ids([sources[i] for i in chunk], best_only=best_only)
      counted.append(int(counter.steps.numpy()))
    longest.append(max(len(strip_ids(line_beams[0][0])) + 1 for line_beams in beams))
  same = sum(a == b for a, b in zip(timings[phases].result, timings[one_phase].result))
  print(f"cache in phases: outputs identical to one cache phase's: {same}/{len(lines)} lines")
  same = sum(a == b for a, b in zip(timings[phases].result, timings[nbest].result))
  print(f"stopping at the best beam: outputs identical to stopping at the n-best list: "
        f"{same}/{len(lines)} lines")
  print("| batch shape | first call - best call, s (compiling, roughly): cache in phases | "
        "one cache phase |")
  print("|---|---|---|")
  for shape in dict.fromkeys(shapes):
    n = shapes.index(shape)
    print(f"| {shape[0]} x {shape[1]} | {first[phases][n] - best[phases][n]:.1f} | "
          f"{first[one_phase][n] - best[one_phase][n]:.1f} |", flush=True)
  print("| width bucket | batches | steps run (fewest-most a batch) | longest output (EOS included) "
        "| ms/step, cache in phases | ms/step, one cache phase | one phase / phases "
        "| steps run for the n-best list | ms/step, n-best list |")
  print("|---|---|---|---|---|---|---|---|---|")
  for width in sorted({w for _, w in shapes}):
    numbers = [n for n, (_, w) in enumerate(shapes) if w == width]
    total, nbest_total = (sum(counted[n] for n in numbers) for counted in (steps, nbest_steps))
    ms = {key: 1000 * sum(best[key][n] for n in numbers) / max(total if key[1] else nbest_total, 1)
          for key in names}
    print(f"| {width} | {len(numbers)} | {total} ({min(steps[n] for n in numbers)}-"
          f"{max(steps[n] for n in numbers)}) | {max(longest[n] for n in numbers)} | "
          f"{ms[phases]:.1f} | {ms[one_phase]:.1f} | {ms[one_phase] / ms[phases]:.2f}x | "
          f"{nbest_total} | {ms[nbest]:.1f} |", flush=True)
  rows = {f"{names[key]} (in process, best round, batches of {args.batch})": (timings[key].seconds,
                                                                               timings[key].result)
          for key in names}
  return rows, timings[one_phase].result


def bench_model_dir(args):
  """A trained model directory on real lines: t2t-lite-decoder (the whole command, start-up included;
  twice on a fresh XLA cache folder, WORKDIR/xla_cache: cold, then warm), its SavedModel in a
  default process (load, then translating the lines in file-order requests of --batch, best of
  --rounds; the graph sorts each request and searches it in sub-batches of its `sub_batch_size`,
  or through its `refill_slots` slots refilled as sentences finish; the problem's decode defaults
  with --saved_model_decode_hparams), and the exporter's CTranslate2 float32 and int8 models
  (ctranslate2 + sentencepiece only, the recorded beam and length penalty; each setting a process
  of its own, float32 also with oneDNN capped as --ctranslate2_isa_caps says), and the in-process
  search with and without cache phases (`cache_phase_runs`); outputs compared with the decoder's
  (with --cache_phases_only, the phases alone, compared with the one-phase search's; with
  --no_in_process, the in-process rows skipped), and sacreBLEU against --references when given."""
  from t2t_lite.export import ctranslate2 as ct2_export  # pylint: disable=import-outside-toplevel
  from t2t_lite import model_dir as model_dirs  # pylint: disable=import-outside-toplevel
  from t2t_lite.export import saved_model  # pylint: disable=import-outside-toplevel
  os.makedirs(args.workdir, exist_ok=True)
  lines = read_lines(args.lines, args.num_lines)
  lines_file = os.path.join(args.workdir, "lines.txt")
  with open(lines_file, "w", encoding="utf-8") as f:
    f.writelines(line + "\n" for line in lines)
  print(cpu.describe())
  print(f"{args.model_dir}: {len(lines)} lines of {args.lines}; the problem's decode defaults")
  phase_rows, one_phase_outputs = ({}, None) if args.no_in_process else cache_phase_runs(args, lines)
  if args.cache_phases_only:
    print_model_dir_rows(args, lines, phase_rows, one_phase_outputs, "the one-phase search's")
    return
  # The decoder twice on a fresh XLA cache folder (not the model's own): it compiles its programs
  # (cold), then loads them (warm, what a second run on the same model does).
  xla_cache_dir = os.path.join(args.workdir, "xla_cache")
  shutil.rmtree(xla_cache_dir, ignore_errors=True)
  decoder_rows = {}
  for state in ("cold", "warm"):
    decoded = os.path.join(args.workdir, f"decoder_{state}.txt")
    command = os.path.join(os.path.dirname(sys.executable), "t2t-lite-decoder")
    start = time.perf_counter()
    subprocess.run([command, f"--output_dir={args.model_dir}", f"--decode_from_file={lines_file}",
                    f"--decode_to_file={decoded}", f"--xla_cache_dir={xla_cache_dir}"], check=True,
                   env=clean_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with open(decoded, encoding="utf-8") as f:
      outputs = [line.rstrip("\n") for line in f]
    decoder_rows[f"t2t-lite-decoder (whole command, start-up included, {state} XLA cache)"] = (
        seconds, outputs)
  reference_outputs = decoder_rows["t2t-lite-decoder (whole command, start-up included, cold XLA cache)"][1]
  print(f"t2t-lite-decoder outputs: {words_per_line(reference_outputs):.1f} words a line"
        + (f"; references {words_per_line(read_lines(args.references, len(lines))):.1f}"
           if args.references else ""), flush=True)
  # The problem's decode defaults, as t2t-lite-exporter writes them, with the given overrides;
  # with --compare_saved_model_decode_hparams a second export, its rounds interleaved with the
  # first's, so that the two compare within one run.
  variants = {"": args.saved_model_decode_hparams}
  if args.compare_saved_model_decode_hparams:
    variants[f" ({args.compare_saved_model_decode_hparams})"] = args.compare_saved_model_decode_hparams
  processes, firsts = {}, {}
  for i, (label, overrides) in enumerate(variants.items()):
    export_hparams = model_dirs.model_decode_defaults(args.model_dir).parse(overrides)
    print(f"SavedModel{label} decode hparams: {overrides or 'the defaults'}")
    version = saved_model.export(args.model_dir, os.path.join(args.workdir, f"saved_model{i or ''}"),
                                 export_hparams, version=int(time.time()))
    processes[label] = SavedModelProcess(version, lines_file, args.batch)
    first = time.perf_counter()
    processes[label]()  # compiles the shapes it meets
    firsts[label] = time.perf_counter() - first
  timings = interleaved(processes, args.rounds)
  rows = dict(decoder_rows)
  for label, process in processes.items():
    process.close()
    rows[f"SavedModel{label}, default process (translation only, best round)"] = (
        timings[label].seconds, timings[label].result)
    rows[f"SavedModel{label}, default process (start-up + first pass, compiles)"] = (
        process.startup_seconds + firsts[label], timings[label].result)
  if not args.no_ctranslate2:
    # Each setting in a process of its own (a oneDNN cap holds for a whole process), its rounds
    # interleaved with the others'.
    ct2 = {}
    for quantization in ("float32", "int8"):
      folder = ct2_export.export(args.model_dir, os.path.join(args.workdir, f"ct2_{quantization}"),
                                 quantization, force=True)
      caps = ctranslate2_isa_caps(args.ctranslate2_isa_caps) if quantization == "float32" else ()
      for isa in (None,) + caps:
        name = ct2_float32_name(isa) if quantization == "float32" else f"CTranslate2 {quantization}"
        ct2[name] = CTranslate2LinesProcess(folder, lines_file, args.batch, quantization, isa)
    timings = interleaved(ct2, args.rounds)
    for name, process in ct2.items():
      process.close()
      rows[f"{name} (translation only, best round)"] = (timings[name].seconds, timings[name].result)
  rows.update(phase_rows)
  print_model_dir_rows(args, lines, rows, reference_outputs, "the decoder's")


# --make_base_model_dir: transformer_base (d 512, 6+6 layers) on the Multi30k problem's 8k vocabulary,
# trained only until it ends its sentences (see `make_base_model_dir`).
BASE_HPARAMS = "transformer_base,batch_size=1024,learning_rate_constant=1.0,learning_rate_warmup_steps=100"
BASE_TRAIN_STEPS = 100


def make_base_model_dir(args):
  """Writes a transformer_base model directory for `--model_dir` runs with t2t-lite-trainer:
  the Multi30k problem (its vocabulary from --data_dir, made there from --raw_data_dir if
  missing), `BASE_HPARAMS`, --train_steps updates, one checkpoint at the end, no evaluation
  (`--schedule=train`).

  What it is for: timing the decoding machinery (t2t-lite-decoder, the SavedModel, CTranslate2)
  at base's shapes on real lines, not translating well. Its weights must still end sentences:
  an untrained model never predicts EOS, so every sentence would run to its source length +
  extra_length (50) steps, several times a trained model's, over a cache of up to 128 positions.
  So it trains briefly at a high learning rate (warmup 100, constant 1: 4.4e-3 x step / 100 up
  to step 100), in batches of 1,024 tokens: a base update took about 14 s on the shared 2-core
  EPYC under a load of 7 (the loss 6.17 at step 10, 5.14 at step 20), a few seconds alone, so
  100 updates take minutes. After 20 updates it already ended every sentence, too early (8 lines
  of test_2016_flickr: 2.0 words a line against the references' 13.2); whether 100 bring the
  outputs near the references' length is not yet checked: `--model_dir` prints the decoder's words
  per line beside the references' (with --references); train longer if they are much shorter.

  How long the `--model_dir` table takes for this model (an estimate, not a measurement): a beam-4
  step at batch 64 costs about 5x the Multi30k model's (52 against 10 MFLOP per hypothesis-step),
  about 130-160 ms alone, so a pass over 1,000 lines of trained-model lengths (about 650 steps)
  takes 85-105 s in process. The table makes about 12 such passes at --rounds=2 (the decoder
  command; the SavedModel's first pass and rounds; the cache-phase comparison's passes with and
  without phases and its step count; CTranslate2's), about half an hour; --rounds=1 and
  --num_lines=500 bring it to about 10-15 minutes.
  """
  command = [os.path.join(os.path.dirname(sys.executable), "t2t-lite-trainer"),
             "--problem=translate_ende_multi30k", f"--data_dir={args.data_dir}",
             f"--hparams={BASE_HPARAMS}", f"--output_dir={args.make_base_model_dir}",
             f"--train_steps={args.train_steps}", f"--save_checkpoints_steps={args.train_steps}",
             "--schedule=train", "--log_every=10", "--decode_hparams=extra_length=50"]
  if args.raw_data_dir:
    command.append(f"--raw_data_dir={args.raw_data_dir}")
  print(" ".join(command), flush=True)
  subprocess.run(command, check=True)


def read_lines(path, count):
  """The first `count` lines of a file, without their newlines."""
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f][:count]


def words_per_line(lines):
  return sum(len(line.split()) for line in lines) / max(len(lines), 1)


def print_model_dir_rows(args, lines, rows, reference_outputs, reference_name):
  """The main table of `bench_model_dir`: {name: (seconds, outputs)} against the reference."""
  print(f"| decoding | sentences/s | seconds | outputs identical to {reference_name} | sacreBLEU |")
  print("|---|---|---|---|---|")
  references = read_lines(args.references, len(lines)) if args.references else None
  for name, (seconds, outputs) in rows.items():
    same = sum(a == b for a, b in zip(outputs, reference_outputs))
    bleu = ""
    if references:
      import sacrebleu  # pylint: disable=import-outside-toplevel
      bleu = f"{sacrebleu.corpus_bleu(outputs, [references]).score:.2f}"
    print(f"| {name} | {len(lines) / seconds:,.1f} | {seconds:.1f} | {same}/{len(lines)} | {bleu} |",
          flush=True)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="tiny,base")
  parser.add_argument("--batches", default="64,1")
  parser.add_argument("--length", type=int, default=30, help="source and output length")
  parser.add_argument("--repeats", type=int, default=2, help="at least this many calls per round")
  parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
  parser.add_argument("--min_seconds", type=float, default=1.0, help="at least this long per round")
  parser.add_argument("--bandwidth_gib", type=float, default=1.0,
                      help="GiB read to measure the streaming read bandwidth")
  parser.add_argument("--matmul_size", type=int, default=2048,
                      help="n of the [n, n] x [n, n] matmul that measures the float32 peak")
  parser.add_argument("--chain_gflop", type=float, default=2.0,
                      help="GFLOP per call of each product shape's timed chain (product_rates)")
  parser.add_argument("--no_ctranslate2", action="store_true",
                      help="skip the CTranslate2 peer (pip install ctranslate2; not a dependency)")
  parser.add_argument("--ctranslate2_isa_caps", default="auto",
                      help="CTranslate2 float32 again, in a process of its own, with its oneDNN "
                           "capped at each of these instruction sets (ONEDNN_MAX_CPU_ISA, e.g. "
                           "AVX2,AVX512_CORE); auto: AVX2 on a CPU with AVX-512, none elsewhere")
  parser.add_argument("--model_dir", default=None,
                      help="only: this trained model directory on --lines (see bench_model_dir)")
  parser.add_argument("--lines", default=None, help="source lines for --model_dir")
  parser.add_argument("--make_base_model_dir", default=None,
                      help="only: train a transformer_base model directory here for --model_dir "
                           "(see make_base_model_dir)")
  parser.add_argument("--train_steps", type=int, default=BASE_TRAIN_STEPS,
                      help="updates of --make_base_model_dir")
  parser.add_argument("--data_dir", default="t2t_data",
                      help="--make_base_model_dir: the Multi30k problem's vocabulary (the recipe's)")
  parser.add_argument("--raw_data_dir", default=None,
                      help="--make_base_model_dir: Multi30k's raw files, e.g. ../shared/data/multi30k")
  parser.add_argument("--references", default=None, help="reference lines for sacreBLEU (--model_dir)")
  parser.add_argument("--num_lines", type=int, default=1000, help="the first this many --lines")
  parser.add_argument("--batch", type=int, default=64, help="SavedModel / CTranslate2 batch (--model_dir)")
  parser.add_argument("--saved_model_decode_hparams", default="",
                      help="overrides of the problem's decode defaults for the SavedModel row "
                           "(--model_dir), e.g. refill_slots=32")
  parser.add_argument("--compare_saved_model_decode_hparams", default="",
                      help="with --model_dir: a second SavedModel with these overrides of the "
                           "problem's decode defaults, timed in rounds interleaved with the first "
                           "(e.g. refill_slots=32 against the default sub-batches)")
  parser.add_argument("--cache_phases_only", action="store_true",
                      help="with --model_dir: only the in-process search with and without cache "
                           "phases, and stopping for the n-best list (no decoder command, "
                           "SavedModel or CTranslate2)")
  parser.add_argument("--no_in_process", action="store_true",
                      help="with --model_dir: skip the in-process search with and without cache "
                           "phases (about half the table's time on base)")
  parser.add_argument("--no_saved_model", action="store_true",
                      help="skip the SavedModel in a default process (a subprocess, clean environment)")
  parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "t2t_lite_bench"))
  parser.add_argument("--top_k", action="store_true",
                      help="only: the beam search's candidate top-k, XLA's against top_candidates")
  parser.add_argument("--gemv", action="store_true",
                      help="only: base's batch-1 step matrix-vector products under XLA, in GB/s")
  parser.add_argument("--smoke", action="store_true",
                      help="the smallest run (seconds; tests run it): " + " ".join(SMOKE))
  args = parser.parse_args(argv)
  if args.smoke:
    args = parser.parse_args(SMOKE + (argv if argv is not None else sys.argv[1:]))
  if args.no_in_process and args.cache_phases_only:
    parser.error("--no_in_process skips what --cache_phases_only runs: give one of them")
  unknown = [isa for isa in ctranslate2_isa_caps(args.ctranslate2_isa_caps) if isa not in ONEDNN_ISAS]
  if unknown:  # oneDNN ignores a name it does not know, and the row would be mislabelled
    parser.error(f"--ctranslate2_isa_caps: unknown oneDNN instruction set(s) {', '.join(unknown)}; "
                 f"give auto, or names from {', '.join(ONEDNN_ISAS)}")
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.top_k:
    bench_top_k()
    return
  if args.gemv:
    bench_gemv()
    return
  if args.make_base_model_dir:
    make_base_model_dir(args)
    return
  if args.model_dir:
    bench_model_dir(args)
    return
  ct2 = not args.no_ctranslate2
  if ct2:
    try:
      import ctranslate2  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
      print("CTranslate2 is not installed (pip install ctranslate2); measuring t2t_lite alone")
      ct2 = False
  bench_fixed_work(args, ct2)


def print_row(shape, batch, name, *cells):
  """A row of the fixed-work table (7 columns), blank where `cells` stop."""
  cells = list(cells) + [""] * (4 - len(cells))
  print(f"| {shape} | {batch} | {name} | " + " | ".join(cells) + " |", flush=True)


def print_flops_and_rates(args):
  """The FLOPs counted per sentence of each shape (`decode_products`) and the rates of its
  weight products at each batch (`product_rates`); returns ({shape: {beam: products}},
  {(shape, batch): rates})."""
  length, products, rates = args.length, {}, {}
  for shape in args.shapes.split(","):
    set_name, vocab = SHAPES[shape]
    config = ModelConfig.of(get_hparams(set_name))
    products[shape] = {beam: decode_products(config, vocab, length, length, beam) for beam in (1, 4)}
    sentence = sum(p.flops for p in products[shape][1] if not p.per_hypothesis)
    keys_values = sum(p.flops for p in products[shape][1] if p.name == "encoder-decoder keys/values")
    totals = {beam: sum(p.flops for p in ps) for beam, ps in products[shape].items()}
    print(f"{shape}: FLOPs counted per sentence (matrix products, {length} source tokens, {length} "
          f"steps): encoder {(sentence - keys_values) / 1e9:.3f} G, encoder-decoder keys/values "
          f"{keys_values / 1e9:.3f} G; in all greedy {totals[1] / 1e9:.3f} G, beam 4 "
          f"{totals[4] / 1e9:.3f} G ({(totals[1] - sentence) / length / 1e6:.2f} M per "
          "hypothesis-step)")
  print("| shape | batch | product [rows, k] x [k, n] | what | matrices in sequence | GFLOP/s, XLA "
        "| GFLOP/s, TF graph (oneDNN) |")
  print("|---|---|---|---|---|---|---|")
  for shape in products:
    for batch in (int(b) for b in args.batches.split(",")):
      shapes = product_shapes(products[shape], batch)
      rates[shape, batch] = product_rates(shapes, args.rounds, args.min_seconds, args.chain_gflop * 1e9)
      for (rows, k, n), (weights, names) in shapes.items():
        rate = rates[shape, batch][rows, k, n]
        print(f"| {shape} | {batch} | [{rows}, {k}] x [{k}, {n}] | {'; '.join(names)} | {weights} | "
              f"{gflops(rate['XLA'])} | {gflops(rate['TF graph'])} |", flush=True)
  return products, rates


def bench_fixed_work(args, ct2):
  """The default mode: random weights, fixed work (see the module's docstring)."""
  threads = len(os.sched_getaffinity(0))
  length = args.length
  os.makedirs(args.workdir, exist_ok=True)
  print(cpu.describe())
  print(f"oneDNN {os.environ.get('TF_ENABLE_ONEDNN_OPTS')}; {threads} threads; source and output "
        f"length {length}")
  bandwidth = read_bandwidth(args.bandwidth_gib)
  print(f"streaming read bandwidth (reduce_sum over {args.bandwidth_gib:g} GiB): "
        f"{bandwidth / 1e9:.1f} GB/s")
  peak = matmul_peak(args.matmul_size)
  print(f"float32 matmul peak (TF, {args.matmul_size}^3, fastest of 5 rounds): {peak / 1e9:.1f} "
        "GFLOP/s")
  products, product_rates_ = print_flops_and_rates(args)
  print("| shape | batch | decoding | target tok/s | sentences/s | GFLOP/s | MFU |")
  print("|---|---|---|---|---|---|---|")
  for shape in args.shapes.split(","):
    model = build_model(shape)
    vocab = model.vocab_size
    sentence_flops = {beam: sum(p.flops for p in ps) for beam, ps in products[shape].items()}
    for batch in (int(b) for b in args.batches.split(",")):
      source = fixed_sources(vocab, batch, length)
      runs = {}
      for kind, beam in (("greedy", 1), ("beam 4", 4)):
        for xla in (True, False):
          search = fixed_work_search(model, beam, xla)
          runs[f"{kind}, cached{'' if xla else ', graph (xla=false)'}"] = (
              lambda s, f=search: [t.numpy() for t in f(s)])
      runs.update(zip(UNCACHED, (uncached_greedy(model, length), uncached_whole_model(model, length))))
      processes, ct2_float32 = [], []
      if ct2:
        caps = ctranslate2_isa_caps(args.ctranslate2_isa_caps)
        ct2_runs, processes = ctranslate2_runs(model, source, args.workdir, threads, length, caps)
        runs.update(ct2_runs)
        ct2_float32 = [ct2_float32_name(isa) for isa in (None,) + caps]
      if not args.no_saved_model:
        name, fn, process = saved_model_run(model, source, args.workdir, beam=4)
        runs[name] = lambda s, fn=fn: fn()
        processes.append(process)
      timings = interleaved({name: lambda _, fn=fn, s=source: fn(s) for name, fn in runs.items()},
                            args.rounds, args.repeats, args.min_seconds)
      for process in processes:
        process.close()
      rates = {name: batch * length / timing.seconds for name, timing in timings.items()}
      outputs = {name: timing.result for name, timing in timings.items()}
      for name, timing in timings.items():
        # The same FLOPs for every row of a search: what the model must compute (the uncached
        # rows compute more, the counted work done at a lower rate).
        flop_rate = batch * sentence_flops[4 if "beam 4" in name else 1] / timing.seconds
        print_row(shape, batch, name, f"{rates[name]:,.0f}", f"{batch / timing.seconds:,.1f}",
                  f"{flop_rate / 1e9:.1f}", f"{flop_rate / peak:.2f}")
      for cached in ("greedy, cached", "greedy, cached, graph (xla=false)"):
        for uncached in UNCACHED:
          print_row(shape, batch, f"{cached} / {uncached}", f"{rates[cached] / rates[uncached]:.1f}x")
      if batch == 1:
        weight_bytes = weight_bytes_per_step(model)
        ceiling = bandwidth / weight_bytes
        print_row(shape, 1, f"greedy ceiling: {weight_bytes / 1e6:.0f} MB of weights per step at "
                  f"{bandwidth / 1e9:.1f} GB/s", f"{ceiling:,.0f}")
        print_row(shape, 1, f"greedy ceiling / {UNCACHED[1]}", f"{ceiling / rates[UNCACHED[1]]:.1f}x")
      cached_ids = outputs["greedy, cached"][0][:, 0]
      for uncached in UNCACHED:
        ids = outputs[uncached][:, 1:]
        same = sum(np.array_equal(a[:length], b[:length]) for a, b in zip(cached_ids, ids))
        print_row(shape, batch, f"{uncached}: outputs identical to cached", f"{same}/{batch} sentences")
      if ct2:
        for peer in ct2_float32:  # CTranslate2 float32 as it starts, then at each oneDNN cap
          for ours, kind in (("greedy, cached", "greedy"), ("beam 4, cached", "beam 4")):
            print_row(shape, batch, f"{ours} / {peer}, {kind}",
                      f"{rates[ours] / rates[f'{peer}, {kind}']:.2f}x")
          same = same_greedy_tokens(outputs["greedy, cached"][0], outputs[f"{peer}, greedy"])
          print_row(shape, batch, f"greedy outputs identical to {peer}'s", f"{same}/{batch} sentences")
        for quantization in ("int8",):
          theirs = f"CTranslate2 {quantization}, beam 4"
          print_row(shape, batch, f"beam 4, cached / {theirs}",
                    f"{rates['beam 4, cached'] / rates[theirs]:.2f}x")
      print_ceilings(shape, batch, length, products[shape], peak, product_rates_[shape, batch],
                     rates, ct2_float32)
      if not args.no_saved_model:
        served = outputs["beam 4, SavedModel in a default process"]
        beam_ids = outputs["beam 4, cached"][0][:, 0]
        same = sum(text.split() == [str(i) for i in ids[:length]] for text, ids in zip(served, beam_ids))
        print_row(shape, batch, "beam 4, SavedModel in a default process: outputs identical to cached",
                  f"{same}/{batch} sentences")
        print_row(shape, batch, "beam 4, SavedModel in a default process / beam 4, cached",
                  f"{rates['beam 4, SavedModel in a default process'] / rates['beam 4, cached']:.2f}x")


def print_ceilings(shape, batch, length, products, peak, product_rates_, rates, peers):
  """The float32 ceilings of greedy and beam 4: every counted FLOP at the square matmul peak,
  and at the rates measured at the decoder's own shapes (`ceiling_seconds`); each over each of
  `peers` (CTranslate2 float32 rows of `rates`, {row name: target tok/s}, without the search)."""
  for beam, ps in products.items():
    kind = search_name(beam)
    flops = batch * sum(p.flops for p in ps)
    seconds = {"the matmul peak (square)": flops / peak,
               "the decoder-shape rates": ceiling_seconds(ps, batch, beam, product_rates_, peak)}
    for where, time_s in seconds.items():
      print_row(shape, batch, f"{kind} float32 ceiling at {where}", f"{batch * length / time_s:,.0f}",
                f"{batch / time_s:,.1f}", f"{flops / time_s / 1e9:.1f}", f"{flops / time_s / peak:.2f}")
    for peer in peers:
      theirs = f"{peer}, {kind}"
      for where, time_s in seconds.items():
        print_row(shape, batch, f"{kind} ceiling at {where} / {theirs}",
                  f"{batch * length / time_s / rates[theirs]:.2f}x")


if __name__ == "__main__":
  main()
