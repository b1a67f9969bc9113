"""Marian (OPUS-MT) translation models -> a t2t_lite model directory (`t2t-lite-import`).

Two layouts of the same models are read:

- Hugging Face's (`hf download Helsinki-NLP/opus-mt-en-de`): `config.json`, `model.safetensors`,
  `source.spm`, `target.spm`, `vocab.json`;
- Marian's own release (the OPUS-MT zip): one `*.npz` (its config inside, `special:model.yml`),
  `source.spm`, `target.spm`, `*.vocab.yml`.

They are the paper's Transformer base, post-norm, with the switches `ModelConfig` has for them:
biases on every attention projection, a swish feed-forward activation, a logits bias, and their
own position encoding: Marian's C++ computes T2T's sinusoid (`position_encoding="sinusoid"`),
Hugging Face's port the paper's frequencies in the same [sin | cos] halves
("sinusoid_paper_halves"). Each layout gets the encoding and LayerNorm epsilon of the code that
runs it (Hugging Face: 1e-5; Marian: 1e-6), so an import reproduces that code's outputs;
`hparams_overrides="position_encoding=sinusoid"` runs a Hugging Face download as Marian would.
Decoding never predicts PAD (`never_predict_pad`) where the model's softmax had none: always for
Marian's files, for Hugging Face's where the config forbids it (`bad_words_ids`, as OPUS-MT's do).

Ids: t2t_lite's PAD=0, EOS=1, UNK=2 (`t2t_lite.token_ids`); the embedding rows (and logits bias)
are permuted from Marian's order (`</s>`=0, `<unk>`=1, `<pad>` last, added by Hugging Face's
conversion as a zero row) so that every id means the same piece. Sources are split by
`source.spm`, targets by `target.spm` (`t2t_lite.data.vocab.PairedSubwordVocab`).

The directory is written as the trainer writes one at step 0 (hparams.json, vocab.model, ckpt-0
with the model and a fresh optimizer), in a temporary folder renamed at the end, so the decoder,
exporter, attention pictures and the trainer itself (fine-tuning: rerun it there) read it unchanged.
"""

import json
import os
import shutil
import tempfile

import numpy as np
import yaml

from t2t_lite import model_dir
from t2t_lite.data.vocab import PairedSubwordVocab
from t2t_lite.hparams import HParams
from t2t_lite.importers import arrays
from t2t_lite.token_ids import EOS_ID, PAD_ID, UNK_ID
from t2t_lite.training.train_loop import Trainer

FORMATS = ("marian",)
CONVERT_PICKLE = ("python -c \"from transformers import MarianMTModel as M; "
                  "M.from_pretrained('DIR').save_pretrained('DIR')\" (writes DIR/model.safetensors)")
# Marian's parameter names within one layer -> Hugging Face's (its convert_marian_to_pytorch.py).
MARIAN_TO_HF = {
    **{f"{marian}_{kind}{p}": f"{hf}.{p}_proj.{'weight' if kind == 'W' else 'bias'}"
       for marian, hf in (("self", "self_attn"), ("context", "encoder_attn"))
       for kind in ("W", "b") for p in ("q", "k", "v")},
    **{f"{marian}_{kind}o": f"{hf}.out_proj.{'weight' if kind == 'W' else 'bias'}"
       for marian, hf in (("self", "self_attn"), ("context", "encoder_attn")) for kind in ("W", "b")},
    **{f"{marian}_Wo_ln_{p}": f"{hf}_layer_norm.{'weight' if p == 'scale' else 'bias'}"
       for marian, hf in (("self", "self_attn"), ("context", "encoder_attn"))
       for p in ("scale", "bias")},
    "ffn_W1": "fc1.weight", "ffn_b1": "fc1.bias", "ffn_W2": "fc2.weight", "ffn_b2": "fc2.bias",
    "ffn_ffn_ln_scale": "final_layer_norm.weight", "ffn_ffn_ln_bias": "final_layer_norm.bias",
}
# Marian's settings these models must have (Hugging Face's converter checks the same).
MARIAN_ASSUMPTIONS = {"type": "transformer", "transformer-preprocess": "",
                      "transformer-postprocess": "dan", "transformer-postprocess-emb": "d",
                      "transformer-ffn-depth": "2", "transformer-no-projection": "false",
                      "transformer-train-position-embeddings": "false", "right-left": "false",
                      "layer-normalization": "false"}
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu"}


class CheckpointImportError(ValueError):
  """A folder that is not a Marian model t2t_lite can import, with what to do about it."""


# --- Reading the two layouts into one form: Hugging Face's names, torch's [out, in] kernels. -----


def read_folder(folder: str) -> tuple[dict, dict, tuple[list[str], np.ndarray], bytes, bytes]:
  """(architecture fields, {HF name: float32 array}, (pieces in t2t_lite id order, the Marian id
  of each), source.spm, target.spm) of a Hugging Face or Marian model folder."""
  if not os.path.isdir(folder):
    raise CheckpointImportError(f"--source {folder} is not a folder; give the downloaded model's folder")
  names = set(os.listdir(folder))
  spm = {}
  for side in ("source", "target"):
    if f"{side}.spm" not in names:
      raise CheckpointImportError(f"{folder} has no {side}.spm; a Marian model folder holds source.spm and "
                         "target.spm (SentencePiece models) beside its weights")
    with open(os.path.join(folder, f"{side}.spm"), "rb") as f:
      spm[side] = f.read()
  if "config.json" in names:
    config, weights, pieces = read_hugging_face(folder, names)
  elif any(name.endswith(".npz") for name in names):
    config, weights, pieces = read_marian(folder, names)
  else:
    raise CheckpointImportError(f"{folder} is neither Hugging Face's layout (config.json, model.safetensors, "
                       "vocab.json, source.spm, target.spm) nor Marian's (*.npz, *.vocab.yml, "
                       "source.spm, target.spm)")
  return config, weights, pieces, spm["source"], spm["target"]


def read_hugging_face(folder, names):
  with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
    hf = json.load(f)
  if hf.get("model_type") != "marian":
    raise CheckpointImportError(f"{folder}/config.json describes a {hf.get('model_type')!r} model; "
                       "--from=marian imports model_type 'marian' (OPUS-MT)")
  tokenizer_config = {}
  if "tokenizer_config.json" in names:
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
      tokenizer_config = json.load(f)
  vocab_size = hf.get("vocab_size", 58101)
  unsupported = {
      "separate source and target vocabularies (separate_vocabs)":
          tokenizer_config.get("separate_vocabs") or "target_vocab.json" in names,
      "untied encoder and decoder embeddings (share_encoder_decoder_embeddings)":
          not hf.get("share_encoder_decoder_embeddings", True),
      "a decoder vocabulary of its own (decoder_vocab_size)":
          hf.get("decoder_vocab_size") not in (None, vocab_size),
      "an output layer apart from the embeddings (tie_word_embeddings)":
          not hf.get("tie_word_embeddings", True),
      "pre-norm layers (normalize_before)": hf.get("normalize_before", False),
      "a LayerNorm on the embeddings (normalize_embedding)": hf.get("normalize_embedding", False),
      "a final LayerNorm (add_final_layer_norm)": hf.get("add_final_layer_norm", False),
      "learned positions (static_position_embeddings)": not hf.get("static_position_embeddings", True),
      "different encoder and decoder widths": (
          hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim")
          or hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads")),
      "a decoder start symbol other than <pad>":
          hf.get("decoder_start_token_id", hf.get("pad_token_id")) != hf.get("pad_token_id"),
  }
  refuse(folder, [what for what, present in unsupported.items() if present])
  config = dict(
      hidden_size=hf["d_model"], filter_size=hf["encoder_ffn_dim"],
      num_heads=hf["encoder_attention_heads"], num_encoder_layers=hf["encoder_layers"],
      num_decoder_layers=hf["decoder_layers"], max_position=hf.get("max_position_embeddings", 1024),
      ffn_activation=activation(hf.get("activation_function", "gelu")),
      scale_embeddings=bool(hf.get("scale_embedding", False)),
      layer_prepostprocess_dropout=float(hf.get("dropout", 0.1)),
      attention_dropout=float(hf.get("attention_dropout", 0.0)),
      relu_dropout=float(hf.get("activation_dropout", 0.0)),
      # What Hugging Face's MarianMTModel computes: torch's LayerNorm epsilon, its sinusoid, the
      # decoder starting from PAD's embedding row, and (OPUS-MT's configs) never generating PAD.
      layer_norm_epsilon=1e-5, position_encoding="sinusoid_paper_halves",
      decoder_start="pad_embedding", never_predict_pad=forbids_pad(folder, names, hf))
  if "model.safetensors" in names or "model.safetensors.index.json" in names:
    weights = arrays.read_safetensors(os.path.join(folder, "model.safetensors" if "model.safetensors"
                                                   in names else "model.safetensors.index.json"))
  else:
    arrays.refuse_pickles(folder, CONVERT_PICKLE)
    raise CheckpointImportError(f"{folder} has no model.safetensors. Download it (see docs/opus-mt.md) or "
                       f"convert the weights you have: {CONVERT_PICKLE}"
                       + ("; tf_model.h5 needs transformers < 5 and from_tf=True for that"
                          if "tf_model.h5" in names else ""))
  if "vocab.json" not in names:
    raise CheckpointImportError(f"{folder} has no vocab.json (the shared vocabulary, piece -> id)")
  with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
    ids = json.load(f)
  pieces = pieces_in_id_order(ids, vocab_size, folder + "/vocab.json")
  specials = (hf.get("pad_token_id", vocab_size - 1), hf.get("eos_token_id", 0), ids.get("<unk>"))
  return config, weights, order_specials(pieces, specials, folder)


def read_marian(folder, names):
  npz = [name for name in names if name.endswith(".npz")]
  vocabs = [name for name in names if name.endswith("vocab.yml")]
  if len(npz) != 1 or len(vocabs) != 1:
    raise CheckpointImportError(f"{folder} must hold one *.npz model and one *.vocab.yml vocabulary "
                       f"(a model with a shared vocabulary); found {sorted(npz + vocabs)}")
  state = arrays.read_npz(os.path.join(folder, npz[0]))
  if "special:model.yml" not in state:
    raise CheckpointImportError(f"{npz[0]} has no special:model.yml: it is not a Marian model file")
  marian = yaml.load(state.pop("special:model.yml").tobytes().decode("utf-8").rstrip("\x00"),
                     Loader=yaml.BaseLoader)
  wrong = [f"{key}: {marian.get(key)!r} (needs {value!r})" for key, value in MARIAN_ASSUMPTIONS.items()
           if str(marian.get(key, value)).lower() != value]
  tied = marian.get("tied-embeddings-all") == "true" or "Wemb" in state
  dims = marian.get("dim-vocabs", [])
  refuse(folder, wrong + ([] if tied else ["untied embeddings (tied-embeddings-all: false)"])
         + ([] if len(set(dims)) <= 1 else [f"two vocabulary sizes {dims}"]))
  with open(os.path.join(folder, vocabs[0]), encoding="utf-8") as f:
    ids = {piece: int(i) for piece, i in yaml.load(f, Loader=yaml.BaseLoader).items()}
  weights = {"model.shared.weight": state.pop("Wemb"),
             "final_logits_bias": state.pop("decoder_ff_logit_out_b").reshape(1, -1)}
  for key, value in state.items():
    stack, _, rest = key.partition("_l")
    number, _, name = rest.partition("_")
    if stack not in ("encoder", "decoder") or not number.isdigit() or name not in MARIAN_TO_HF:
      raise CheckpointImportError(f"{npz[0]} has a parameter t2t_lite does not know: {key}")
    hf_name = f"model.{stack}.layers.{int(number) - 1}.{MARIAN_TO_HF[name]}"
    weights[hf_name] = value.T if value.ndim == 2 and value.shape[0] > 1 else value.reshape(-1)
  # No <pad> in Marian: Hugging Face's conversion adds it last, with a zero row and bias.
  pieces = pieces_in_id_order(ids, len(ids), folder + "/" + vocabs[0]) + ["<pad>"]
  weights["model.shared.weight"] = np.concatenate([weights["model.shared.weight"],
                                                   np.zeros_like(weights["model.shared.weight"][:1])])
  weights["final_logits_bias"] = np.pad(weights["final_logits_bias"], [(0, 0), (0, 1)])
  config = dict(
      hidden_size=int(marian["dim-emb"]), filter_size=int(marian["transformer-dim-ffn"]),
      num_heads=int(marian["transformer-heads"]), num_encoder_layers=int(marian["enc-depth"]),
      num_decoder_layers=int(marian["dec-depth"]),
      ffn_activation=activation(marian.get("transformer-ffn-activation", "swish")),
      scale_embeddings=True, layer_prepostprocess_dropout=float(marian.get("transformer-dropout", 0.1)),
      attention_dropout=float(marian.get("transformer-dropout-attention", 0.0)),
      relu_dropout=float(marian.get("transformer-dropout-ffn", 0.0)),
      # What Marian's C++ computes: LayerNorm epsilon 1e-6, T2T's sinusoid, a zero start vector,
      # a softmax without PAD (Marian has none).
      layer_norm_epsilon=1e-6, position_encoding="sinusoid", decoder_start="zeros",
      never_predict_pad=True)
  specials = (len(pieces) - 1, ids.get("</s>"), ids.get("<unk>"))
  return config, weights, order_specials(pieces, specials, folder)


def forbids_pad(folder, names, hf):
  """Whether Hugging Face's generation never emits PAD (`bad_words_ids` holding `[pad]`, as
  every OPUS-MT config has: Marian's softmax had no PAD)."""
  generation = {}
  if "generation_config.json" in names:
    with open(os.path.join(folder, "generation_config.json"), encoding="utf-8") as f:
      generation = json.load(f)
  pad = hf.get("pad_token_id")
  return any([pad] in (source.get("bad_words_ids") or []) for source in (hf, generation))


def refuse(folder, problems):
  if problems:
    raise CheckpointImportError(f"{folder} is a Marian model with " + "; ".join(problems)
                       + ", which t2t_lite's Transformer does not have")


def activation(name):
  if name not in ACTIVATIONS:
    raise CheckpointImportError(f"feed-forward activation {name!r} is not supported; t2t_lite has "
                       f"{', '.join(sorted(ACTIVATIONS))}")
  return ACTIVATIONS[name]


def pieces_in_id_order(ids: dict, size: int, where: str) -> list[str]:
  pieces = [None] * size
  for piece, i in ids.items():
    if not 0 <= i < size or pieces[i] is not None:
      raise CheckpointImportError(f"{where}: id {i} of {piece!r} is out of range or given twice "
                         f"(the model has {size} ids)")
    pieces[i] = piece
  if None in pieces:
    raise CheckpointImportError(f"{where} names no piece for id {pieces.index(None)} of {size}")
  return pieces


def order_specials(pieces, specials, folder):
  """(pieces, order): `order[t]` is the Marian id of t2t_lite id `t`; PAD, EOS, UNK come first."""
  if None in specials or len(set(specials)) != 3:
    raise CheckpointImportError(f"{folder}: the vocabulary needs distinct <pad>, </s> and <unk> ids; got "
                       f"{dict(zip(('pad', 'eos', 'unk'), specials))}")
  order = [None] * 3
  for t2t_id, marian_id in zip((PAD_ID, EOS_ID, UNK_ID), specials):
    order[t2t_id] = marian_id
  order += [i for i in range(len(pieces)) if i not in specials]
  return [pieces[i] for i in order], np.array(order)


# --- Hugging Face's names -> t2t_lite's variables. -----------------------------------------------


def t2t_weights(weights: dict, order: np.ndarray, config: dict) -> dict[str, np.ndarray]:
  """{t2t_lite variable path (`model_dir.checkpointable`): array} from Hugging Face's names."""
  remaining = dict(weights)

  def take(name):
    if name not in remaining:
      raise CheckpointImportError(f"the weights have no {name}")
    return remaining.pop(name)

  def kernel(name):  # torch's Linear [out, in] -> our [in, out]
    return take(f"{name}.weight").T

  out = {}
  table = take("model.shared.weight")
  for alias in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                "lm_head.weight"):  # tied copies
    if alias in remaining and not np.array_equal(remaining.pop(alias), table):
      raise CheckpointImportError(f"{alias} differs from model.shared.weight; t2t_lite ties them")
  for name in list(remaining):
    if name.endswith("embed_positions.weight"):  # the fixed sinusoid, recomputed by the model
      remaining.pop(name)
  out["shared_embedding/embeddings"] = table[order]
  out["shared_embedding/logits_bias"] = take("final_logits_bias").reshape(-1)[order]
  for stack, depth in (("encoder", config["num_encoder_layers"]),
                       ("decoder", config["num_decoder_layers"])):
    for i in range(depth):
      hf, ours = f"model.{stack}.layers.{i}", f"{stack}/layer_{i}"
      attentions = [("self_attn", "self_attention")]
      if stack == "decoder":
        attentions.append(("encoder_attn", "encdec_attention"))
      for hf_attention, attention in attentions:
        projections = [f"{hf}.{hf_attention}.{p}_proj" for p in "qkv"]
        fused = ["qkv"] if attention == "self_attention" else ["q", "kv"]
        parts = {"qkv": projections, "q": projections[:1], "kv": projections[1:]}
        for name in fused:
          out[f"{ours}/{attention}/{name}_kernel"] = np.concatenate(
              [kernel(p) for p in parts[name]], axis=1)
          out[f"{ours}/{attention}/{name}_bias"] = np.concatenate(
              [take(f"{p}.bias") for p in parts[name]])
        out[f"{ours}/{attention}/output_kernel"] = kernel(f"{hf}.{hf_attention}.out_proj")
        out[f"{ours}/{attention}/output_bias"] = take(f"{hf}.{hf_attention}.out_proj.bias")
        out[f"{ours}/{attention}_norm/gamma"] = take(f"{hf}.{hf_attention}_layer_norm.weight")
        out[f"{ours}/{attention}_norm/beta"] = take(f"{hf}.{hf_attention}_layer_norm.bias")
      for number in ("1", "2"):
        out[f"{ours}/feed_forward/kernel_{number}"] = kernel(f"{hf}.fc{number}")
        out[f"{ours}/feed_forward/bias_{number}"] = take(f"{hf}.fc{number}.bias")
      out[f"{ours}/feed_forward_norm/gamma"] = take(f"{hf}.final_layer_norm.weight")
      out[f"{ours}/feed_forward_norm/beta"] = take(f"{hf}.final_layer_norm.bias")
  if remaining:
    raise CheckpointImportError(
        f"the weights have parameters t2t_lite does not know: {sorted(remaining)[:5]}")
  return out


# --- The model directory. -------------------------------------------------------------------------


def import_marian(source: str, output_dir: str, hparams_overrides: str = "",
                  problem_name: str = "", overwrite: bool = False) -> dict:
  """Writes the Marian model in `source` as a t2t_lite model directory `output_dir`.

  Args:
    source: a Hugging Face or Marian model folder (see the module docstring).
    output_dir: the model directory to write (hparams.json, vocab.model, ckpt-0).
    hparams_overrides: `name=value,...` applied to the hparams read from the model: training
      settings for fine-tuning (learning_rate_constant, batch_size, ...), dropout, or
      `position_encoding=sinusoid` to run a Hugging Face download with Marian's own sinusoid.
      The weights' shapes are the model's; an override that changes them is an error.
    problem_name: the problem recorded (its decoding defaults, and the data a later training
      run in `output_dir` fine-tunes on); "" records none.
    overwrite: replace what `output_dir` holds.

  Returns:
    {"hparams": HParams, "vocab_size": int, "checkpoint": path}.

  Raises:
    CheckpointImportError: not an importable model, with what to do; arrays.WeightFileError: a pickled or
      broken weight file; model_dir.ModelDirError: `output_dir` is not empty and not `overwrite`.
  """
  if os.path.exists(output_dir) and os.listdir(output_dir) and not overwrite:
    raise model_dir.ModelDirError(f"{output_dir} is not empty; import into a new directory or pass "
                                  "--overwrite_output_dir")
  config, weights, (pieces, order), source_spm, target_spm = read_folder(source)
  hparams = HParams().replace(norm_type="post", attention_bias=True, logits_bias=True, **config)
  hparams = hparams.parse(hparams_overrides)
  vocab = PairedSubwordVocab(source_spm, target_spm, pieces)
  variables = t2t_weights(weights, order, config)
  parent = os.path.dirname(os.path.abspath(output_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent, prefix=f".import-{os.path.basename(output_dir)}-")
  try:
    model_dir.give_default_mode(tmp)
    flags = {"from": "marian", "source": os.path.abspath(source)}
    model_dir.write_model_dir(tmp, hparams, problem_name, flags, vocab.vocab_size)
    model_dir.write_vocab(tmp, vocab)
    trainer = Trainer(hparams, vocab.vocab_size, tmp)  # step 0, a fresh optimizer
    for path, variable in model_dir.checkpointable(trainer.model).items():
      if path not in variables:
        raise CheckpointImportError(f"the model has {path}, which the weights do not give")
      if tuple(variable.shape) != variables[path].shape:
        raise CheckpointImportError(f"{path}: the weights have shape {variables[path].shape}, the model "
                           f"{tuple(variable.shape)} (did --hparams change the architecture?)")
      variable.assign(variables[path].astype(np.float32))
    checkpoint = os.path.basename(trainer.save())
    if overwrite and os.path.exists(output_dir):
      shutil.rmtree(output_dir)
    os.replace(tmp, output_dir)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  return {"hparams": hparams, "vocab_size": vocab.vocab_size,
          "checkpoint": os.path.join(output_dir, checkpoint)}
