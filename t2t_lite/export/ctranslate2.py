"""CTranslate2 export: a model directory as a CTranslate2 model directory, float32 or quantized.

    t2t-lite-exporter --output_dir=runs/base --export_format=ctranslate2 --quantization=int8

writes OUTPUT_DIR/ctranslate2/ (or --export_dir):

    model.bin, config.json, shared_vocabulary.json   the CTranslate2 model (its own converter API:
                                                      a `TransformerSpec`, validated, optimized
                                                      and saved by `ctranslate2.converters.Converter`)
    source.spm, target.spm                           SentencePiece: split sources into pieces with
                                                      source.spm; join output pieces with target.spm
    t2t_lite_decode.json                             the problem's decode settings (beam, alpha,
                                                      extra length) and the translate_batch
                                                      arguments that follow from them

Translating needs `ctranslate2` and `sentencepiece` only (docs/ctranslate2.md).

What maps exactly (CTranslate2 computes what t2t_lite computes, up to float rounding):
- pre-norm (T2T's later sets: a final LayerNorm per stack) and post-norm (`transformer_base_v1`,
  the paper's), LayerNorm epsilon; ReLU or swish feed-forward; attention biases (Marian);
- positions: the model's own table (the three sinusoid layouts, or the learned table), written
  as CTranslate2's position encodings for `max_position` positions;
- embeddings: shared (the paper), separate source / target / softmax tables (T2T's
  `shared_embedding_and_softmax_weights=false`), the scale by sqrt(d), the logits bias;
- T2T's decoder start: the start symbol is PAD (id 0) and, with `decoder_start=zeros`, PAD
  embeds to zeros; the PAD rows of the embedding tables are written as zeros (the softmax keeps
  its row), so a PAD written in mid-sentence embeds to zeros too, as in t2t_lite;
  `decoder_start=pad_embedding` (imported Hugging Face Marian models) keeps PAD's row;
- `never_predict_pad` (imported Marian): PAD's logit is -1e9, written as a logits bias of -1e9
  on PAD (t2t_lite selects -1e9 there: the same ranking, never chosen);
- the source EOS: CTranslate2 appends `</s>` itself (`add_source_eos`), as t2t_lite's decoder does.

Refused (`ExportError`, the command exits with 2), never approximated: a model class other than
t2t_lite's Transformer; attention key/value channels other than hidden_size (CTranslate2 derives
the head size from d_model / heads); a decoding constraint (parsing's tree constraint: export
with `--decode_hparams=constrained=false` to get the unconstrained model, knowingly); a
vocabulary without SentencePiece models (the algorithmic problems' symbol vocabulary).

Decoding settings CTranslate2 does not share: its beam search normalizes a finished hypothesis by
`length ** length_penalty`, not GNMT's `((5 + length) / 6) ** alpha`, and its length limit is one
number per batch (`max_decoding_length`), not each source's length + extra_length. Greedy
decoding and beam search with alpha=0 rank alike. For alpha != 0 the json's `length_penalty` is
the power of length closest to GNMT's penalty over the lengths sentences have
(`ctranslate2_length_penalty`: 0.79 alpha), not alpha itself, which penalizes length more; the
json says so beside the values.
"""

import json
import os

import numpy as np

from t2t_lite import model_dir
from t2t_lite.data import vocab as vocab_lib
from t2t_lite.decoding.translator import source_limit
from t2t_lite.export.saved_model import written_atomically
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID, PAD_ID, UNK_ID

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16")
DECODE_FILE = "t2t_lite_decode.json"
SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
NEVER = -1e9  # PAD's logit with never_predict_pad (Transformer.decode_step's value)
# Output lengths (pieces, EOS included) over which CTranslate2's length penalty is fitted to GNMT's.
FIT_LENGTHS = np.arange(5, 61)


class ExportError(ValueError):
  """A model (or setting) CTranslate2 cannot represent exactly, with what to do instead."""


def check_convertible(model, decode_hparams: DecodeHParams, constraint=None) -> None:
  """Raises ExportError naming everything about `model` that CTranslate2 cannot represent."""
  from t2t_lite.models.transformer import Transformer  # pylint: disable=import-outside-toplevel
  if not isinstance(model, Transformer):
    raise ExportError(f"the CTranslate2 exporter converts t2t_lite's Transformer; this model is a "
                      f"{type(model).__name__}")
  config = model.config
  problems = []
  for name in ("attention_key_channels", "attention_value_channels"):
    if getattr(config, name) not in (0, config.hidden_size):
      problems.append(f"{name}={getattr(config, name)} (CTranslate2's heads have d_model / heads "
                      f"= {config.hidden_size // config.num_heads} channels; only 0 or "
                      f"{config.hidden_size} can be exported)")
  if constraint is not None:
    problems.append(f"the problem decodes with a constraint ({type(constraint).__name__}), which "
                    "CTranslate2 cannot apply; pass --decode_hparams=constrained=false to export "
                    "the unconstrained model")
  if decode_hparams.sampling_temperature > 0 and decode_hparams.beam_size > 1:
    problems.append("sampling with beam_size > 1 is not a CTranslate2 decoding mode")
  if problems:
    raise ExportError("cannot export to CTranslate2: " + "; ".join(problems))


def _vocab_pieces(vocab) -> list[str]:
  """The vocabulary's pieces in t2t_lite id order (CTranslate2's vocabulary)."""
  if isinstance(vocab, vocab_lib.PairedSubwordVocab):
    return list(vocab.pieces)
  if isinstance(vocab, vocab_lib.SubwordVocab):
    return vocab.id_to_piece(range(vocab.vocab_size))
  raise ExportError(f"the CTranslate2 exporter needs a SentencePiece vocabulary; this model has a "
                    f"{type(vocab).__name__} (no SentencePiece model to tokenize with)")


def sentencepiece_models(vocab) -> dict[str, bytes]:
  """{file name: SentencePiece model}: source.spm splits sources into the model's pieces;
  target.spm joins output pieces into text (for an imported Marian model: its target model over
  the shared vocabulary, as t2t_lite's `decode`)."""
  if isinstance(vocab, vocab_lib.PairedSubwordVocab):
    return {SOURCE_SPM: vocab.source_model,
            TARGET_SPM: vocab_lib._over_shared_ids(vocab.target_model, vocab.pieces)}  # pylint: disable=protected-access
  return {SOURCE_SPM: vocab.model_proto, TARGET_SPM: vocab.model_proto}


def converter(model, pieces: list[str]):
  """A `ctranslate2.converters.Converter` of a restored Transformer and its vocabulary's pieces:
  `converter(model, pieces).convert(directory, quantization=...)` writes the model."""
  from ctranslate2.converters.converter import Converter  # pylint: disable=import-outside-toplevel

  class T2TLiteConverter(Converter):
    """`ctranslate2.converters.Converter` for a restored t2t_lite Transformer and its pieces."""

    def __init__(self, model, pieces):
      self._model, self._pieces = model, pieces

    def _load(self):
      return transformer_spec(self._model, self._pieces)

  return T2TLiteConverter(model, pieces)


def transformer_spec(model, pieces: list[str]):
  """The CTranslate2 `TransformerSpec` of `model` (weights set, vocabularies registered)."""
  from ctranslate2.specs import common_spec  # pylint: disable=import-outside-toplevel
  from ctranslate2.specs import transformer_spec as spec_lib  # pylint: disable=import-outside-toplevel
  config = model.config
  weights = {path: np.asarray(v.numpy(), np.float32)
             for path, v in model_dir.checkpointable(model).items()}
  activation = {"relu": common_spec.Activation.RELU,
                "swish": common_spec.Activation.SWISH}[config.ffn_activation]
  spec = spec_lib.TransformerSpec.from_config(
      (config.num_encoder_layers, config.num_decoder_layers), config.num_heads,
      pre_norm=config.norm_type == "pre", activation=activation)
  spec.config.layer_norm_epsilon = config.layer_norm_epsilon
  spec.config.unk_token = pieces[UNK_ID]
  spec.config.eos_token = pieces[EOS_ID]
  # T2T starts the decoder from PAD (id 0); there is no BOS.
  spec.config.decoder_start_token = spec.config.bos_token = pieces[PAD_ID]
  spec.config.add_source_bos, spec.config.add_source_eos = False, True

  def linear(linear_spec, kernel, bias=None):
    linear_spec.weight = np.ascontiguousarray(weights[kernel].T)  # ours [in, out]; CT2 [out, in]
    if bias in weights:  # the feed-forward biases; the attention's with attention_bias
      linear_spec.bias = weights[bias]

  def norm(norm_spec, name):
    norm_spec.gamma, norm_spec.beta = weights[name + "/gamma"], weights[name + "/beta"]

  def table(embedding):
    """An embedding table as the model embeds with it (PAD's row zero with decoder_start=zeros)."""
    rows = weights[embedding.embeddings.path.split("/", 1)[-1]].copy()
    if embedding.zero_pad:
      rows[PAD_ID] = 0.0
    return rows

  positions = np.asarray(model.position(np.zeros((1, config.max_position, config.hidden_size),
                                                  np.float32)))[0]          # [max_position, d]
  for side, embedding in (("encoder", model.embedding), ("decoder", model.target_embedding)):
    stack = getattr(spec, side)
    embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
    embeddings.weight = table(embedding)
    stack.scale_embeddings = bool(config.scale_embeddings)
    stack.position_encodings.encodings = positions.copy()
    if config.norm_type == "pre":
      norm(stack.layer_norm, f"{side}/final_norm")
    for i, layer in enumerate(stack.layer):
      scope = f"{side}/layer_{i}"
      attention = f"{scope}/self_attention"
      linear(layer.self_attention.linear[0], f"{attention}/qkv_kernel", f"{attention}/qkv_bias")
      linear(layer.self_attention.linear[1], f"{attention}/output_kernel", f"{attention}/output_bias")
      norm(layer.self_attention.layer_norm, f"{scope}/self_attention_norm")
      if side == "decoder":
        attention = f"{scope}/encdec_attention"
        linear(layer.attention.linear[0], f"{attention}/q_kernel", f"{attention}/q_bias")
        linear(layer.attention.linear[1], f"{attention}/kv_kernel", f"{attention}/kv_bias")
        linear(layer.attention.linear[2], f"{attention}/output_kernel", f"{attention}/output_bias")
        norm(layer.attention.layer_norm, f"{scope}/encdec_attention_norm")
      ffn = f"{scope}/feed_forward"
      linear(layer.ffn.linear_0, f"{ffn}/kernel_1", f"{ffn}/bias_1")
      linear(layer.ffn.linear_1, f"{ffn}/kernel_2", f"{ffn}/bias_2")
      norm(layer.ffn.layer_norm, f"{scope}/feed_forward_norm")
  softmax = model.softmax.embeddings.path.split("/", 1)[-1]                  # ".../embeddings"
  spec.decoder.projection.weight = weights[softmax]                          # logits = x E^T
  bias = weights.get(softmax.rsplit("/", 1)[0] + "/logits_bias")
  if config.never_predict_pad:
    bias = np.zeros(model.vocab_size, np.float32) if bias is None else bias.copy()
    bias[PAD_ID] = NEVER
  if bias is not None:
    spec.decoder.projection.bias = bias
  spec.register_source_vocabulary(pieces)
  spec.register_target_vocabulary(pieces)
  return spec


def ctranslate2_length_penalty(alpha: float) -> float:
  """The CTranslate2 `length_penalty` p whose `length ** p` is closest to T2T's (GNMT's)
  `((5 + length) / 6) ** alpha`.

  A finished hypothesis ranks by its log-probability divided by the penalty, so penalties that
  differ by a constant factor rank alike: p is the least-squares slope of alpha * log(5 + length)
  against log(length) over FIT_LENGTHS (5-60 pieces), an intercept free. It is linear in alpha
  (0.79 alpha) and exact at alpha = 0; elsewhere the two penalties still differ at the ends of
  the range. On the Multi30k recipe's model (alpha 1.2, test_2016_flickr) it left CTranslate2's
  beam-4 outputs different from the decoder's on fewer lines than p = alpha (docs/ctranslate2.md).
  """
  design = np.stack([np.log(FIT_LENGTHS), np.ones(len(FIT_LENGTHS))], axis=1)
  slope, _ = np.linalg.lstsq(design, np.log(5.0 + FIT_LENGTHS), rcond=None)[0]
  return round(float(alpha * slope), 4)


def translate_options(decode_hparams: DecodeHParams, max_position: int) -> dict:
  """CTranslate2 `translate_batch` arguments for the decode settings (what can be carried over)."""
  dh = decode_hparams
  options = {"beam_size": dh.beam_size, "length_penalty": ctranslate2_length_penalty(dh.alpha),
             # t2t_lite truncates a source to limit - 1 pieces + EOS; CTranslate2 counts the EOS
             # it adds among max_input_length.
             "max_input_length": source_limit(dh, max_position)}
  if dh.beam_size == 1 and dh.sampling_temperature > 0:
    options.update(sampling_temperature=dh.sampling_temperature, sampling_topk=dh.top_k or 0)
  return options


def decode_record(decode_hparams: DecodeHParams, max_position: int, quantization: str) -> dict:
  """The json written beside the model: t2t_lite's settings, and how to use them with CTranslate2."""
  return {
      "decode_hparams": json.loads(decode_hparams.to_json()),
      "translate_batch": translate_options(decode_hparams, max_position),
      "max_decoding_length": ("per batch: min(longest source in pieces + 1 (EOS) + extra_length, "
                              f"{max_position}); t2t_lite limits each sentence to its own "
                              "source length + extra_length"),
      "length_penalty": ("CTranslate2 divides a finished hypothesis's log-probability by "
                         "length ** length_penalty; t2t_lite (T2T, GNMT) by "
                         "((5 + length) / 6) ** alpha. translate_batch's length_penalty is the "
                         "power of length closest to that over 5-60 pieces (0.79 alpha), not "
                         "alpha: beam search with alpha != 0 may still rank differently; greedy "
                         "and alpha = 0 rank alike"),
      "stopping": ("CTranslate2 stops a sentence's beam search once beam_size hypotheses have "
                   "ended (t2t_lite's decode hparam beam_stop=finished); t2t_lite's default, "
                   "beam_stop=exact, runs until T2T's bound proves the result final"),
      "quantization": quantization,
      "max_position": max_position,
  }


def export(output_dir: str, export_dir: str, quantization: str = "float32",
           decode_hparams: DecodeHParams | None = None, checkpoint_path: str | None = None,
           force: bool = False) -> str:
  """Writes the model in `output_dir` as a CTranslate2 model directory `export_dir`.

  Args:
    quantization: "float32", "int8", "int8_float32" or "int16" (CTranslate2's weight types).
    decode_hparams: recorded in t2t_lite_decode.json (default: the problem's decode defaults).
    checkpoint_path: default: the latest checkpoint of `output_dir`.
    force: replace `export_dir` if it exists (else FileExistsError).

  Returns the directory. The model is written to a temporary folder beside it and renamed at the
  end: a failure leaves nothing half-written.

  Raises:
    ExportError: something CTranslate2 cannot represent (see the module docstring).
  """
  if quantization not in QUANTIZATIONS:
    raise ExportError(f"quantization must be one of {', '.join(QUANTIZATIONS)}; got {quantization!r}")
  try:
    import ctranslate2  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    raise ExportError("the CTranslate2 export needs the ctranslate2 package: pip install "
                      "ctranslate2") from None
  if os.path.exists(export_dir) and not force:
    raise FileExistsError(f"{export_dir} exists already; pick another --export_dir (or remove it)")
  record = model_dir.read_record(output_dir)
  if decode_hparams is None:
    decode_hparams = model_dir.decode_defaults(model_dir.find_problem(record["problem"]))
  vocab = model_dir.load_vocab(output_dir)
  pieces = _vocab_pieces(vocab)
  _, model, _ = model_dir.restore_model(output_dir, checkpoint_path)
  check_convertible(model, decode_hparams,
                    model_dir.decode_constraint(output_dir, vocab, decode_hparams))
  if len(pieces) != model.vocab_size:
    raise ExportError(f"the vocabulary has {len(pieces)} pieces, the model {model.vocab_size} ids")
  parent = os.path.dirname(os.path.abspath(export_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = os.path.join(parent, f".tmp-{os.path.basename(export_dir)}-{os.getpid()}")
  with written_atomically(export_dir, tmp):
    converter(model, pieces).convert(tmp, quantization=quantization, force=True)
    for name, data in sentencepiece_models(vocab).items():
      with open(os.path.join(tmp, name), "wb") as f:
        f.write(data)
    with open(os.path.join(tmp, DECODE_FILE), "w", encoding="utf-8") as f:
      json.dump(decode_record(decode_hparams, model.config.max_position, quantization), f, indent=2)
  print(f"exported {output_dir} to {export_dir} (CTranslate2, {quantization})", flush=True)
  return export_dir
