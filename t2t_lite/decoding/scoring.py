"""Scoring given translations (T2T's `--score_file`): forced decoding, for reranking and filtering.

Each pair's score is the score the beam search gives that target as a finished hypothesis:

    log P(target ids + EOS | source) / ((5 + len) / 6) ** alpha      len: target ids + EOS

from one teacher-forced pass of the model (`alpha=0`: the plain log-probability). So a beam's
output, scored here, gets the score the decoder wrote for it (`write_beam_scores`), provided
its text tokenizes back to the same subwords (a search may, rarely, write a segmentation that
is not the tokenizer's own). T2T's own `--score_file` writes the training loss of each pair
instead (label-smoothed mean cross entropy); a log-probability is what reranking needs.

Input lines are `source<TAB>target`; sources follow the decoder's input policy (truncated to
`max_input_size` with a warning).
"""

import numpy as np
import tensorflow as tf

from t2t_lite.decoding.beam_search import length_penalty
from t2t_lite.decoding.translator import encode_sources, source_limit
from t2t_lite.graph_functions import graph_function
from t2t_lite.token_ids import EOS_ID, PAD_ID

# Scoring pads each batch's sources and targets to multiples of this (a few traces; the search
# pads to `buckets` instead).
WIDTH_STEP = 8


def _padded(rows, width):
  batch = np.full((len(rows), width), PAD_ID, np.int32)
  for row, ids in enumerate(rows):
    batch[row, :len(ids)] = ids
  return batch


class Scorer:
  """Scores (source ids, target ids) pairs with `model` (a Transformer, or anything called as
  `model({"inputs", "targets"}, training=False) -> logits`) in batches of `batch_size` pairs,
  sorted by length and padded to multiples of WIDTH_STEP, one trace per padded shape."""

  def __init__(self, model, alpha: float, batch_size: int = 32):
    self.model, self.alpha, self.batch_size = model, alpha, batch_size
    self._log_probs = graph_function(self._target_log_probs, reduce_retracing=True)

  def _target_log_probs(self, inputs, targets):
    logits = self.model({"inputs": inputs, "targets": targets}, training=False)      # [B, T, V]
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)               # [B, T, V]
    picked = tf.gather(log_probs, targets, batch_dims=2)                             # [B, T]
    return tf.reduce_sum(tf.where(targets != PAD_ID, picked, 0.0), axis=1)           # [B]

  def score_ids(self, sources: list[list[int]], targets: list[list[int]]) -> list[float]:
    """Scores of each pair; sources end with EOS, targets are given without it."""
    if len(sources) != len(targets):
      raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    targets = [list(t) + [EOS_ID] for t in targets]
    order = sorted(range(len(sources)), key=lambda i: max(len(sources[i]), len(targets[i])))
    scores = [0.0] * len(sources)
    for start in range(0, len(order), self.batch_size):
      chunk = order[start:start + self.batch_size]
      widths = [-(-max(len(rows[i]) for i in chunk) // WIDTH_STEP) * WIDTH_STEP
                for rows in (sources, targets)]
      totals = self._log_probs(tf.constant(_padded([sources[i] for i in chunk], widths[0])),
                               tf.constant(_padded([targets[i] for i in chunk], widths[1])))
      penalties = length_penalty(np.array([len(targets[i]) for i in chunk]), self.alpha)
      for i, total, penalty in zip(chunk, totals.numpy(), np.asarray(penalties)):
        scores[i] = float(total / penalty)
    return scores


def split_pairs(lines: list[str]) -> list[tuple[str, str]]:
  """`source<TAB>target` lines -> pairs.

  Raises:
    ValueError: a line without exactly one tab, naming it.
  """
  pairs = []
  for number, line in enumerate(lines, 1):
    fields = line.split("\t")
    if len(fields) != 2:
      raise ValueError(f"--score_file line {number} has {len(fields) - 1} tabs; each line must be "
                       "source<TAB>target (T2T's format)")
    pairs.append((fields[0].strip(), fields[1].strip()))
  return pairs


def score_lines(model, vocab, decode_hparams, lines: list[str], warn=print) -> list[float]:
  """The score (see the module docstring) of each `source<TAB>target` line, with the decode
  hparams' alpha, batch_size and max_input_size."""
  pairs = split_pairs(lines)
  limit = source_limit(decode_hparams, model.config.max_position)
  sources = [ids or [EOS_ID] for ids in encode_sources(vocab, [s for s, _ in pairs], limit, warn)]
  targets = [list(vocab.encode(t)) for _, t in pairs]
  for number, ids in enumerate(targets, 1):
    if len(ids) + 1 > model.config.max_position:
      raise ValueError(f"--score_file line {number}: the target has {len(ids) + 1} subwords with "
                       f"EOS, more than the model's {model.config.max_position} positions")
  return Scorer(model, decode_hparams.alpha, decode_hparams.batch_size).score_ids(sources, targets)
