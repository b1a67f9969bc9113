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
masked. The first request of each shape pays the compile.

The export is written to a temporary folder beside `export_dir/<version>` and renamed at the end,
so a failed export never leaves a half-written version (TensorFlow Serving would load it).
"""

import contextlib
import json
import os
import shutil
import time

import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.data.vocab import strip_after_eos
from t2t_lite.decoding.buckets import BATCH_STEP, width_buckets
from t2t_lite.decoding.translator import make_search_fn, source_limit
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID, PAD_ID


DECODE_HPARAMS_FILE = "decode_hparams.json"   # in <version>/assets.extra/
# In assets.extra/: {"width_buckets": the source widths the graph pads to, the last its source
# limit}. (Exports before 2026-11-25 also wrote that limit as "source_limit"; nothing reads it.)
SHAPES_FILE = "shapes.json"


def padded_batch(n):
  """The batch size a request of n sentences is padded to, in the graph (int32 tensor or int):
  `buckets.padded_batch_size` with TensorFlow ops."""
  n = tf.maximum(tf.cast(n, tf.int32), 1)
  power = tf.cast(2 ** tf.math.ceil(tf.math.log(tf.cast(n, tf.float32)) / tf.math.log(2.0)), tf.int32)
  power = tf.maximum(power, n)  # float rounding: never below n
  return tf.where(n <= BATCH_STEP, power, -(-n // BATCH_STEP) * BATCH_STEP)


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
    self._search = tf.function(make_search_fn(model, decode_hparams, max_position, constraint),
                               jit_compile=bool(decode_hparams.xla))
    self.buckets = width_buckets(self.limit)
    text_spec = [tf.TensorSpec([None], tf.string, name="text")]
    # One trace of tokenizer + search, called by both signatures.
    self._search_text_fn = tf.function(self._search_text, input_signature=text_spec)
    self.serve = tf.function(self._serve, input_signature=text_spec)
    self.serve_nbest = tf.function(self._serve_nbest, input_signature=text_spec)

  def _search_text(self, text):
    """text [N] -> (ids [N, beams, L], scores [N, beams], nonempty [N])."""
    pieces = self.tokenizer.tokenize(text)                                 # ragged [N, (len)]
    pieces = tf.cast(pieces, tf.int32)[:, :self.limit - 1]                 # truncation policy
    lengths = pieces.row_lengths()                                          # [N]
    nonempty = tf.greater(tf.strings.length(tf.strings.strip(text)), 0)     # [N]
    eos = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.shape(text)[0]], EOS_ID), tf.ones_like(lengths))
    source = tf.concat([pieces, eos], axis=1).to_tensor(PAD_ID)                 # [N, S]
    n, width = tf.shape(source)[0], tf.shape(source)[1]
    # Filler rows (EOS only, as the decoder's) up to the padded batch; results dropped.
    filler = tf.one_hot(tf.zeros([padded_batch(n) - n], tf.int32), width, on_value=EOS_ID,
                        off_value=PAD_ID, dtype=tf.int32)
    source = tf.concat([source, filler], axis=0)                              # [B, S]
    bucket = tf.reduce_sum(tf.cast(tf.constant(self.buckets) < width, tf.int32))

    def search_at(bucket_width):
      def branch():
        padded = tf.pad(source, [[0, 0], [0, bucket_width - width]], constant_values=PAD_ID)
        ids, scores = self._search(tf.ensure_shape(padded, [None, bucket_width]))
        return ids[:n], scores[:n]                                            # [N, beams, L]
      return branch

    ids, scores = tf.switch_case(bucket, [search_at(w) for w in self.buckets])
    return ids, scores, nonempty

  def _detokenize(self, ids, nonempty):
    """ids [N, L] -> [N] strings; "" for an empty input."""
    translations = self.tokenizer.detokenize(strip_after_eos(ids, self.vocab_size))
    return tf.where(nonempty, translations, tf.fill(tf.shape(nonempty), ""))

  def _serve(self, text):
    ids, scores, nonempty = self._search_text_fn(text)
    return {"translations": self._detokenize(ids[:, 0, :], nonempty),
            "scores": tf.where(nonempty, scores[:, 0], tf.zeros_like(scores[:, 0]))}

  def _serve_nbest(self, text):
    ids, scores, nonempty = self._search_text_fn(text)                          # [N, beams, L]
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
    raise ValueError(f"export version must be a number (TF Serving's layout), got {version!r}")
  final = os.path.join(export_dir, version)
  if os.path.exists(final):
    raise FileExistsError(f"{final} exists already; pick another --version")
  _, model, _ = model_dir.restore_model(output_dir, checkpoint_path)
  vocab = model_dir.load_vocab(output_dir)
  tokenizer = getattr(vocab, "tf_tokenizer", None)
  if tokenizer is None:
    raise ValueError(f"the vocabulary of {output_dir} has no in-graph tokenizer; only subword "
                     "(SentencePiece) problems can be exported as text-in/text-out models")
  if decode_hparams is None:
    decode_hparams = model_dir.decode_defaults(
        model_dir.find_problem(model_dir.read_record(output_dir)["problem"]))
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
  print(f"exported {output_dir} to {final}", flush=True)
  return final
