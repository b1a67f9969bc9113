"""Translating text with a trained model: batching, the search graph, and the bad-input policy.

The search graph (`make_search_fn`) is one function from padded source ids to output ids and
scores; the decoder command, the trainer's dev BLEU and the exported SavedModel all run it, so
they translate alike.

Input policy (documented in docs/decoding.md):
- an empty (or all-whitespace) line gives an empty output line, without decoding;
- a source longer than the limit (`max_input_size` in decode hparams, 256 subwords by default,
  the training length limit of T2T's sets; <= 0, T2T's -1, means the model's own limit,
  max_position - 1) is truncated to its first limit - 1 subwords plus EOS, with a warning naming
  the line;
- the output length is at most source length + `extra_length` (the paper: 50), capped at the
  model's `max_position`.
"""

import copy
import sys
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from t2t_lite import model_dir
from t2t_lite.data.vocab import strip_ids
from t2t_lite.decoding import beam_search as search_lib
from t2t_lite.decoding import buckets, refill_search, sampling, shrinking, xla_cache
from t2t_lite.hparams import DecodeHParams
from t2t_lite.layers import checks
from t2t_lite.models.ensemble import Ensemble
from t2t_lite.models.transformer import join_cache, split_cache
from t2t_lite.token_ids import EOS_ID, PAD_ID
from t2t_lite.graph_functions import graph_function


def make_search_fn(model, decode_hparams, max_position, constraint=None):
  """Returns `search(source_ids [B, S] int32, seed=None, best_only=False) -> (ids [B, beams, L]
  int32, scores [B, beams])`.

  `beams` is `beam_size` for beam search and 1 for greedy/sampling. Works in tf.function (and
  so inside a SavedModel) with unknown B and S. The output buffers are preallocated (static
  shapes) for S + extra_length positions when the width S is static, else for the longest
  allowed source (`source_limit`) + extra_length; each sentence still stops at its own
  source length + extra_length. The self-attention cache grows in phases (decode hparam
  `cache_phases`, default on: 16, 32, 64, ... positions up to that length, see
  `sampling.cache_phases`), zeros appended between phases (`extend_cache`); off, it is
  preallocated for the longest output at once. The outputs are the same.

  `constraint`: optional, a decoding constraint whose state depends on the source
  (`initial_state(source_ids, decode_lengths)`, e.g. the parsing problems' `TreeConstraint`;
  see `t2t_lite.decoding.constraints`).

  `seed`: sampling's seed (`sampling_temperature` > 0, beam 1) as a scalar integer tensor, so one
  traced (compiled) search serves every seed; None: the decode hparams' `seed`, a constant of
  the graph (the exported SavedModel's). Other searches ignore it.

  `best_only`: a beam search that only the best hypothesis of each sentence is wanted from
  stops a sentence as soon as that one is provably found (`beam_search`'s `best_only`, T2T's rule
  for one beam): a Python bool, or a scalar bool tensor, so that one compiled search serves
  both the best and the n-best. The best ids and score are the same either way.

  Decode hparam `beam_stop`: "exact" (T2T's bound: the results are the full search's), or
  "finished" (a sentence also stops once `beam_size` of its hypotheses have ended: CTranslate2's
  rule, faster, not exact; `beam_search`'s `stop_when_finished`).

  Decode hparam `shrink_batch` > 0: a beam search over a batch of static size runs at fewer rows
  as its sentences end, halving down to that many (`shrinking.run_shrinking`); the same results.
  """
  dh = decode_hparams
  limit = source_limit(dh, max_position)

  def search(source_ids, seed=None, best_only=False):
    source_ids = ops.cast(source_ids, "int32")
    encoder_output, source_mask = model.encode(source_ids, training=False)
    batch = checks.dim(source_ids, 0)
    source_length = ops.sum(ops.cast(source_mask, "int32"), axis=1)                # [B]
    width = source_ids.shape[1] if source_ids.shape[1] is not None else limit
    max_decode_length = output_length(width, dh, max_position)                     # static
    decode_lengths = ops.minimum(source_length + dh.extra_length, max_decode_length)  # [B]
    cache_lengths = phase_lengths(dh, max_decode_length)
    phases = {"cache_lengths": cache_lengths, "extend_cache": extend_cache}
    # The beams of a sentence share one cache (decode hparam `shared_beam_cache`): the source
    # mask and memory keys/values once per sentence, captured by the loop body, and one
    # self-attention cache that only a lineage indexes (`reorder_lineage`); its step 0 runs once
    # per sentence (`first_step_fn`), not once per hypothesis. Without it, the fixed part is
    # tiled once here, and the self-attention cache reordered every step.
    groups, reorder = shared_beams(dh)
    growing, fixed = split_cache(model.init_cache(encoder_output, source_mask, cache_lengths[0],
                                                  groups))
    if dh.beam_size > 1 and not groups:
      fixed = search_lib.tile_to_beams(fixed, dh.beam_size)
    decode = decoding_callback(model)
    symbols_to_logits = lambda ids, step, growing: decode(ids, step, growing, fixed)  # noqa: E731
    constrained = constraint_arguments(constraint, source_ids, decode_lengths)
    if dh.beam_size > 1:
      # A batch that shrinks as its sentences end (decode hparam `shrink_batch`) moves the fixed
      # part with its rows, so the callback gets it as an argument.
      callbacks = ({"symbols_to_logits_fn": decode, "fixed": fixed,
                    "batch_sizes": shrinking.batch_sizes(batch, dh.shrink_batch)}
                   if shrinks(dh) and isinstance(batch, int) else
                   {"symbols_to_logits_fn": symbols_to_logits})
      if groups:
        callbacks["first_step_fn"] = lambda ids, growing: decode(ids, 0, growing, fixed,
                                                                 shared_start=True)
      return search_lib.beam_search(
          initial_cache=growing, batch_size=batch, beam_size=dh.beam_size,
          vocab_size=model.vocab_size, max_decode_length=max_decode_length, alpha=dh.alpha,
          eos_id=EOS_ID, decode_lengths=decode_lengths, **constrained, **phases, **reorder,
          best_only=best_only, stop_when_finished=dh.beam_stop == "finished", **callbacks)
    if dh.sampling_temperature > 0:
      ids, scores = sampling.sampling_search(
          symbols_to_logits, growing, batch, max_decode_length, temperature=dh.sampling_temperature,
          top_k=dh.top_k, seed=dh.seed if seed is None else seed, eos_id=EOS_ID,
          decode_lengths=decode_lengths,
          **constrained, **phases)
    else:
      ids, scores = sampling.greedy_search(symbols_to_logits, growing, batch, max_decode_length,
                                           eos_id=EOS_ID, decode_lengths=decode_lengths,
                                           **constrained, **phases)
    return ops.expand_dims(ids, 1), ops.expand_dims(scores, 1)

  return search


def make_refill_fns(model, decode_hparams, max_position, constraint=None):
  """The search with slots refilled as sentences finish (`refill_search`), as two functions (the
  exported SavedModel's, decode hparam `refill_slots`; see `refills` for when it applies):

  `encode(source_ids [b, w]) -> memory`: each sentence's encoder-decoder keys and values and its
  source mask (`Transformer.memory_cache`, `split_cache`'s fixed part: {"source_mask": [b, w],
  "memory": {"layer_i": {"k", "v": [b, H, w, d]}}}, with a shared beam cache the keys transposed,
  "kt" [b, H, d, w]); a caller encodes sorted sub-batches, each at its own width, and pads them
  to one width (`pad_memory`).

  `search(source_ids [N, W], memory (at width W), num_sentences [], best_only=False) -> (ids
  [N, beams, L], scores [N, beams])`: sentences 0 .. num_sentences - 1 decoded in index order
  through min(refill_slots, N) slots, each sentence's results those of `make_search_fn`'s search
  (the same length limits, output length L for width W, cache phases, constraint and
  `best_only`); the rows after num_sentences (padding) are not decoded. N may be unknown when
  traced; W must be static.

  The cache is laid out as the batch search's (`shared_beams`): with a beam and
  `shared_beam_cache` (the default), a slot's sentence's memory keys/values once per slot, one
  self-attention cache per slot, [slots, H, L * beam, d], and a lineage [slots * beam, L] that
  alone follows the hypotheses; otherwise a copy per hypothesis, gathered with them every step.
  """
  dh = decode_hparams
  if not refills(dh):
    raise ValueError(f"the refill search needs refill_slots >= 1 (got {dh.refill_slots}) and "
                     "decodes greedily or with a beam; sampling (sampling_temperature > 0, beam 1) "
                     "runs the batch search (refill_slots=0)")
  groups, reorder = shared_beams(dh)

  def encode(source_ids):
    return model.memory_cache(*model.encode(ops.cast(source_ids, "int32"), training=False), groups)

  def search(source_ids, memory, num_sentences, best_only=False):
    source_ids = ops.cast(source_ids, "int32")                                      # [N, W]
    width = source_ids.shape[1]
    if width is None:
      raise ValueError("the refill search needs a static source width (a bucket)")
    n = checks.dim(source_ids, 0)
    slots = min(dh.refill_slots, n) if isinstance(n, int) else ops.minimum(n, dh.refill_slots)
    max_decode_length = output_length(width, dh, max_position)                      # static
    source_length = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)  # [N]
    decode_lengths = ops.minimum(source_length + dh.extra_length, max_decode_length)  # [N]
    cache_lengths = phase_lengths(dh, max_decode_length)
    growing = model.init_self_cache(slots, cache_lengths[0], groups)  # zeros [slots, H, L(*g), d]
    constrained = constraint_arguments(constraint, source_ids, decode_lengths)
    return refill_search.refill_search(
        decoding_callback(model), memory, growing, slots, dh.beam_size, model.vocab_size,
        max_decode_length, decode_lengths, num_sentences, alpha=dh.alpha, eos_id=EOS_ID,
        cache_lengths=cache_lengths, extend_cache=extend_cache, **constrained, **reorder,
        best_only=best_only, stop_when_finished=dh.beam_stop == "finished")

  return encode, search


def samples(decode_hparams) -> bool:
  """Whether the search draws its tokens at random (`sampling_temperature` > 0 with beam 1)."""
  return decode_hparams.beam_size <= 1 and decode_hparams.sampling_temperature > 0


def refills(decode_hparams) -> bool:
  """Whether translations go through the refill search (`make_refill_fns`): `refill_slots` > 0,
  and a beam or greedy search (sampling's draws belong to batch rows: it runs the batch search)."""
  return decode_hparams.refill_slots > 0 and not samples(decode_hparams)


def shrinks(decode_hparams) -> bool:
  """Whether a beam search over a batch of known size shrinks it as sentences end (decode
  hparam `shrink_batch` > 0; `shrinking.run_shrinking`). Greedy and sampling never do."""
  return decode_hparams.shrink_batch > 0 and decode_hparams.beam_size > 1


def shared_beams(decode_hparams):
  """How the searches lay out a beam's cache (decode hparam `shared_beam_cache`, beam > 1):
  (g, {"reorder_cache": ...}), the hypotheses of a sentence sharing one cache of groups of g
  (`Transformer.init_cache(..., beam_size=g)`) that only its lineage follows (`reorder_lineage`);
  else (None, {}): a cache per hypothesis, tiled and gathered with the beams (greedy has one
  hypothesis a sentence and so never reorders)."""
  beam_size = decode_hparams.beam_size
  if beam_size > 1 and decode_hparams.shared_beam_cache:
    return beam_size, {"reorder_cache": lambda cache, beams: reorder_lineage(cache, beams, beam_size)}
  return None, {}


def decoding_callback(model):
  """`(ids, step, growing, fixed, **options) -> (logits, growing)`: one `decode_step` on the
  cache split in two (`split_cache`), with the output projection's embedding table computed
  once, here, per search, not once per step (see `output_projection`); `options` are
  `decode_step`'s (e.g. `shared_start=True`)."""
  projection = ({"output_projection": model.output_projection()}
                if hasattr(model, "output_projection") else {})

  def symbols_to_logits(ids, step, growing, fixed, **options):
    logits, cache = model.decode_step(ids, step, join_cache(growing, fixed), **projection,
                                      **options)
    return logits, split_cache(cache)[0]
  return symbols_to_logits


def constraint_arguments(constraint, source_ids, decode_lengths):
  """The searches' `constraint` and `constraint_state` arguments ({} without a constraint)."""
  if constraint is None:
    return {}
  return {"constraint": constraint,
          "constraint_state": constraint.initial_state(source_ids, decode_lengths)}


def phase_lengths(decode_hparams, max_decode_length):
  """The self-attention cache's lengths (decode hparam `cache_phases`; see `make_search_fn`)."""
  if decode_hparams.cache_phases:
    return sampling.cache_phases(max_decode_length)
  return (max_decode_length,)


def pad_memory(memory, width):
  """`make_refill_fns`' encoder memory padded to `width` source positions (masked: the source
  mask False, the keys and values zero)."""
  source_mask = ops.cast(pad_axis(ops.cast(memory["source_mask"], "int32"), 1, width), "bool")
  return {"source_mask": source_mask,
          "memory": {name: {key: pad_axis(t, entries_axis(key), width) for key, t in layer.items()}
                     for name, layer in memory["memory"].items()}}


def entries_axis(key):
  """The axis of the positions (entries) in a cache's keys or values: 3 for transposed keys
  ("kt", [B, H, d, entries]), else 2 ([B, H, entries, d])."""
  return 3 if key == "kt" else 2


def pad_axis(t, axis, size):
  """`t` with zeros appended along `axis` up to `size`."""
  paddings = [(0, 0)] * len(t.shape)
  paddings[axis] = (0, size - checks.dim(t, axis))
  return ops.pad(t, paddings)


def extend_cache(growing, length):
  """The growing cache (`split_cache`'s: self-attention {"k", "v"} [B, H, L, d] per layer; shared
  by the beams, {"kt": [B, H, d, L * beam], "v": [B, H, L * beam, d]} and a lineage
  [B * beam, L]) with zero positions appended up to `length` (shared: `length * beam` entries,
  and the lineage to `length`): the next phase of the search's cache. The causal mask hides
  positions after the step, whatever they hold."""
  groups = 1
  if "lineage" in growing:
    layer = next(part for name, part in growing.items() if name != "lineage")
    groups = layer["v"].shape[2] // growing["lineage"].shape[1]
  return {name: (pad_axis(part, 1, length) if name == "lineage" else
                 {key: pad_axis(t, entries_axis(key), length * groups) for key, t in part.items()})
          for name, part in growing.items()}


def reorder_lineage(growing, source_beams, beam_size):
  """The beam search's `reorder_cache` for a cache the beams share (`split_cache`'s growing part
  of `Transformer.init_cache(..., beam_size=)`): hypothesis j takes the lineage of the one it
  continues, source_beams[b, j]; the keys/values stay in the slots that wrote them."""
  return {**growing,
          "lineage": search_lib.gather_beams(growing["lineage"], source_beams, beam_size)}


def output_length(width, decode_hparams, max_position):
  """The positions a search over sources padded to `width` writes: width + extra_length, capped
  at the model's positions (each sentence still stops at its own source length + extra_length)."""
  return min(width + decode_hparams.extra_length, max_position)


def source_limit(decode_hparams, max_position):
  """The longest source, in subwords including EOS, that the model is given.

  `max_input_size` of the decode hparams (default 256, the training `max_length` of T2T's sets);
  <= 0 (T2T's -1) means no limit but the model's: `max_position - 1`, never exceeded.
  """
  model_limit = max_position - 1
  limit = decode_hparams.max_input_size if decode_hparams.max_input_size > 0 else model_limit
  return max(min(limit, model_limit), 2)


def format_beams(beams: list[tuple[str, float]], write_scores: bool) -> str:
  """One output record: the beams' texts joined by tabs, each followed by a tab and its score
  with `write_scores` (T2T's n-best line: `text\tscore\ttext\tscore`, scores as %.2f)."""
  return "\t".join(text + (f"\t{score:.2f}" if write_scores else "") for text, score in beams)


def encode_sources(vocab, lines, limit, warn=print):
  """Subword ids with EOS for each line (None for an empty line), truncating long ones."""
  encoded = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      encoded.append(None)
      continue
    ids = list(vocab.encode(line))
    if len(ids) + 1 > limit:
      warn(f"warning: line {number} has {len(ids) + 1} subwords (with EOS), more than the limit "
           f"{limit}; translating its first {limit - 1}")
      ids = ids[:limit - 1]
    encoded.append(ids + [EOS_ID])
  return encoded


class Translator:
  """Translates lists of sentences with `model` and `vocab` under `decode_hparams`.

  Lines are sorted by length, batched (`decode_hparams.batch_size` sentences), padded once to a
  bucket of `t2t_lite.decoding.buckets` (source width and batch size) and encoded once per
  batch, then put back in input order.

  Args:
    model: a `Transformer` (outputs stop at its `config.max_position`).
    vocab: its vocabulary (`t2t_lite.data.vocab`: `encode`, `decode`).
    decode_hparams: beam size, length penalty, batch size, ... (`DecodeHParams`).
    warn: called with each input-policy warning (default: print to stderr).
    constraint: optional, a source-dependent decoding constraint (see `make_search_fn`), e.g.
      a parsing problem's `decode_constraint(vocab)`.
    batch_sizes: the padded batch sizes, increasing (a server's `allowed_batch_sizes`); the
      largest is the most sentences per batch. Default: `buckets.batch_buckets(batch_size)`.
  """

  def __init__(self, model: keras.Model, vocab, decode_hparams: DecodeHParams,
               warn: Callable[[str], None] | None = None, constraint=None,
               batch_sizes: tuple[int, ...] | None = None):
    self.model = model
    self.vocab = vocab
    self.decode_hparams = decode_hparams
    self.constraint = constraint
    max_position = model.config.max_position
    self.limit = source_limit(decode_hparams, max_position)
    self.batch_sizes = tuple(batch_sizes or buckets.batch_buckets(decode_hparams.batch_size))
    if list(self.batch_sizes) != sorted(set(self.batch_sizes)) or self.batch_sizes[0] < 1:
      raise ValueError(f"batch_sizes must increase from >= 1, got {list(self.batch_sizes)}")
    self.warn = warn or (lambda message: print(message, file=sys.stderr, flush=True))
    # With XLA, one trace per padded width, the batch left unknown: XLA still compiles one
    # program per (padded batch, padded width), both from a few buckets, but a batch size met at
    # a width already traced costs no new trace (most of a warm start's time, whose programs
    # come from the persistent XLA cache). XLA compiles the whole loop and fuses the small
    # per-step ops, faster than the plain graph (docs/performance.md). One trace per (batch,
    # width) where the batch must be static: a batch that shrinks as its sentences end
    # (`shrinks`) plans its sizes from it, and the plain graph (xla=false) ran slower with it
    # unknown (docs/decoding.md has the figures).
    self._static_batch = shrinks(decode_hparams) or not decode_hparams.xla
    self._search = graph_function(make_search_fn(model, decode_hparams, max_position, constraint),
                                  jit_compile=bool(decode_hparams.xla))
    # Sampling takes its seed as an argument: another seed (`reseeded`) runs the same programs.
    self._seeded = samples(decode_hparams)

  def reseeded(self, seed: int) -> "Translator":
    """This translator sampling with another `seed` (decode_files' later passes): it shares this
    one's traced and compiled searches (the seed is their argument), so it compiles nothing new."""
    again = copy.copy(self)
    again.decode_hparams = self.decode_hparams.replace(seed=seed)
    return again

  @property
  def tracing_count(self) -> int:
    """How many times the search has been traced so far: with XLA once per padded width (per
    (batch, width) shape when the batch shrinks, and without XLA); XLA compiles each (batch,
    width) shape it meets."""
    return self._search.experimental_get_tracing_count()

  def batch_shape(self, sentences: int, longest: int) -> tuple[int, int]:
    """The (rows, width) a batch of `sentences` sources, the longest of `longest` subwords
    (EOS included), is padded to."""
    return (buckets.padded_size(sentences, self.batch_sizes),
            buckets.padded_width(longest, self.limit))

  def _run(self, rows: int, width: int, sources: list[list[int]], best_only: bool = False):
    """The search over `sources` padded to [rows, width]: (ids, scores) numpy, one row each;
    `best_only`: only the best beam is wanted (the search stops sooner; `make_search_fn`)."""
    batch = np.full((rows, width), PAD_ID, np.int32)
    batch[len(sources):, 0] = EOS_ID  # filler rows up to the padded batch; results dropped
    for row, source in enumerate(sources):
      batch[row, :len(source)] = source
    # A new trace (a new width, or shape when the batch is static) is traced under names that do
    # not depend on what the process traced before, so that a compiled program kept in the
    # persistent XLA cache is found by the next run whatever order it meets the shapes in
    # (`xla_cache.stable_names`); what was traced before is found in tf.function's cache, which
    # takes no names.
    seed = (tf.constant(self.decode_hparams.seed, tf.int64),) if self._seeded else ()
    # `best_only` is an argument of the program, not a constant: one program serves both.
    traced_rows = rows if self._static_batch else None
    with xla_cache.stable_names(f"t2t_lite search {traced_rows or 'any'}x{width}"):
      self._search.get_concrete_function(tf.TensorSpec((traced_rows, width), tf.int32),
                                         *(tf.TensorSpec((), tf.int64) for _ in seed),
                                         best_only=tf.TensorSpec((), tf.bool))
    ids, scores = self._search(tf.constant(batch), *seed, best_only=tf.constant(best_only))
    return ids.numpy()[:len(sources)], scores.numpy()[:len(sources)]

  def translate_ids(self, sources: list[list[int] | None],
                    best_only: bool = False) -> list[list[tuple[list[int], float]]]:
    """`sources`: list of id lists (or None). Returns per line a list of (ids, score) beams, best
    first; with `best_only` only the first is final (the search stops once it is found; the
    others are what it held then)."""
    order = sorted((i for i, s in enumerate(sources) if s), key=lambda i: len(sources[i]))
    results = [[] for _ in sources]
    size = self.batch_sizes[-1]
    for start in range(0, len(order), size):
      chunk = order[start:start + size]
      rows, width = self.batch_shape(len(chunk), max(len(sources[i]) for i in chunk))
      ids, scores = self._run(rows, width, [sources[i] for i in chunk], best_only)
      for row, i in enumerate(chunk):
        results[i] = [(strip_ids(ids[row, b]), float(scores[row, b])) for b in range(ids.shape[1])]
    return results

  def warm_up(self, max_width: int, log: Callable[[str], None] = print) -> list[tuple[int, int]]:
    """Traces (and with XLA compiles) the search for every padded batch size and every width
    bucket up to `max_width` (capped at the source limit), logging each; returns the shapes.

    Each runs once on filler sources (EOS only), so later batches of those shapes start at once.
    """
    widths = [w for w in buckets.width_buckets(self.limit) if w <= max_width]
    return buckets.warm_up(self.batch_sizes, widths, lambda rows, width: self._run(rows, width, []),
                           log)

  def translate_beams(self, lines: list[str], best_only: bool = False) -> list[list[tuple[str, float]]]:
    """Every line's hypotheses as (text, score), best first: `num_beams` of them; none for an
    empty line, which is not decoded. `best_only`: as `translate_ids`."""
    beams = self.translate_ids(encode_sources(self.vocab, lines, self.limit, self.warn), best_only)
    return [[(self.vocab.decode(ids), score) for ids, score in line_beams]
            for line_beams in beams]

  def translate(self, lines: list[str], return_beams: bool | None = None) -> list[str]:
    """Translations of `lines`: one string per line; with return_beams every beam, tab
    separated; with the decode hparams' write_beam_scores each followed by its score. An empty
    line gives an empty string. Without return_beams the search stops each sentence once its
    best hypothesis is found (`best_only`)."""
    return_beams = self.decode_hparams.return_beams if return_beams is None else return_beams
    return [format_beams(beams if return_beams else beams[:1],
                         self.decode_hparams.write_beam_scores)
            for beams in self.translate_beams(lines, best_only=not return_beams)]


def load_translator(output_dir: str, decode_hparams: DecodeHParams,
                    checkpoint_path: str | None = None,
                    batch_sizes: tuple[int, ...] | None = None,
                    ensemble: tuple[str, ...] = ()) -> tuple[Translator, str]:
  """A Translator of the model in `output_dir` (latest checkpoint, or `checkpoint_path`), its
  vocabulary and its problem's decoding constraint (unless `decode_hparams.constrained` is
  false), padding batches to `batch_sizes` (see `Translator`). Returns (translator, checkpoint
  path; with an ensemble, every member's, joined by " + ").

  `ensemble`: more model directories, each decoded with its latest checkpoint together with this
  model (`t2t_lite.models.ensemble.Ensemble`: their next-token probabilities averaged); they must
  have this model's vocabulary."""
  _, model, path = model_dir.restore_model(output_dir, checkpoint_path)
  vocab = model_dir.load_vocab(output_dir)
  if ensemble:
    members = [model]
    for other in ensemble:
      if model_dir.load_vocab(other).model_proto != vocab.model_proto:
        raise model_dir.ModelDirError(
            f"{other} has another vocabulary than {output_dir}: an ensemble's models must share "
            "one (train them on the same problem and data_dir)")
      _, member, member_path = model_dir.restore_model(other)
      members.append(member)
      path += f" + {member_path}"
    model = Ensemble(members)
  constraint = model_dir.decode_constraint(output_dir, vocab, decode_hparams)
  return Translator(model, vocab, decode_hparams, constraint=constraint,
                    batch_sizes=batch_sizes), path
