"""Attention pictures (paper figures 3-5): heatmaps per layer and head, and one word's attention.

Input is what the model's `attention_weights(source_ids, target_ids)` returns for one sentence:

    {"encoder_self":    [per layer [heads, S, S] or [1, heads, S, S]],
     "decoder_self":    [per layer [heads, T, T] ...],
     "encoder_decoder": [per layer [heads, T, S] ...]}      # rows: queries, columns: keys

`save_attention` writes, under `out_dir`:
- `attention.npz`: the weights exactly as given (batch axis dropped) and the tokens; read it back
  with `load_attention`.
- `{kind}_layer{n}.png`: one figure per kind and layer, one heatmap per head, tokens as labels.
- `{kind}_layer{n}_word{i}.png`: the view of the paper's Figure 3: lines from one query word to
  the words it attends to, one color per head, opacity = weight.
Layers are numbered from 1, as in the paper ("layer 5 of 6").

Drawing uses matplotlib's Agg canvas directly (no pyplot, no display, no global backend change).
"""

import math
import os

import keras
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from t2t_lite.decoding.translator import Translator
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID

KINDS = {  # kind: (query tokens, key tokens, title)
    "encoder_self": ("source", "source", "encoder self-attention"),
    "decoder_self": ("target", "target", "decoder self-attention"),
    "encoder_decoder": ("target", "source", "encoder-decoder attention"),
}
NPZ_NAME = "attention.npz"


def check_weights(weights, source_tokens, target_tokens):
  """Validates shapes; returns {kind: [per layer float array [heads, queries, keys]]}.

  Raises:
    ValueError: naming the kind and layer, the shape found and the shape expected.
  """
  if not isinstance(weights, dict) or not weights:
    raise ValueError("weights must be a non-empty dict {kind: [per layer array]} with kinds "
                     f"from {sorted(KINDS)}")
  unknown = sorted(set(weights) - set(KINDS))
  if unknown:
    raise ValueError(f"unknown attention kinds {unknown}; expected some of {sorted(KINDS)}")
  lengths = {"source": len(source_tokens), "target": len(target_tokens)}
  checked = {}
  for kind, layers in weights.items():
    queries, keys, _ = KINDS[kind]
    expected = (lengths[queries], lengths[keys])
    if isinstance(layers, np.ndarray) or not len(layers):
      raise ValueError(f"weights[{kind!r}] must be a non-empty list with one array per layer")
    checked[kind] = []
    for i, layer in enumerate(layers):
      array = np.asarray(layer)
      if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]                                   # [1, heads, q, k] -> [heads, q, k]
      if array.ndim != 3 or array.shape[1:] != expected:
        raise ValueError(
            f"weights[{kind!r}][{i}] has shape {tuple(np.shape(layer))}; expected "
            f"[heads, {expected[0]}, {expected[1]}] ({queries} x {keys} tokens) or with a "
            "leading batch axis of 1")
      if checked[kind] and array.shape[0] != checked[kind][0].shape[0]:
        raise ValueError(f"weights[{kind!r}][{i}] has {array.shape[0]} heads, layer 0 has "
                         f"{checked[kind][0].shape[0]}")
      checked[kind].append(array)
  return checked


def save_weights(path, weights, source_tokens, target_tokens):
  """Writes the (checked) weights and the tokens to one .npz file."""
  arrays = {f"{kind}.layer{i + 1}": array
            for kind, layers in weights.items() for i, array in enumerate(layers)}
  np.savez(path, source_tokens=np.asarray(source_tokens, dtype=str),
           target_tokens=np.asarray(target_tokens, dtype=str), **arrays)
  return path


def load_attention(path):
  """Reads `attention.npz` back: (weights {kind: [per layer array]}, source, target tokens)."""
  with np.load(path) as data:
    weights = {}
    for name in data.files:
      if ".layer" in name:
        kind, layer = name.split(".layer")
        weights.setdefault(kind, {})[int(layer)] = data[name]
    return ({kind: [layers[n] for n in sorted(layers)] for kind, layers in weights.items()},
            data["source_tokens"].tolist(), data["target_tokens"].tolist())


def _save(figure, path):
  FigureCanvasAgg(figure)
  figure.savefig(path, dpi=100, bbox_inches="tight")
  return path


def plot_heads(layer_weights, query_tokens, key_tokens, title):
  """One heatmap per head of [heads, queries, keys] weights; returns the Figure."""
  heads = layer_weights.shape[0]
  columns = min(heads, 4)
  rows = math.ceil(heads / columns)
  cell = min(max(3.0, 0.22 * max(len(query_tokens), len(key_tokens))), 9.0)  # inches per head
  font = 8 if max(len(query_tokens), len(key_tokens)) <= 40 else 5
  figure = Figure(figsize=(columns * cell, rows * cell + 0.6))
  axes = figure.subplots(rows, columns, squeeze=False)
  for head, ax in enumerate(axes.flat):
    if head >= heads:
      ax.axis("off")
      continue
    ax.imshow(layer_weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_title(f"head {head + 1}", fontsize=10)
    ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=font)
    ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=font)
  figure.suptitle(title + "  (rows: queries, columns: keys attended to)", fontsize=12)
  figure.tight_layout()
  return figure


def plot_word(layer_weights, query_tokens, key_tokens, query_index, title):
  """Figure 3's view: lines from one query word to every key, a color per head, alpha = weight."""
  heads = layer_weights.shape[0]
  colors = [_head_color(h, heads) for h in range(heads)]
  height = max(4.0, 0.3 * max(len(query_tokens), len(key_tokens)))
  figure = Figure(figsize=(6.0, height + 1.0))
  ax = figure.subplots()
  for i, token in enumerate(query_tokens):
    ax.text(0.0, -i, token, ha="right", va="center", fontsize=10,
            fontweight="bold" if i == query_index else "normal",
            color="black" if i == query_index else "gray")
  for k, token in enumerate(key_tokens):
    ax.text(1.0, -k, token, ha="left", va="center", fontsize=10)
  for h in range(heads):  # a small vertical offset per head keeps overlapping lines apart
    offset = (h - (heads - 1) / 2) * 0.35 / max(heads, 1)
    for k in range(len(key_tokens)):
      weight = float(layer_weights[h, query_index, k])
      if weight > 0.02:
        ax.plot([0.03, 0.97], [-query_index, -k + offset], color=colors[h],
                alpha=min(1.0, weight), linewidth=2.5)
  for h in range(heads):
    ax.plot([], [], color=colors[h], linewidth=3, label=f"head {h + 1}")
  ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=min(heads, 8), fontsize=8,
            frameon=False)
  ax.set_xlim(-0.6, 1.6)
  ax.set_ylim(-max(len(query_tokens), len(key_tokens)) + 0.5, 0.8)
  ax.axis("off")
  ax.set_title(f"{title}: attention of '{query_tokens[query_index]}'", fontsize=11)
  return figure


def _head_color(head, heads):
  import matplotlib
  if heads <= 10:
    return matplotlib.colormaps["tab10"](head)
  if heads <= 20:
    return matplotlib.colormaps["tab20"](head)
  return matplotlib.colormaps["hsv"](head / heads)


def _pick_word(query_tokens, word):
  if word is None:
    return len(query_tokens) // 2
  if isinstance(word, str):
    if word not in query_tokens:
      raise ValueError(f"word {word!r} is not among the query tokens {query_tokens}")
    return query_tokens.index(word)
  if not -len(query_tokens) <= word < len(query_tokens):
    raise ValueError(f"word index {word} out of range for {len(query_tokens)} query tokens")
  return word % len(query_tokens)


def save_attention(weights: dict, source_tokens: list[str], target_tokens: list[str], out_dir: str,
                   word: int | str | None = None, word_kind: str = "encoder_self",
                   word_layer: int | None = None) -> list[str]:
  """Saves the raw weights and draws them. Returns the list of written paths.

  Args:
    weights: {kind: [per layer [heads, queries, keys] or [1, heads, queries, keys]]}, kinds
      "encoder_self", "decoder_self", "encoder_decoder" (any non-empty subset).
    source_tokens, target_tokens: the token strings (subwords) labelling the axes.
    out_dir: created if missing.
    word: the query word of the Figure 3 view: a token string (first occurrence) or an index;
      default: the middle query token.
    word_kind: the attention kind of that view (default encoder self-attention, as in the paper).
    word_layer: its layer, from 1; default the second-to-last (the paper's "layer 5 of 6").

  Raises:
    ValueError: wrong kinds or shapes (the message names the layer and the expected shape).
  """
  source_tokens, target_tokens = [str(t) for t in source_tokens], [str(t) for t in target_tokens]
  checked = check_weights(weights, source_tokens, target_tokens)
  if word_kind not in checked:
    raise ValueError(f"word_kind {word_kind!r} not in the weights (have {sorted(checked)})")
  tokens = {"source": source_tokens, "target": target_tokens}
  layers = checked[word_kind]
  layer = word_layer if word_layer is not None else max(len(layers) - 1, 1)
  if not 1 <= layer <= len(layers):
    raise ValueError(f"word_layer must be in 1..{len(layers)} (layers counted from 1), got {layer}")
  word_queries, word_keys, word_title = KINDS[word_kind]
  index = _pick_word(tokens[word_queries], word)

  os.makedirs(out_dir, exist_ok=True)
  paths = [save_weights(os.path.join(out_dir, NPZ_NAME), checked, source_tokens, target_tokens)]
  for kind, kind_layers in checked.items():
    queries, keys, title = KINDS[kind]
    for i, layer_weights in enumerate(kind_layers):
      figure = plot_heads(layer_weights, tokens[queries], tokens[keys],
                          f"{title}, layer {i + 1} of {len(kind_layers)}")
      paths.append(_save(figure, os.path.join(out_dir, f"{kind}_layer{i + 1}.png")))
  figure = plot_word(layers[layer - 1], tokens[word_queries], tokens[word_keys], index,
                     f"{word_title}, layer {layer} of {len(layers)}")
  paths.append(_save(figure, os.path.join(out_dir, f"{word_kind}_layer{layer}_word{index}.png")))
  return paths


def attention_for_pair(model: keras.Model, vocab, source: str, target: str | None = None,
                       decode_hparams: DecodeHParams | None = None
                       ) -> tuple[dict, list[str], list[str], str]:
  """Teacher-forced attention weights of one sentence pair, with the subword tokens as labels.

  `target` defaults to the model's own translation of `source` (greedy). The EOS appended to both
  sides is labelled `</s>`. Returns (weights, source_tokens, target_tokens, target_text), weights
  as `save_attention` takes them.
  """
  source_ids = list(vocab.encode(source)) + [EOS_ID]
  if target is None:
    target = Translator(model, vocab, decode_hparams or DecodeHParams(beam_size=1)).translate([source])[0]
  target_ids = list(vocab.encode_targets(target)) + [EOS_ID]
  weights = model.attention_weights(np.array([source_ids], np.int32), np.array([target_ids], np.int32))
  label = lambda ids: [t if i != EOS_ID else "</s>" for i, t in zip(ids, vocab.id_to_piece(ids))]
  return ({kind: [np.asarray(w)[0] for w in layers] for kind, layers in weights.items()},
          label(source_ids), label(target_ids), target)
