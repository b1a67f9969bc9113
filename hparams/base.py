"""Hyperparameters: one declared, typed, frozen structure (installed as `t2t_lite.hparams`).

Sets are small functions that derive from a base with `.replace(...)` (see `transformer.py`).
Overrides are parsed against the declared types:

    >>> hp = get_hparams("big,layer_prepostprocess_dropout=0.1")
    >>> hp.hidden_size, hp.layer_prepostprocess_dropout
    (1024, 0.1)
"""

import codecs
import dataclasses
import difflib
import json
import logging
import types

from t2t_lite import registry
from t2t_lite.hparams import t2t_names
from t2t_lite.hparams.model_config import ModelConfig, check, check_rate

logger = logging.getLogger(__name__)

# T2T's learning-rate schedule is a product of named factors (utils/learning_rate.py), e.g.
# "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"; t2t_lite.training.schedule computes
# these. "noam" alone is the paper's formula times learning_rate_constant.
LEARNING_RATE_FACTORS = ("constant", "linear_warmup", "rsqrt_decay", "rsqrt_normalized_decay",
                         "rsqrt_hidden_size", "legacy", "linear_decay", "cosdecay")
OPTIMIZERS = ("adam", "adafactor")
MIXED_PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
# The value of `mixed_precision` and `xla_compile` that leaves the choice to the machine: the
# trainer resolves it at start-up from the CPU's features (`t2t_lite.fast_path`, which says why).
AUTO = "auto"
T2T_FACTORS_NOT_HERE = ("single_cycle_cos_decay", "multi_cycle_cos_decay", "exp_decay")


def schedule_factors(schedule: str) -> list[str]:
  """The factors of a schedule string: "constant*linear_warmup" -> ["constant", "linear_warmup"].

  Raises:
    ValueError: an unknown factor, or "noam" inside a product.
  """
  factors = [name.strip() for name in schedule.split("*") if name.strip()]
  if factors == ["noam"]:
    return factors
  for name in factors:
    if name in T2T_FACTORS_NOT_HERE:
      raise ValueError(f"bad hparams: T2T's learning-rate factor {name!r} has no counterpart in "
                       f"t2t_lite; use a product of {', '.join(LEARNING_RATE_FACTORS)} (or noam)")
    check(name in LEARNING_RATE_FACTORS,
          f"learning_rate_schedule {schedule!r}: unknown factor {name!r}; use a product of "
          f"{', '.join(LEARNING_RATE_FACTORS)} joined by '*' (T2T's form), or noam")
  check(bool(factors), "learning_rate_schedule is empty")
  return factors


@dataclasses.dataclass(frozen=True)
class HParams(ModelConfig):
  """Everything a model and its training need; decoding has its own `DecodeHParams`.

  The model's architecture is `ModelConfig`'s fields (declared there, first in this class);
  these are the data, training and evaluation settings. `batch_size` counts tokens per replica,
  as in T2T: a batch of B pairs padded to length L uses B * L tokens where
  L = max(len(inputs), len(targets)) including padding.
  """
  # Data and batching.
  batch_size: int = 4096                   # tokens per replica (T2T: per GPU)
  max_length: int = 256                    # training pairs longer than this are dropped; 0: none
  length_bucket_step: float = 1.1          # geometric spacing of length buckets
  static_batch_shapes: bool = False        # pad every batch to max_length (TPU)
  use_fixed_batch_size: bool = False       # T2T: batch_size counts pairs (no length buckets)
  max_input_seq_length: int = 0            # T2T: inputs (with EOS) cut to this length; <= 0: never
  max_target_seq_length: int = 0           # T2T: targets (with EOS) cut to this length; <= 0: never
  # > 0: the training split's sentences are segmented anew each time they are read, sampled by
  # SentencePiece with this alpha (subword regularization, Kudo 2018; with a BPE model such as
  # t2t_lite's own, BPE-dropout, Provilkov et al. 2020: each merge skipped with probability alpha,
  # e.g. 0.1); evaluation and decoding keep the one best segmentation. 0: off (T2T).
  subword_sampling_alpha: float = 0.0
  # Training (paper section 5).
  label_smoothing: float = 0.1
  optimizer_adam_beta1: float = 0.9
  optimizer_adam_beta2: float = 0.997
  optimizer_adam_epsilon: float = 1e-9
  # A product of LEARNING_RATE_FACTORS (T2T's spelling), or "noam" (see schedule_factors).
  learning_rate_schedule: str = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"
  learning_rate_constant: float = 2.0
  learning_rate_warmup_steps: int = 8000
  # The length of linear_decay's ramp to 0 at the end of the run (it ends at the trainer's
  # train_steps) and cosdecay's period; T2T's default (basic_params1).
  learning_rate_decay_steps: int = 5000
  learning_rate: float = 0.2               # T2T's legacy factor: only the "legacy" schedule uses it
  clip_grad_norm: float = 0.0              # 0: no clipping (the paper)
  # T2T's L2 term: weight_decay * sum(||w||^2 / 2) over the weights, biases aside (1-D variables
  # named *bias*, and layer norms' beta), added to the training loss; each update's gradient
  # gains weight_decay * w before the clipping (L2 through the optimizer, not AdamW's decoupled
  # decay). 0: off (T2T's transformer sets; its basic_params1 has 1e-6).
  weight_decay: float = 0.0
  # > 0: R-Drop (Liang et al., 2021): each micro-batch goes through the model twice (two dropout
  # masks, the batch's pairs repeated), and the loss gains rdrop_alpha / 2 times the symmetric
  # KL divergence of the two predicted distributions at each target token: per token,
  # CE_1 + CE_2 + alpha / 2 * (KL(p_1 || p_2) + KL(p_2 || p_1)), averaged over both copies'
  # tokens. A regularizer for small data; a step computes twice the batch. 0: off (T2T has none).
  rdrop_alpha: float = 0.0
  optimizer: str = "adam"                  # "adam" or "adafactor" (T2T's, with its defaults)
  gradient_accumulation_steps: int = 1     # T2T's optimizer_multistep_accumulate_steps
  # MIXED_PRECISIONS, or AUTO: the fastest that trains as well on this machine (t2t_lite.fast_path)
  mixed_precision: str = dataclasses.field(default="float32", metadata={"auto": True})
  # true: each replica's forward and backward pass compiled with XLA; or AUTO, as above
  xla_compile: bool | str = dataclasses.field(default=False, metadata={"auto": True})
  seed: int = 1234
  # > 0: keep an exponential moving average of the weights, average = d * average + (1 - d) *
  # weights after each update (from the weights the run starts with); saved with the checkpoint
  # and used for evaluation, decoding and export. 0: off. E.g. 0.9999 (OpenNMT-tf's default).
  weight_ema_decay: float = 0.0
  # Evaluation during training.
  eval_bleu_examples: int = 100            # dev pairs decoded for real BLEU at each evaluation

  def validate(self) -> None:
    super().validate()
    schedule_factors(self.learning_rate_schedule)
    check(self.learning_rate_decay_steps >= 1,
          f"learning_rate_decay_steps must be >= 1, got {self.learning_rate_decay_steps}")
    check(self.optimizer in OPTIMIZERS,
          f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
    check(self.mixed_precision in MIXED_PRECISIONS + (AUTO,),
          f"mixed_precision must be {', '.join(MIXED_PRECISIONS)} or {AUTO} (the machine's fast "
          f"path), got {self.mixed_precision!r}")
    check(isinstance(self.xla_compile, bool) or self.xla_compile == AUTO,
          f"xla_compile must be true, false or {AUTO} (the machine's fast path), got "
          f"{self.xla_compile!r}")
    for name in ("batch_size", "gradient_accumulation_steps"):
      check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
    check_rate("label_smoothing", self.label_smoothing)
    check_rate("subword_sampling_alpha", self.subword_sampling_alpha)
    check(self.weight_decay >= 0.0, f"weight_decay must be >= 0 (0: off), got {self.weight_decay}")
    check(self.rdrop_alpha >= 0.0, f"rdrop_alpha must be >= 0 (0: off), got {self.rdrop_alpha}")
    check(0.0 <= self.weight_ema_decay < 1.0,
          f"weight_ema_decay must be in [0, 1) (0: off), got {self.weight_ema_decay}")

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "HParams":
    values = json.loads(text)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"hparams JSON has unknown fields {unknown}; known fields: {sorted(known)}")
    return cls(**values)

  def parse(self, overrides: str) -> "HParams":
    """Returns a copy with `name=value,...` applied; types come from the declared fields."""
    return _parse_overrides(self, overrides)


@dataclasses.dataclass(frozen=True)
class DecodeHParams:
  """Decoding settings (T2T's `--decode_hparams`, utils/decoding.py), with T2T's defaults.

  The paper (section 6.1) decodes with beam 4, alpha 0.6 and an output of at most input + 50;
  T2T's default extra length, and so this one, is 100 (the recipes pass 50).
  """
  beam_size: int = 4
  alpha: float = 0.6                       # GNMT length penalty ((5 + len) / 6) ** alpha
  extra_length: int = 100                  # maximum output length = input length + extra_length
  batch_size: int = 32                     # sentences per decoding batch
  return_beams: bool = False               # write all beams, tab separated
  write_beam_scores: bool = False          # each output (each beam) followed by a tab and its score
  # Longer inputs (in subwords, EOS included) are truncated with a warning; <= 0 (T2T's -1): no
  # limit but the model's own (max_position - 1).
  max_input_size: int = 256
  num_samples: int = -1                    # decode only the first N inputs; <= 0: all (T2T)
  num_decodes: int = 1                     # decode the whole input N times, one pass after another
  # Separates the input records and ends each output record (T2T); "\n", "\t" escapes work.
  delimiter: str = dataclasses.field(default="\n", metadata={"escapes": True})
  sampling_temperature: float = 0.0        # > 0 with beam_size 1: sample instead of greedy
  top_k: int = 0                           # with sampling: keep the k most likely tokens; 0: all
  seed: int = 1234                         # with sampling: the same seed gives the same samples
  xla: bool = True                         # compile the search loop with XLA (see docs/performance.md)
  # Grow the self-attention cache in phases of 16, 32, 64, ... positions (the same outputs, the
  # early steps faster; see docs/performance.md); false: one cache for the longest output.
  cache_phases: bool = True
  # Beam search: the beams of a sentence share one self-attention cache (each writes its own slot;
  # a small lineage, not the cache, follows the beams) and one copy of the encoder's keys/values
  # (the same outputs, less memory traffic; see docs/performance.md); false: both tiled to every
  # hypothesis and the cache reordered with the beams every step.
  shared_beam_cache: bool = True
  constrained: bool = True                 # use the problem's decoding constraint, if it has one
  # The exported SavedModel sorts each request's sentences by source length and runs the search
  # on sub-batches of this many consecutive ones (a power of two: one of the batch buckets), each
  # padded to its own width, so a short sentence does not wait for the request's longest (the
  # decoder sorts its whole input; see docs/export.md). <= 0: the whole request as one batch.
  # 32, the decoder's batch: on the base model's SavedModel and 64 Multi30k test lines (one
  # file-order request, beam 4), 16 and 32 took about the same process CPU time, both below one
  # batch (2026-11-25, one process, not timed alone); 32 keeps larger batches for requests of like lengths.
  sub_batch_size: int = 32
  # > 0: the exported SavedModel decodes each request through this many slots, each taking the
  # request's next sentence (longest source first) as soon as its own is done, instead of sorted
  # sub-batches (`sub_batch_size` then only sizes the sub-batches the sources are encoded in;
  # docs/export.md). The same outputs. Off by default: on 2 file-order requests of 64 Multi30k
  # test lines (beam 4, a d-256 model after 80 updates), 32 slots took 3.6-3.7 s of process CPU
  # time against 2.8 s for sub-batches of 32 (2026-11-27, shared 2-core machine, untimed).
  # Sampling (sampling_temperature > 0) always runs sub-batches.
  refill_slots: int = 0
  # When a beam search stops a sentence: "exact", T2T's bound (once no alive hypothesis can beat
  # the finished ones, even at the longest allowed length: the full search's results), or
  # "finished", also once beam_size of its hypotheses have ended among their step's beam_size best
  # candidates (CTranslate2's rule with a length penalty): fewer steps, most at large alpha, and
  # results that may differ.
  beam_stop: str = "exact"
  # > 0: a beam search over a batch runs at fewer rows as its sentences end: once no more
  # sentences are running than half its rows hold, the running ones move to the front and the
  # loop goes on over those rows only, halving down to this many (`shrinking.run_shrinking`).
  # The same outputs. 0: every step over the whole batch. The decoder's and the server's
  # batches (a batch size known when the search is traced); not yet the exported SavedModel's,
  # whose search is traced for any batch (docs/export.md); never greedy or sampling.
  shrink_batch: int = 0

  def replace(self, **changes) -> "DecodeHParams":
    return dataclasses.replace(self, **changes)

  def __post_init__(self):
    check(self.beam_size >= 1, "beam_size must be >= 1")
    check(self.extra_length >= 0, "extra_length must be >= 0")
    check(self.batch_size >= 1, "batch_size must be >= 1")
    check(self.num_decodes >= 1, "num_decodes must be >= 1")
    check(self.sub_batch_size <= 0 or self.sub_batch_size & (self.sub_batch_size - 1) == 0,
          f"sub_batch_size must be a power of two (a padded batch size: 8, 16, 32, ...) or <= 0 "
          f"(off: each request one batch), got {self.sub_batch_size}")
    check(bool(self.delimiter), "delimiter must not be empty")
    check(self.sampling_temperature >= 0, "sampling_temperature must be >= 0")
    check(self.beam_stop in ("exact", "finished"),
          f"beam_stop must be 'exact' (T2T's bound) or 'finished' (stop once beam_size "
          f"hypotheses have ended), got {self.beam_stop!r}")
    check(self.shrink_batch >= 0, f"shrink_batch must be >= 0 (0: off), got {self.shrink_batch}")
    check(not (self.sampling_temperature > 0 and self.beam_size > 1),
          "sampling (sampling_temperature > 0) needs beam_size=1")

  def parse(self, overrides: str) -> "DecodeHParams":
    return _parse_overrides(self, overrides)

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


# Short names a user may type; each maps to one or more declared fields.
OVERRIDE_ALIASES = {
    "dropout": ("layer_prepostprocess_dropout",),
    "d_model": ("hidden_size",),
    "d_ff": ("filter_size",),
    "num_hidden_layers": ("num_encoder_layers", "num_decoder_layers"),
    "warmup_steps": ("learning_rate_warmup_steps",),
    "optimizer_multistep_accumulate_steps": ("gradient_accumulation_steps",),
}


def _convert(field, text):
  """Parses `text` as the declared type of `field` (its first type: `bool | str` is a bool), or
  as AUTO where the field takes it."""
  kind = field.type.__args__[0] if isinstance(field.type, types.UnionType) else field.type
  kind = kind if isinstance(kind, type) else {"int": int, "float": float, "str": str,
                                              "bool": bool}[kind]
  text = text.strip()
  auto = field.metadata.get("auto")
  if auto and text.lower() == AUTO:
    return AUTO
  try:
    if kind is bool:
      lowered = text.lower()
      if lowered in ("true", "1", "yes"):
        return True
      if lowered in ("false", "0", "no"):
        return False
      raise ValueError
    if kind is int:
      value = float(text)  # accepts 4e3
      if value != int(value):
        raise ValueError
      return int(value)
    if field.metadata.get("escapes"):
      return codecs.decode(text, "unicode_escape")  # "\\t" -> a tab
    return kind(text)
  except ValueError:
    raise ValueError(f"bad hparams override {field.name}={text!r}: expected a {kind.__name__}"
                     + (" (true/false)" if kind is bool else "")
                     + (f" or {AUTO}" if auto else "")) from None


def _targets(hp, fields, name, text):
  """{field: value text} that the override `name=text` sets: a field, one of our short names
  (OVERRIDE_ALIASES) or a T2T name (`t2t_names`; a declared field always wins)."""
  decode = not isinstance(hp, HParams)
  if name in fields:
    value = t2t_names.our_value(name, text)
    return {} if value is None else {name: value}
  if not decode and name in OVERRIDE_ALIASES:
    return {target: text for target in OVERRIDE_ALIASES[name]}
  translated = t2t_names.translate(name, text, decode)
  if translated is not None:
    return translated
  known = list(fields) + ([] if decode else list(OVERRIDE_ALIASES))
  close = difflib.get_close_matches(name, known, n=1)
  hint = f" Did you mean {close[0]!r}?" if close else ""
  raise ValueError(f"unknown hparam {name!r}.{hint} Known: {', '.join(sorted(fields))}.")


def _parse_overrides(hp, overrides):
  if not overrides:
    return hp
  fields = {f.name: f for f in dataclasses.fields(hp)}
  changes = {}
  for item in overrides.split(","):
    item = item.strip()
    if not item:
      continue
    if "=" not in item:
      raise ValueError(f"bad hparams override {item!r}: expected name=value (e.g. dropout=0.1)")
    name, text = (s.strip() for s in item.split("=", 1))
    for target, value in _targets(hp, fields, name, text).items():
      changes[target] = _convert(fields[target], value)
  result = hp.replace(**changes)
  if "learning_rate" in changes and "legacy" not in schedule_factors(result.learning_rate_schedule):
    logger.warning("learning_rate=%s has no effect: it is T2T's legacy factor, which schedule %r "
                   "ignores (as T2T does); set learning_rate_constant instead",
                   result.learning_rate, result.learning_rate_schedule)
  return result


def get_hparams(spec: str, overrides: str = "") -> HParams:
  """Resolves `"set[,name=value...]"` plus extra `overrides` into an `HParams`.

  `spec` may be a registered set name or alias (`base`, `big`), optionally followed by overrides
  (`big,dropout=0.1`), as on the command line.
  """
  name, _, inline = spec.partition(",")
  hp = registry.hparams_sets.get(name.strip())()
  return hp.parse(inline).parse(overrides)
