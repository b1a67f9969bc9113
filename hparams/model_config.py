"""The model's architecture, declared once: `ModelConfig` (as flax's `TransformerConfig`).

A frozen dataclass of the settings that decide the Transformer's layers and weights. `HParams`
extends it with the data and training settings, so every hparams set is a model config, and
the layers read the very fields that `--hparams` overrides and `hparams.json` name:

    >>> config = ModelConfig(hidden_size=256, filter_size=1024, num_heads=4)
    >>> config.replace(norm_type="post").norm_type          # variants derive with .replace
    'post'
    >>> Transformer(get_hparams("big"), vocab_size=37000)   # an HParams is a ModelConfig

Adding an architecture switch (attention biases, another activation, ...) is one field here,
with its default and its check in `validate`; hparams sets, overrides, hparams.json, the
layers' `get_config()` and Keras serialization all follow from the field.
"""

import dataclasses

NORM_TYPES = ("pre", "post")
# "sinusoid": T2T's `get_timing_signal_1d`, which Marian's C++ also computes: [sin | cos] halves,
# timescales 1..1e4 spaced with `num_timescales - 1`. "sinusoid_paper": the paper's formula,
# sin/cos interleaved at 10000^(2i/d). "sinusoid_paper_halves": the paper's frequencies in
# [sin | cos] halves (Hugging Face's MarianSinusoidalPositionalEmbedding). "learned": Table 3 row E.
POSITION_ENCODINGS = ("sinusoid", "sinusoid_paper", "sinusoid_paper_halves", "learned")
FFN_ACTIVATIONS = ("relu", "swish")
DECODER_STARTS = ("zeros", "pad_embedding")


def check(condition: bool, message: str) -> None:
  """Raises the ValueError of a bad setting (hparams and configs alike) unless `condition`."""
  if not condition:
    raise ValueError(f"bad hparams: {message}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The Transformer's architecture (paper section 3), under T2T's hparams names.

  `attention_key_channels` / `attention_value_channels` of 0 mean `hidden_size`
  (`key_channels` / `value_channels` give the resolved widths).
  """
  hidden_size: int = 512                   # d_model
  filter_size: int = 2048                  # d_ff
  num_heads: int = 8                       # h
  num_encoder_layers: int = 6              # N (encoder)
  num_decoder_layers: int = 6              # N (decoder)
  attention_key_channels: int = 0          # h * d_k; 0 means hidden_size
  attention_value_channels: int = 0        # h * d_v; 0 means hidden_size
  norm_type: str = "pre"                   # "post" (the paper) or "pre" (T2T's later sets)
  layer_norm_epsilon: float = 1e-6
  layer_prepostprocess_dropout: float = 0.1  # residual and embedding dropout (P_drop)
  attention_dropout: float = 0.1
  relu_dropout: float = 0.1
  symbol_dropout: float = 0.0              # T2T's: input tokens (source, target) set to PAD in training
  position_encoding: str = "sinusoid"      # see POSITION_ENCODINGS; "learned": Table 3 row E
  max_position: int = 1024                 # longest position the model can see
  # T2T's embedding sharing: one matrix for the source and target embeddings and the pre-softmax
  # projection (the paper, section 3.4), or, when false, a softmax matrix of its own and
  # source/target embeddings apart unless `shared_embedding`.
  shared_embedding_and_softmax_weights: bool = True
  shared_embedding: bool = False           # with the above false: source and target share one
  # Switches of imported checkpoints (t2t-lite-import); the defaults are T2T's model.
  attention_bias: bool = False             # biases on the Q/K/V and output projections (Marian)
  ffn_activation: str = "relu"             # "relu" (the paper) or "swish" (x * sigmoid(x), Marian)
  logits_bias: bool = False                # a [V] bias added to the pre-softmax projection
  scale_embeddings: bool = True            # embeddings times sqrt(d_model) (paper section 3.4)
  decoder_start: str = "zeros"             # embedding of the start symbol (and of PAD): "zeros"
  #                                          (T2T, Marian) or "pad_embedding" (PAD's table row, HF)
  never_predict_pad: bool = False          # decoding masks PAD's logit (Marian's softmax has no PAD)

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    """Checks every architecture field; a subclass adds its own fields' checks after these."""
    check(self.norm_type in NORM_TYPES,
          f"norm_type must be 'pre' or 'post', got {self.norm_type!r}")
    for name, choices in (("position_encoding", POSITION_ENCODINGS),
                          ("ffn_activation", FFN_ACTIVATIONS), ("decoder_start", DECODER_STARTS)):
      check(getattr(self, name) in choices,
            f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
    for name in ("hidden_size", "filter_size", "num_heads", "num_encoder_layers",
                 "num_decoder_layers", "max_position"):
      value = getattr(self, name)
      check(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            f"{name} must be an int >= 1, got {value!r}")
    for name in ("attention_key_channels", "attention_value_channels"):
      value = getattr(self, name)
      check(isinstance(value, int) and value >= 0, f"{name} must be an int >= 0, got {value!r}")
    for name in ("key_channels", "value_channels"):
      check(getattr(self, name) % self.num_heads == 0,
            f"{name} ({getattr(self, name)}) must be divisible by num_heads ({self.num_heads})")
    for name in ("layer_prepostprocess_dropout", "attention_dropout", "relu_dropout", "symbol_dropout"):
      check_rate(name, getattr(self, name))
    check(self.layer_norm_epsilon > 0,
          f"layer_norm_epsilon must be > 0 (T2T: 1e-6), got {self.layer_norm_epsilon!r}")

  @property
  def key_channels(self) -> int:
    return self.attention_key_channels or self.hidden_size

  @property
  def value_channels(self) -> int:
    return self.attention_value_channels or self.hidden_size

  def replace(self, **changes):
    """A copy with `changes` applied (and checked); the type is kept (an HParams stays one)."""
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def of(cls, config: "ModelConfig | dict") -> "ModelConfig":
    """The architecture part of `config`: a ModelConfig, an HParams, or `to_dict()`'s dict (as a
    layer's `get_config()` stores it)."""
    if isinstance(config, dict):
      return cls(**config)
    if not isinstance(config, ModelConfig):
      raise TypeError(f"expected a ModelConfig (or an HParams, or a ModelConfig's dict); got "
                      f"{type(config).__name__}. Build one with "
                      "t2t_lite.hparams.ModelConfig(hidden_size=..., ...).")
    return cls(**{field.name: getattr(config, field.name) for field in dataclasses.fields(cls)})


def check_rate(name: str, value: float) -> None:
  check(isinstance(value, (int, float)) and 0.0 <= value < 1.0,
        f"{name} must be in [0, 1), got {value!r}")
