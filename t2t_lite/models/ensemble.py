"""Several trained Transformers decoded as one: their next-token probabilities averaged.

An ensemble of independently trained models is the usual last step of a neural translation
system (the WMT submissions since 2016; the paper reports single models). `Ensemble` offers the
searches of `t2t_lite.decoding` the interface they take from a `Transformer` (`encode`,
`init_cache`, `init_self_cache`, `memory_cache`, `decode_step`, `output_projection`,
`vocab_size`, `config`), so greedy and beam search, the cache the beams share, cache phases and
XLA compilation run over it unchanged (the translator's searches; exports take one model).

Each step runs every member on its own part of the cache and returns
`log(mean_i softmax(logits_i))`, the log of the members' averaged probabilities (normalized
already: the searches' log-softmax leaves it as it is, up to rounding). The members must share
the vocabulary (and so the source and target ids); their architectures may differ.

Cache layout: `Transformer.init_cache`'s, the decoder's per-layer entries of member i named
`member_i.layer_j`; the source mask (the same for every member: the same ids) and a shared beam
cache's lineage (the same for every member: it follows the hypotheses) are kept once.
"""

import math

from keras import ops

from t2t_lite.models.transformer import join_cache

_PREFIX = "member_{}."


def _prefixed(index, tree):
  return {_PREFIX.format(index) + name: value for name, value in tree.items()}


def _member_part(index, tree):
  prefix = _PREFIX.format(index)
  return {name[len(prefix):]: value for name, value in tree.items() if name.startswith(prefix)}


class Ensemble:
  """Decodes `members` (two or more `Transformer`s with one vocabulary) as one model.

  Args:
    members: the models, built and restored.

  Example:
  >>> ensemble = Ensemble([model_a, model_b])
  >>> translator = Translator(ensemble, vocab, DecodeHParams(beam_size=4, alpha=1.2))
  """

  def __init__(self, members):
    members = tuple(members)
    if len(members) < 2:
      raise ValueError(f"an ensemble needs at least 2 models, got {len(members)}")
    sizes = sorted({m.vocab_size for m in members})
    if len(sizes) > 1:
      raise ValueError(f"the models of an ensemble must share one vocabulary; their vocabulary "
                       f"sizes differ: {sizes}")
    self.members = members
    self.vocab_size = members[0].vocab_size
    # Outputs stop where the shortest position range of the members does.
    self.config = members[0].config.replace(
        max_position=min(m.config.max_position for m in members))

  def encode(self, source_ids, training=False):
    """source ids [B, S] -> (a tuple of each member's encoder output [B, S, d_i], source mask)."""
    encoded = [m.encode(source_ids, training=training) for m in self.members]
    return tuple(memory for memory, _ in encoded), encoded[0][1]

  def init_cache(self, encoder_output, source_mask, max_length, beam_size=None):
    """`Transformer.init_cache` for every member, in one dict (the module's layout)."""
    return join_cache(self.init_self_cache(ops.shape(source_mask)[0], max_length, beam_size),
                      self.memory_cache(encoder_output, source_mask, beam_size))

  def init_self_cache(self, batch_size, max_length, beam_size=None):
    growing = {}
    for index, member in enumerate(self.members):
      part = member.init_self_cache(batch_size, max_length, beam_size)
      lineage = part.pop("lineage", None)
      growing.update(_prefixed(index, part))
      if lineage is not None:
        growing["lineage"] = lineage
    return growing

  def memory_cache(self, encoder_output, source_mask, beam_size=None):
    memory = {}
    for index, (member, output) in enumerate(zip(self.members, encoder_output)):
      part = member.memory_cache(output, source_mask, beam_size)
      memory.update(_prefixed(index, part["memory"]))
      source_mask = part["source_mask"]
    return {"source_mask": source_mask, "memory": memory}

  def output_projection(self):
    """Each member's output projection table (a search computes them once)."""
    return tuple(m.output_projection() for m in self.members)

  def _member_cache(self, index, cache):
    part = {"source_mask": cache["source_mask"], "decoder": _member_part(index, cache["decoder"])}
    if "lineage" in cache:
      part["lineage"] = cache["lineage"]
    return part

  def decode_step(self, token_ids, step, cache, training=False, output_projection=None,
                  shared_start=False):
    """`Transformer.decode_step` of every member on its part of `cache`: (float32 [B, V], the
    log of the members' averaged next-token probabilities; the updated cache)."""
    log_probs, decoder, lineage = [], {}, None
    for index, member in enumerate(self.members):
      table = None if output_projection is None else output_projection[index]
      logits, part = member.decode_step(token_ids, step, self._member_cache(index, cache),
                                        training=training, output_projection=table,
                                        shared_start=shared_start)
      log_probs.append(ops.log_softmax(ops.cast(logits, "float32"), axis=-1))
      decoder.update(_prefixed(index, part["decoder"]))
      lineage = part.get("lineage", lineage)
    averaged = (ops.logsumexp(ops.stack(log_probs), axis=0)
                - math.log(len(self.members)))                                   # [B, V]
    new_cache = {"source_mask": cache["source_mask"], "decoder": decoder}
    if lineage is not None:
      new_cache["lineage"] = lineage
    return averaged, new_cache
