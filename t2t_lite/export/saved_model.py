"""SavedModel export: raw UTF-8 text in, translations and scores out (T2T issues #368, #878, #990).

The `serving_default` signature holds the whole path in one graph: tensorflow-text's
SentencePiece tokenizer, the encoder, the cached beam search and the detokenizer. Loading needs
tensorflow and tensorflow-text only (`import tensorflow_text` registers the tokenizer's ops), not
t2t_lite:

    import tensorflow as tf, tensorflow_text  # noqa
    translate = tf.saved_model.load("export/1").signatures["serving_default"]
    translate(text=tf.constant(["Hello world."]))["translations"]

The `nbest` signature returns every hypothesis of the search, best first: `translations` [N,
beams] and `scores` [N, beams], the n-best list the decoder writes with
`return_beams=true,write_beam_scores=true` (beams = beam_size; 1 for greedy and sampling).

Speed in a default process (no environment variables, nothing of t2t_lite imported): the search
runs as one XLA program (`jit_compile`, as `t2t-lite-decoder` runs it; decode hparam
`xla=false` keeps the plain graph), not as a graph `while` loop whose small per-step ops the
executor schedules one by one. XLA compiles one program per input shape, so the graph pads each
request to the buckets the decoder and the server use (`t2t_lite.decoding.buckets`): the source
width up to the next of WIDTH_BUCKETS (capped at the source limit) and the batch up to the next
power of two (multiples of BATCH_STEP above it). Padding does not change a sentence's output:
each sentence stops at its own length limit, filler rows are dropped, and padded positions are
masked. The first request of each shape pays the compile. Inside a request, the sentences are
sorted by source length and searched in sub-batches of the decode hparam `sub_batch_size`, each
padded to its own buckets, then put back in request order (`_search_text`); with the decode
hparam `refill_slots` > 0 (not for sampling), they go through that many slots instead, each
taking the request's next sentence, longest source first, as soon as its own is done
(`_search_refilled`, `t2t_lite.decoding.refill_search`).

The export is written to a temporary folder beside `export_dir/<version>` and renamed at the end,
so a failed export never leaves a half-written version (TensorFlow Serving would load it).
"""

import contextlib
import json
import os
import shutil
import time
import types

import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.data.vocab import strip_after_eos
from t2t_lite.decoding.buckets import BATCH_STEP, width_buckets
from t2t_lite.decoding.translator import (entries_axis, make_refill_fns, make_search_fn, output_length,
                                          pad_memory, refills, source_limit)
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID, PAD_ID
from t2t_lite.graph_functions import graph_function


DECODE_HPARAMS_FILE = "decode_hparams.json"   # in <version>/assets.extra/
# In assets.extra/: {"width_buckets": the source widths the graph pads to, the last its source
# limit}. (Exports before 2026-11-25 also wrote that limit as "source_limit"; nothing reads it.)
SHAPES_FILE = "shapes.json"


class ExportError(ValueError):
  """A model directory or setting this exporter refuses (t2t-lite-exporter exits with 2)."""


def padded_batch(n):
  """The batch size a request of n sentences is padded to, in the graph (int32 tensor or int):
  `buckets.padded_batch_size` with TensorFlow ops."""
  n = tf.maximum(tf.cast(n, tf.int32), 1)
  power = tf.cast(2 ** tf.math.ceil(tf.math.log(tf.cast(n, tf.float32)) / tf.math.log(2.0)), tf.int32)
  power = tf.maximum(power, n)  # float rounding: never below n
  return tf.where(n <= BATCH_STEP, power, -(-n // BATCH_STEP) * BATCH_STEP)


def pad_with_filler(source):
  """source [n, w] with filler rows appended up to `padded_batch(n)` rows: each row EOS then PAD,
  as the decoder's filler (their results are dropped). Returns [padded_batch(n), w]."""
  n, width = tf.shape(source)[0], tf.shape(source)[1]
  filler = tf.one_hot(tf.zeros([padded_batch(n) - n], tf.int32), width, on_value=EOS_ID,
                      off_value=PAD_ID, dtype=tf.int32)
  return tf.concat([source, filler], axis=0)


class TranslationModule(tf.Module):
  """text [N] string -> {"translations": [N] string, "scores": [N] float32} (`serve`), and all
  the hypotheses: [N, beams] each (`serve_nbest`)."""

  def __init__(self, model, tokenizer, decode_hparams, constraint=None):
    super().__init__()
    # Track the model's variables, not the Keras model: a tracked Keras model would add a
    # serving signature of its own (teacher-forced, float inputs) to the SavedModel.
    self.model_variables = model_dir.checkpointable(model)
    self.tokenizer = tokenizer
    self.vocab_size = model.vocab_size
    max_position = model.config.max_position
    self.limit = source_limit(decode_hparams, max_position)
    # The compiled searches live in `self.programs`, a plain namespace that tf.Module does not
    # track: the signatures' graph calls them (and the SavedModel holds them as its functions),
    # but `tf.saved_model.save` would trace each tracked tf.function again, on its own.
    self.programs = types.SimpleNamespace()
    self.programs.search = graph_function(make_search_fn(model, decode_hparams, max_position,
                                                         constraint),
                                          jit_compile=bool(decode_hparams.xla))
    self.buckets = width_buckets(self.limit)
    self.out_lengths = [output_length(width, decode_hparams, max_position) for width in self.buckets]
    self.sub_batch_size = decode_hparams.sub_batch_size
    self._search_beams = decode_hparams.beam_size                  # 1: greedy and sampling
    # The refill search (decode hparam refill_slots; never for sampling, whose draws are per
    # batch row: `refills`): the encoder and the slots' search, each compiled per shape bucket.
    self.refill = refills(decode_hparams)
    if self.refill:
      encode, refill = make_refill_fns(model, decode_hparams, max_position, constraint)
      self.programs.encode = graph_function(encode, jit_compile=bool(decode_hparams.xla))
      self.programs.refill = graph_function(refill, jit_compile=bool(decode_hparams.xla))
      # The memory's structure, shapes and dtypes, batch and source width unknown: a trace of
      # the encoder that runs nothing (the model is built: its variables are tracked above).
      memory = graph_function(encode).get_concrete_function(
          tf.TensorSpec([None, None], tf.int32)).structured_outputs
      self._memory_spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), memory)
    text_spec = [tf.TensorSpec([None], tf.string, name="text")]
    # One trace of tokenizer + search, here, called by both signatures: a concrete function, not
    # a tf.function, which `tf.saved_model.save` would trace again in its own context.
    # `best_only` is an argument of the compiled searches: serving_default's beam search stops a
    # sentence once its best hypothesis is found, nbest's once the whole list is (one program each
    # shape for both).
    self._search_text_fn = graph_function(
        self._search_text, input_signature=text_spec + [tf.TensorSpec([], tf.bool)]).get_concrete_function()
    self.serve = graph_function(self._serve, input_signature=text_spec)
    self.serve_nbest = graph_function(self._serve_nbest, input_signature=text_spec)

  def _search_text(self, text, best_only):
    """text [N] -> (ids [N, beams, L], scores [N, beams], nonempty [N]); `best_only` (scalar
    bool): only the best beam is wanted (`make_search_fn`).

    With refill slots (decode hparam `refill_slots` > 0): `_search_refilled`. Otherwise the
    sentences are sorted by source length (stable) and searched in sub-batches of
    `sub_batch_size` consecutive ones, one after another, each padded to its own width and batch
    bucket (`_search_bucketed`); the results are put back in request order. A request of at most
    `sub_batch_size` sentences (or sub_batch_size <= 0) is one batch, as the decoder's would be.
    """
    pieces = self.tokenizer.tokenize(text)                                 # ragged [N, (len)]
    pieces = tf.cast(pieces, tf.int32)[:, :self.limit - 1]                 # truncation policy
    lengths = tf.cast(pieces.row_lengths(), tf.int32) + 1                  # [N], with EOS
    nonempty = tf.greater(tf.strings.length(tf.strings.strip(text)), 0)     # [N]
    eos = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.shape(text)[0]], EOS_ID), tf.ones_like(pieces.row_lengths()))
    source = tf.concat([pieces, eos], axis=1).to_tensor(PAD_ID)                 # [N, S]
    if self.refill:
      ids, scores = self._search_refilled(source, lengths, nonempty, best_only)
      return ids, scores, nonempty
    n = tf.shape(source)[0]
    order = tf.argsort(lengths, stable=True)                                  # shortest first
    source, lengths = tf.gather(source, order), tf.gather(lengths, order)
    sub = self.sub_batch_size if self.sub_batch_size > 0 else tf.maximum(n, 1)
    # Every sub-batch's ids are padded to the output length of the request's widest bucket (that
    # of its last sub-batch) and joined.
    out_length = tf.gather(tf.constant(self.out_lengths), self._bucket(tf.shape(source)[1]))

    def body(i, all_ids, all_scores):
      rows = source[i * sub:(i + 1) * sub]
      rows = rows[:, :tf.maximum(tf.reduce_max(lengths[i * sub:(i + 1) * sub]), 1)]
      ids, scores = self._search_bucketed(rows, best_only)
      ids = tf.pad(ids, [[0, 0], [0, 0], [0, out_length - tf.shape(ids)[2]]])
      return i + 1, all_ids.write(i, ids), all_scores.write(i, scores)

    count = tf.maximum((n + sub - 1) // sub, 1)
    arrays = [tf.TensorArray(dtype, size=count, infer_shape=False) for dtype in (tf.int32, tf.float32)]
    # One sub-batch at a time (parallel_iterations=1), as the decoder runs its batches.
    _, ids, scores = tf.while_loop(lambda i, *_: i < count, body, [0] + arrays, parallel_iterations=1)
    unsort = tf.math.invert_permutation(order)
    beams = self._search_beams
    ids = tf.ensure_shape(tf.gather(ids.concat(), unsort), [None, beams, None])
    scores = tf.ensure_shape(tf.gather(scores.concat(), unsort), [None, beams])
    return ids, scores, nonempty

  def _search_refilled(self, source, lengths, nonempty, best_only):
    """The refill search over source [N, S] (`make_refill_fns`): ids [N, beams, L], scores [N, beams].

    The non-empty sentences, longest source first, are encoded in sub-batches of
    `sub_batch_size`, each at its own width bucket (`_encode_bucketed`), padded to the request's
    width bucket, then decoded through the slots in that order; empty lines are not decoded (ids
    0). The batch is padded to `padded_batch(N)` rows (never decoded), so the search's programs
    are those of a few shapes: (padded batch, width bucket), as the batch search's."""
    n, width = tf.shape(source)[0], tf.shape(source)[1]
    order = tf.argsort(tf.where(nonempty, lengths, 0), direction="DESCENDING", stable=True)
    source = tf.gather(source, order)                                        # longest first
    count = tf.reduce_sum(tf.cast(nonempty, tf.int32))                       # decoded sentences
    sub = self.sub_batch_size if self.sub_batch_size > 0 else tf.maximum(count, 1)
    index = self._bucket(width)
    bucket_width = tf.gather(tf.constant(self.buckets), index)
    sorted_lengths = tf.gather(lengths, order)

    def encode(i, arrays):
      rows = source[i * sub:tf.minimum((i + 1) * sub, count)]
      rows = rows[:, :tf.maximum(tf.reduce_max(sorted_lengths[i * sub:(i + 1) * sub]), 1)]
      memory = tf.nest.flatten(pad_memory(self._encode_bucketed(rows), bucket_width))
      return i + 1, [array.write(i, t) for array, t in zip(arrays, memory)]

    chunks = tf.maximum((count + sub - 1) // sub, 1)
    arrays = [tf.TensorArray(t.dtype, size=chunks, infer_shape=False)
              for t in tf.nest.flatten(self._memory_spec)]
    # One sub-batch at a time (parallel_iterations=1), as the batch search's sub-batches.
    _, arrays = tf.while_loop(lambda i, _: i < chunks, encode, [0, arrays], parallel_iterations=1)
    padded_source = pad_with_filler(source)                                  # [B, S]
    batch = tf.shape(padded_source)[0]
    # Rows count .. B - 1 (empty lines and filler) get zero memory: they are never decoded.
    memory = [array.concat() for array in arrays]                            # [count, ...]
    memory = [tf.pad(t, [[0, batch - tf.shape(t)[0]]] + [[0, 0]] * (len(spec.shape) - 1))
              for t, spec in zip(memory, tf.nest.flatten(self._memory_spec))]  # [B, ...]

    def search_at(index, bucket):
      def branch():
        padded = tf.pad(padded_source, [[0, 0], [0, bucket - width]], constant_values=PAD_ID)
        fixed = tf.nest.pack_sequence_as(self._memory_spec, [
            tf.ensure_shape(t, [None] + [bucket if d is None else d for d in spec.shape[1:]])
            for t, spec in zip(memory, tf.nest.flatten(self._memory_spec))])
        return self.programs.refill(tf.ensure_shape(padded, [None, bucket]), fixed, count,
                                    best_only=best_only)
      return branch

    ids, scores = tf.switch_case(index, [search_at(i, w) for i, w in enumerate(self.buckets)])
    unsort = tf.math.invert_permutation(order)
    beams = self._search_beams
    return (tf.ensure_shape(tf.gather(ids[:n], unsort), [None, beams, None]),
            tf.ensure_shape(tf.gather(scores[:n], unsort), [None, beams]))

  def _encode_bucketed(self, source):
    """The encoder memory of source [n, w] (`make_refill_fns`' encode), the batch padded to
    `padded_batch(n)` and the width to the next of self.buckets; returns n rows at width w."""
    n, width = tf.shape(source)[0], tf.shape(source)[1]
    source = pad_with_filler(source)                                          # [B, w]

    def encode_at(bucket_width):
      def branch():
        padded = tf.pad(source, [[0, 0], [0, bucket_width - width]], constant_values=PAD_ID)
        memory = self.programs.encode(tf.ensure_shape(padded, [None, bucket_width]))
        return tf.nest.flatten(memory)
      return branch

    memory = tf.switch_case(self._bucket(width), [encode_at(w) for w in self.buckets])
    memory = tf.nest.pack_sequence_as(self._memory_spec, memory)
    def cut(key, t):  # n rows, `width` positions
      return t[:n, :, :, :width] if entries_axis(key) == 3 else t[:n, :, :width]
    return {"source_mask": memory["source_mask"][:n, :width],
            "memory": {name: {key: cut(key, t) for key, t in layer.items()}
                       for name, layer in memory["memory"].items()}}

  def _bucket(self, width):
    """The index in self.buckets of the bucket a source `width` (int32 scalar) is padded to."""
    return tf.reduce_sum(tf.cast(tf.constant(self.buckets) < width, tf.int32))

  def _search_bucketed(self, source, best_only):
    """The search over source [n, S] padded to the buckets: the batch to `padded_batch(n)` with
    filler rows (EOS only, as the decoder's; results dropped), the width to the next of
    self.buckets. Returns ids [n, beams, out_lengths[bucket]], scores [n, beams]."""
    n, width = tf.shape(source)[0], tf.shape(source)[1]
    source = pad_with_filler(source)                                          # [B, S]

    def search_at(index, bucket_width):
      def branch():
        padded = tf.pad(source, [[0, 0], [0, bucket_width - width]], constant_values=PAD_ID)
        ids, scores = self.programs.search(tf.ensure_shape(padded, [None, bucket_width]),
                                           best_only=best_only)
        if ids.shape[2] != self.out_lengths[index]:
          raise AssertionError(f"the search at width {bucket_width} returned {ids.shape[2]} "
                               f"positions, not {self.out_lengths[index]}")
        return ids[:n], scores[:n]                                            # [n, beams, L]
      return branch

    return tf.switch_case(self._bucket(width),
                          [search_at(index, w) for index, w in enumerate(self.buckets)])

  def _detokenize(self, ids, nonempty):
    """ids [N, L] -> [N] strings; "" for an empty input."""
    translations = self.tokenizer.detokenize(strip_after_eos(ids, self.vocab_size))
    return tf.where(nonempty, translations, tf.fill(tf.shape(nonempty), ""))

  def _serve(self, text):
    ids, scores, nonempty = self._search_text_fn(text, tf.constant(True))
    return {"translations": self._detokenize(ids[:, 0, :], nonempty),
            "scores": tf.where(nonempty, scores[:, 0], tf.zeros_like(scores[:, 0]))}

  def _serve_nbest(self, text):
    ids, scores, nonempty = self._search_text_fn(text, tf.constant(False))       # [N, beams, L]
    shape = tf.shape(ids)
    flat_nonempty = tf.repeat(nonempty, shape[1])                            # [N * beams]
    flat = self._detokenize(tf.reshape(ids, [-1, shape[2]]), flat_nonempty)  # [N * beams]
    return {"translations": tf.reshape(flat, shape[:2]),                     # [N, beams]
            "scores": tf.where(nonempty[:, None], scores, tf.zeros_like(scores))}


@contextlib.contextmanager
def written_atomically(final: str, tmp: str):
  """Yields `tmp`, a folder to write an export into; renamed to `final` (replacing it) when the
  block succeeds, removed when it fails, so `final` is never half-written."""
  try:
    yield tmp
    if os.path.exists(final):
      shutil.rmtree(final)
    os.replace(tmp, final)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)


def export(output_dir: str, export_dir: str, decode_hparams: DecodeHParams | None = None,
           checkpoint_path: str | None = None, version: int | str | None = None) -> str:
  """Exports the model in `output_dir` to `export_dir/<version>`; returns that path.

  Args:
    decode_hparams: beam size, alpha, extra length and the problem's decoding constraint
      (parsing) fixed into the graph (default: the problem's decode defaults: T2T's beam 4,
      alpha 0.6, extra length 100 for translation; beam 21, alpha 0.3, +300 for parsing).
      They are written to `<version>/assets.extra/decode_hparams.json`, and the width buckets
      the graph pads to (`buckets.width_buckets`, ending at the source limit) to `shapes.json`
      there (what `t2t-lite-serve` warms up).
    checkpoint_path: default: the latest checkpoint of `output_dir`.
    version: the numeric folder name (default: seconds since the epoch, as TF Serving expects
      increasing numbers).
  """
  version = str(version or int(time.time()))
  if not version.isdigit():
    raise ExportError(f"export version must be a number (TF Serving's layout), got {version!r}")
  final = os.path.join(export_dir, version)
  if os.path.exists(final):
    raise FileExistsError(f"{final} exists already; pick another --version")
  _, model, _ = model_dir.restore_model(output_dir, checkpoint_path)
  vocab = model_dir.load_vocab(output_dir)
  tokenizer = getattr(vocab, "tf_tokenizer", None)
  if tokenizer is None:
    raise ExportError(f"the vocabulary of {output_dir} has no in-graph tokenizer; only subword "
                      "(SentencePiece) problems can be exported as text-in/text-out models")
  if decode_hparams is None:
    decode_hparams = model_dir.model_decode_defaults(output_dir)
  module = TranslationModule(model, tokenizer, decode_hparams,
                             model_dir.decode_constraint(output_dir, vocab, decode_hparams))
  os.makedirs(export_dir, exist_ok=True)
  with written_atomically(final, os.path.join(export_dir, f".tmp-{version}-{os.getpid()}")) as tmp:
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve,
                                                 "nbest": module.serve_nbest})
    # What the graph decodes with, for people and tools (TF Serving ignores assets.extra).
    os.makedirs(os.path.join(tmp, "assets.extra"))
    with open(os.path.join(tmp, "assets.extra", DECODE_HPARAMS_FILE), "w", encoding="utf-8") as f:
      f.write(decode_hparams.to_json())
    with open(os.path.join(tmp, "assets.extra", SHAPES_FILE), "w", encoding="utf-8") as f:
      json.dump({"width_buckets": list(module.buckets)}, f)
  print(f"exported {output_dir} to {final}\nin Python, with tensorflow and tensorflow-text (no "
        f"t2t_lite): {load_hint(final)}; translate(text=tf.constant([\"A sentence .\"]))", flush=True)
  return final


def load_hint(path: str) -> str:
  """The Python statements that load the SavedModel at `path` as `model`, its default signature
  as `translate`: tensorflow_text's import registers the SentencePiece ops its graph tokenizes
  with (without it, TensorFlow fails with "Op type not registered 'SentencepieceOp'")."""
  return ("import tensorflow as tf, tensorflow_text; "
          f"model = tf.saved_model.load({path!r}); translate = model.signatures['serving_default']")
