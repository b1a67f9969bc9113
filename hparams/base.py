"""Hyperparameters: one declared, typed, frozen structure (installed as `t2t_lite.hparams`).

Sets are small functions that derive from a base with `.replace(...)` (see `transformer.py`).
Overrides are parsed against the declared types:

    >>> hp = get_hparams("big,layer_prepostprocess_dropout=0.1")
    >>> hp.hidden_size, hp.layer_prepostprocess_dropout
    (1024, 0.1)
"""

import dataclasses
import difflib
import json

from t2t_lite import registry
from t2t_lite.hparams.model_config import ModelConfig, check, check_rate


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
  # Training (paper section 5).
  label_smoothing: float = 0.1
  optimizer_adam_beta1: float = 0.9
  optimizer_adam_beta2: float = 0.997
  optimizer_adam_epsilon: float = 1e-9
  learning_rate_schedule: str = "rsqrt_decay"  # "noam" | "rsqrt_decay" | "constant"
  learning_rate_constant: float = 2.0
  learning_rate_warmup_steps: int = 8000
  clip_grad_norm: float = 0.0              # 0: no clipping (the paper)
  gradient_accumulation_steps: int = 1     # T2T's optimizer_multistep_accumulate_steps
  mixed_precision: str = "float32"         # "float32" | "mixed_float16" | "mixed_bfloat16"
  xla_compile: bool = False
  seed: int = 1234
  # Evaluation during training.
  eval_bleu_examples: int = 100            # dev pairs decoded for real BLEU at each evaluation

  def validate(self) -> None:
    super().validate()
    check(self.learning_rate_schedule in ("noam", "rsqrt_decay", "constant"),
          "learning_rate_schedule must be one of noam, rsqrt_decay, constant, "
          f"got {self.learning_rate_schedule!r}")
    check(self.mixed_precision in ("float32", "mixed_float16", "mixed_bfloat16"),
          "mixed_precision must be float32, mixed_float16 or mixed_bfloat16, "
          f"got {self.mixed_precision!r}")
    for name in ("batch_size", "gradient_accumulation_steps"):
      check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
    check_rate("label_smoothing", self.label_smoothing)

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
  """Decoding settings (T2T's `--decode_hparams`). Defaults are the paper's (section 6.1)."""
  beam_size: int = 4
  alpha: float = 0.6                       # GNMT length penalty ((5 + len) / 6) ** alpha
  extra_length: int = 50                   # maximum output length = input length + extra_length
  batch_size: int = 32                     # sentences per decoding batch
  return_beams: bool = False               # write all beams, tab separated
  max_input_size: int = 0                  # longer inputs are truncated (with a warning); 0: model limit
  sampling_temperature: float = 0.0        # > 0 with beam_size 1: sample instead of greedy
  top_k: int = 0                           # with sampling: keep the k most likely tokens; 0: all
  seed: int = 1234                         # with sampling: the same seed gives the same samples
  xla: bool = True                         # compile the search loop with XLA (see README: speed)
  constrained: bool = True                 # use the problem's decoding constraint, if it has one

  def replace(self, **changes) -> "DecodeHParams":
    return dataclasses.replace(self, **changes)

  def __post_init__(self):
    check(self.beam_size >= 1, "beam_size must be >= 1")
    check(self.extra_length >= 0, "extra_length must be >= 0")
    check(self.batch_size >= 1, "batch_size must be >= 1")
    check(self.sampling_temperature >= 0, "sampling_temperature must be >= 0")
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
  """Parses `text` as the declared type of `field`."""
  kind = field.type if isinstance(field.type, type) else {"int": int, "float": float,
                                                          "str": str, "bool": bool}[field.type]
  text = text.strip()
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
    return kind(text)
  except ValueError:
    raise ValueError(f"bad hparams override {field.name}={text!r}: expected a {kind.__name__}"
                     + (" (true/false)" if kind is bool else "")) from None


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
    targets = OVERRIDE_ALIASES.get(name, (name,)) if isinstance(hp, HParams) else (name,)
    for target in targets:
      if target not in fields:
        close = difflib.get_close_matches(name, list(fields) + list(OVERRIDE_ALIASES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown hparam {name!r}.{hint} Known: {', '.join(sorted(fields))}.")
      changes[target] = _convert(fields[target], text)
  return hp.replace(**changes)


def get_hparams(spec: str, overrides: str = "") -> HParams:
  """Resolves `"set[,name=value...]"` plus extra `overrides` into an `HParams`.

  `spec` may be a registered set name or alias (`base`, `big`), optionally followed by overrides
  (`big,dropout=0.1`), as on the command line.
  """
  name, _, inline = spec.partition(",")
  hp = registry.hparams_sets.get(name.strip())()
  return hp.parse(inline).parse(overrides)
