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

The export is written to a temporary folder beside `export_dir/<version>` and renamed at the end,
so a failed export never leaves a half-written version (TensorFlow Serving would load it).
"""

import os
import shutil
import time

import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.data.vocab import strip_after_eos
from t2t_lite.decoding.translator import make_search_fn, source_limit
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID, PAD_ID


DECODE_HPARAMS_FILE = "decode_hparams.json"   # in <version>/assets.extra/


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
    self._search = make_search_fn(model, decode_hparams, max_position, constraint)
    text_spec = [tf.TensorSpec([None], tf.string, name="text")]
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
    ids, scores = self._search(source)                                       # [N, beams, L]
    return ids, scores, nonempty

  def _detokenize(self, ids, nonempty):
    """ids [N, L] -> [N] strings; "" for an empty input."""
    translations = self.tokenizer.detokenize(strip_after_eos(ids, self.vocab_size))
    return tf.where(nonempty, translations, tf.fill(tf.shape(nonempty), ""))

  def _serve(self, text):
    ids, scores, nonempty = self._search_text(text)
    return {"translations": self._detokenize(ids[:, 0, :], nonempty),
            "scores": tf.where(nonempty, scores[:, 0], tf.zeros_like(scores[:, 0]))}

  def _serve_nbest(self, text):
    ids, scores, nonempty = self._search_text(text)                          # [N, beams, L]
    shape = tf.shape(ids)
    flat_nonempty = tf.repeat(nonempty, shape[1])                            # [N * beams]
    flat = self._detokenize(tf.reshape(ids, [-1, shape[2]]), flat_nonempty)  # [N * beams]
    return {"translations": tf.reshape(flat, shape[:2]),                     # [N, beams]
            "scores": tf.where(nonempty[:, None], scores, tf.zeros_like(scores))}


def export(output_dir: str, export_dir: str, decode_hparams: DecodeHParams | None = None,
           checkpoint_path: str | None = None, version: int | str | None = None) -> str:
  """Exports the model in `output_dir` to `export_dir/<version>`; returns that path.

  Args:
    decode_hparams: beam size, alpha, extra length and the problem's decoding constraint
      (parsing) fixed into the graph (default: the problem's decode defaults: T2T's beam 4,
      alpha 0.6, extra length 100 for translation; beam 21, alpha 0.3, +300 for parsing).
      They are written to `<version>/assets.extra/decode_hparams.json`.
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
  tmp = os.path.join(export_dir, f".tmp-{version}-{os.getpid()}")
  try:
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve,
                                                 "nbest": module.serve_nbest})
    # What the graph decodes with, for people and tools (TF Serving ignores assets.extra).
    os.makedirs(os.path.join(tmp, "assets.extra"))
    with open(os.path.join(tmp, "assets.extra", DECODE_HPARAMS_FILE), "w", encoding="utf-8") as f:
      f.write(decode_hparams.to_json())
    os.replace(tmp, final)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  print(f"exported {output_dir} to {final}", flush=True)
  return final
