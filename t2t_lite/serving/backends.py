"""What decodes a batch for the server: a model directory or an exported SavedModel.

Both answer `decode(sentences) -> [[(text, score), ...] per sentence]`: every hypothesis of the
search, best first (beam_size of them; 1 for greedy and sampling), the SavedModel's `nbest`
signature's outputs; the first is `serving_default`'s. An empty (or all-whitespace) sentence gets
beams of ("", 0.0), as the SavedModel gives it. `decode(sentences, best_only=True)` is for a
batch that wants the best translation only: the beam search stops each sentence once its best is
final (the SavedModel's `serving_default`); the first beam is the same, the others may not be
the n-best list's.

- `ModelDirBackend` translates with the project's `Translator` (what `t2t-lite-decoder` runs),
  which pads each batch to one of the allowed batch sizes and one of the width buckets (so the
  search is compiled for a few shapes only), and gives the web page what the SavedModel cannot:
  the encoder-decoder attention of a translation, and the tree of a parsing model's output.
- `SavedModelBackend` runs the `nbest` signature of a SavedModel written by `t2t-lite-exporter`
  (loading needs tensorflow and tensorflow-text, as TF Serving would); its graph pads to the same
  buckets.

Both can warm up (`warm_up`, before the server takes requests): run each batch bucket at each
width bucket up to `warmup_max_width` once, so that XLA compiles those programs at start and not
under the first requests' load.
"""

import json
import os
import re
import sys
import threading

import numpy as np

from t2t_lite import model_dir
from t2t_lite.decoding import attention_pictures
from t2t_lite.decoding import buckets
from t2t_lite.decoding.translator import encode_sources, load_translator
from t2t_lite.export.saved_model import DECODE_HPARAMS_FILE, SHAPES_FILE
from t2t_lite.hparams import DecodeHParams

SIGNATURES = ("serving_default", "nbest")
INPUT_NAME = "text"
OUTPUT_NAMES = ("translations", "scores")


class BackendError(ValueError):
  """A request the backend cannot answer (HTTP 400): the message says why."""


class UnsupportedError(BackendError):
  """A feature this backend does not have (HTTP 501), e.g. attention from a SavedModel."""


def num_beams(decode_hparams: DecodeHParams) -> int:
  return decode_hparams.beam_size if decode_hparams.beam_size > 1 else 1


def _signature_defs(beams):
  """TF Serving's JSON of the two signatures (`GetModelMetadataResponse`), with the shapes of
  the exported ones: text [-1]; translations and scores [-1], and [-1, beams] for nbest."""
  def tensor(dtype, sizes):
    return {"dtype": dtype, "tensor_shape": {"dim": [{"size": str(size), "name": ""} for size in sizes],
                                             "unknown_rank": False}, "name": ""}
  return {name: {"inputs": {INPUT_NAME: tensor("DT_STRING", [-1])},
                 "outputs": {"translations": tensor("DT_STRING", sizes),
                             "scores": tensor("DT_FLOAT", sizes)},
                 "method_name": "tensorflow/serving/predict"}
          for name, sizes in (("serving_default", [-1]), ("nbest", [-1, beams]))}


class ModelDirBackend:
  """A trained model directory, decoded with `Translator`.

  Args:
    output_dir: the trainer's (or importer's) model directory.
    decode_hparams: the decode settings (beam size, alpha, extra length, ...).
    batch_sizes: the padded batch sizes (`BatchingOptions.batch_sizes`): the Translator decodes
      a batch of n sentences as the smallest size >= n, filled with one-token sources whose
      results are dropped.
    checkpoint_path: default: the latest checkpoint.
    warmup_max_width: `warm_up` compiles every batch size at each width bucket up to this
      (sources of up to this many subwords); 0: no warm-up.
  """

  kind = "model_dir"

  def __init__(self, output_dir: str, decode_hparams: DecodeHParams, batch_sizes=(1,),
               checkpoint_path: str | None = None, warmup_max_width: int = 0):
    self.batch_sizes = tuple(batch_sizes)
    self.warmup_max_width = warmup_max_width
    # The largest padded size is one batch: decode_hparams.batch_size says so to the page.
    self.decode_hparams = decode_hparams.replace(batch_size=max(self.batch_sizes))
    self.translator, self.checkpoint_path = load_translator(
        output_dir, self.decode_hparams, checkpoint_path, self.batch_sizes)
    self.translator.warn = lambda message: print(message, file=sys.stderr, flush=True)
    self.vocab = self.translator.vocab
    self.num_beams = num_beams(decode_hparams)
    # TF Serving's versions are numbers: the checkpoint's (ckpt-1000 -> "1000").
    digits = re.findall(r"\d+", os.path.basename(self.checkpoint_path))
    self.version = digits[-1] if digits else "1"
    self.problem = model_dir.find_problem(model_dir.read_record(output_dir)["problem"])
    self.parsing = getattr(self.problem, "target_language", None) == "en_tree"
    self.lock = threading.Lock()  # the model is used by one thread at a time

  def signature_defs(self):
    return _signature_defs(self.num_beams)

  @property
  def warms_up(self) -> bool:
    return self.warmup_max_width > 0

  def warm_up(self, log=lambda message: print(message, file=sys.stderr, flush=True)):
    """Compiles the search for every batch size at each width bucket up to warmup_max_width
    (logged); returns the (batch, width) shapes."""
    with self.lock:
      return self.translator.warm_up(self.warmup_max_width, log)

  def decode(self, sentences: list[str], best_only: bool = False) -> list[list[tuple[str, float]]]:
    sources = encode_sources(self.vocab, sentences, self.translator.limit, self.translator.warn)
    filled = [i for i, source in enumerate(sources) if source]
    results = [[("", 0.0)] * self.num_beams for _ in sentences]
    if not filled:
      return results
    with self.lock:   # the Translator pads the batch to self.batch_sizes and the width buckets
      beams = self.translator.translate_ids([sources[i] for i in filled], best_only)
    for i, line_beams in zip(filled, beams):
      results[i] = [(self.vocab.decode(ids), score) for ids, score in line_beams]
    return results

  def attention(self, source: str, target: str) -> dict:
    """The teacher-forced encoder-decoder attention of (source, target): the pieces (EOS as
    `</s>`) and per layer [heads][target pieces][source pieces] weights."""
    limit = self.translator.limit
    for side, text, encode in (("source", source, self.vocab.encode),
                               ("target", target, getattr(self.vocab, "encode_targets", self.vocab.encode))):
      length = len(encode(text)) + 1
      if length > limit:
        raise BackendError(f"the {side} has {length} pieces (with EOS); the attention view takes at "
                           f"most {limit}")
    with self.lock:
      weights, source_tokens, target_tokens, _ = attention_pictures.attention_for_pair(
          self.translator.model, self.vocab, source, target)
    layers = [np.round(np.asarray(layer, np.float64), 4).tolist()
              for layer in weights["encoder_decoder"]]
    return {"source_tokens": source_tokens, "target_tokens": target_tokens,
            "encoder_decoder": layers}

  def tree(self, source: str, output: str) -> dict:
    """A parsing model's output as a tree over the source words (repaired if malformed)."""
    if not self.parsing:
      raise UnsupportedError("this model is not a parsing model; trees are for parsing problems")
    from t2t_lite.parsing import linearize
    result = linearize.tree_from_linearized(output, source,
                                            leaf_tags=self.problem.linearization == "tags")
    return {"tree": tree_to_json(result.tree), "ptb": str(result.tree), "repairs": list(result.repairs)}

  def describe(self) -> dict:
    return {"backend": self.kind, "checkpoint": self.checkpoint_path,
            "problem": getattr(self.problem, "name", None), "parsing": self.parsing,
            "attention": True, "decode_hparams": json.loads(self.decode_hparams.to_json())}


def tree_to_json(tree) -> dict:
  """{"label", "children": [subtrees or {"word"}]} of a `Tree`."""
  return {"label": tree.label,
          "children": [tree_to_json(child) if hasattr(child, "children") else {"word": child}
                       for child in tree.children]}


def latest_version(export_dir: str) -> str:
  """`export_dir` itself if it holds a SavedModel, else its highest numeric version folder
  (TF Serving's default version policy)."""
  if os.path.exists(os.path.join(export_dir, "saved_model.pb")):
    return export_dir
  if not os.path.isdir(export_dir):
    raise BackendError(f"--export_dir={export_dir} does not exist; give an exporter's "
                       "EXPORT_DIR or EXPORT_DIR/<version>")
  versions = sorted((name for name in os.listdir(export_dir) if name.isdigit()
                     and os.path.exists(os.path.join(export_dir, name, "saved_model.pb"))), key=int)
  if not versions:
    raise BackendError(f"{export_dir} holds no SavedModel (saved_model.pb) nor numeric version "
                       "folders with one; write one with t2t-lite-exporter")
  return os.path.join(export_dir, versions[-1])


class SavedModelBackend:
  """A SavedModel of `t2t-lite-exporter`, decoded with its `nbest` signature (`serving_default`
  for a batch that wants the best translations only).

  Args:
    export_dir: EXPORT_DIR/<version>, or EXPORT_DIR (its highest version is served).
    batch_sizes, warmup_max_width: what `warm_up` runs (see `ModelDirBackend`); the graph pads
      a batch to `buckets.padded_batch_size` itself.
  """

  kind = "saved_model"
  parsing = False

  def __init__(self, export_dir: str, batch_sizes=(1,), warmup_max_width: int = 0):
    self.batch_sizes = tuple(batch_sizes)
    self.warmup_max_width = warmup_max_width
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops of the graph
    self.path = latest_version(export_dir)
    name = os.path.basename(os.path.normpath(self.path))
    self.version = name if name.isdigit() else "1"
    self._tf = tf
    self._loaded = tf.saved_model.load(self.path)
    missing = [name for name in SIGNATURES if name not in self._loaded.signatures]
    if missing:
      raise BackendError(f"{self.path} has no {missing} signature(s); export it with "
                         "t2t-lite-exporter (signatures serving_default and nbest)")
    self._nbest = self._loaded.signatures["nbest"]
    self._best = self._loaded.signatures["serving_default"]
    self.decode_hparams = _read_extra(self.path, DECODE_HPARAMS_FILE)
    self.width_buckets = _graph_width_buckets(self.path, self.decode_hparams)

  def signature_defs(self):
    """The SavedModel's own signature defs, as TF Serving's metadata API prints them."""
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(self.path, "saved_model.pb"), "rb") as f:
      proto.ParseFromString(f.read())
    return {name: _message_to_dict(signature)
            for name, signature in sorted(proto.meta_graphs[0].signature_def.items())}

  @property
  def warms_up(self) -> bool:
    return self.warmup_max_width > 0

  def warm_up(self, log=lambda message: print(message, file=sys.stderr, flush=True)):
    """Runs the `nbest` signature once per batch size and width bucket of its graph up to
    warmup_max_width (the buckets stop at the export's source limit), with sentences of
    `width - 1` words "a" (one subword each with an English vocabulary, so they fill that
    bucket; the graph's tokenizer is not reachable from here to make sure). Returns the
    (batch, width) shapes.

    Then `serving_default` once, on one short sentence: it runs the same compiled programs (the
    search takes `best_only` as an argument), but each signature's graph costs a first call of
    its own (docs/serving.md)."""
    widths = [w for w in self.width_buckets if w <= self.warmup_max_width]
    shapes = buckets.warm_up(self.batch_sizes, widths,
                             lambda rows, width: self.decode([" ".join(["a"] * (width - 1))] * rows),
                             log, lambda rows, width: f"batch {rows} x {width - 1} words")
    if shapes:
      self.decode(["a"] * shapes[0][0], best_only=True)
    return shapes

  def decode(self, sentences: list[str], best_only: bool = False) -> list[list[tuple[str, float]]]:
    text = self._tf.constant(sentences, self._tf.string)
    if best_only:   # one beam a sentence, serving_default's
      out = self._best(text=text)
      texts, scores = out["translations"].numpy()[:, None], out["scores"].numpy()[:, None]
    else:
      out = self._nbest(text=text)
      texts, scores = out["translations"].numpy(), out["scores"].numpy()
    return [[(t.decode("utf-8"), float(s)) for t, s in zip(row_texts, row_scores)]
            for row_texts, row_scores in zip(texts, scores)]

  def attention(self, source, target):
    raise UnsupportedError("a SavedModel holds the search graph only; serve the model directory "
                      "(--output_dir) to see attention weights")

  def tree(self, source, output):
    raise UnsupportedError("trees are shown for parsing model directories (--output_dir)")

  def describe(self) -> dict:
    return {"backend": self.kind, "path": self.path, "problem": None, "parsing": False,
            "attention": False, "decode_hparams": self.decode_hparams}


def _read_extra(path: str, name: str):
  """The JSON file `name` of the SavedModel's assets.extra/, or None."""
  extra = os.path.join(path, "assets.extra", name)
  if not os.path.exists(extra):
    return None
  with open(extra, encoding="utf-8") as f:
    return json.load(f)


def _graph_width_buckets(path: str, decode_hparams: dict | None) -> tuple[int, ...]:
  """The source widths the SavedModel's graph pads to, as its exporter recorded them; for an
  export without that record (older ones), the buckets of its decode hparams' max_input_size
  (the model's own limit, which may be lower, is not recorded there), else all of them."""
  shapes = _read_extra(path, SHAPES_FILE)
  if shapes is not None:
    return tuple(shapes["width_buckets"])
  limit = (decode_hparams or {}).get("max_input_size", 0)
  return buckets.width_buckets(limit) if limit > 0 else buckets.WIDTH_BUCKETS


def _message_to_dict(message):
  """A proto as TF Serving's JSON prints it: field names as in the proto, defaults included."""
  from google.protobuf import json_format
  try:
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
  except TypeError:  # protobuf < 5.26 names the option differently
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     including_default_value_fields=True)
