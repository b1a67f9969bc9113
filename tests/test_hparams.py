"""Registry and hparams: names, aliases, typed overrides, JSON round trip, clear errors."""

import dataclasses

import pytest

from t2t_lite import registry
from t2t_lite.hparams import AUTO, DecodeHParams, HParams, get_hparams
from t2t_lite.hparams.transformer import TABLE3_ROWS


def test_registry_duplicate_and_unknown_names():
  reg = registry.Registry("thing")

  @reg.register
  def my_thing():
    return 1

  assert reg.get("my_thing")() == 1
  with pytest.raises(registry.RegistryError, match="already registered"):
    reg.register(my_thing)
  with pytest.raises(registry.RegistryError) as err:
    reg.get("my_thnig")
  assert "Did you mean 'my_thing'" in str(err.value) and "my_thing" in str(err.value)


def test_registry_snake_case_of_class_names():
  assert registry.snake_case("TranslateEndeWmt32k") == "translate_ende_wmt32k"
  assert registry.snake_case("AlgorithmicReverse") == "algorithmic_reverse"


def test_paper_and_t2t_sets():
  v1, base, big = get_hparams("transformer_base_v1"), get_hparams("base"), get_hparams("big")
  assert (v1.norm_type, v1.learning_rate_warmup_steps, v1.optimizer_adam_beta2) == ("post", 4000, 0.98)
  assert (v1.attention_dropout, v1.relu_dropout, v1.layer_prepostprocess_dropout) == (0.0, 0.0, 0.1)
  assert (base.norm_type, base.learning_rate_warmup_steps, base.optimizer_adam_beta2) == ("pre", 8000, 0.997)
  assert (big.hidden_size, big.filter_size, big.num_heads, big.batch_size) == (1024, 4096, 16, 2048)
  assert big.layer_prepostprocess_dropout == 0.3
  assert get_hparams("transformer_big_single_gpu").learning_rate_warmup_steps == 16000
  assert get_hparams("transformer_base_single_gpu").batch_size == 1024
  assert get_hparams("tiny").hidden_size == 128 and get_hparams("small").hidden_size == 256
  assert len(TABLE3_ROWS) == 18
  for name in TABLE3_ROWS:
    assert name in registry.hparams_sets
  assert get_hparams("transformer_table3_b_dk16").key_channels == 128
  assert get_hparams("transformer_table3_e_learned").position_encoding == "learned"


def test_overrides_are_typed():
  hp = get_hparams("big,dropout=0.2", "num_hidden_layers=3,xla_compile=true,batch_size=4e3")
  assert hp.layer_prepostprocess_dropout == 0.2
  assert (hp.num_encoder_layers, hp.num_decoder_layers) == (3, 3)
  assert hp.xla_compile is True and hp.batch_size == 4000 and isinstance(hp.batch_size, int)
  assert hp.hidden_size == 1024  # the rest of the set stays


@pytest.mark.parametrize("overrides, message", [
    ("hiden_size=3", "Did you mean 'hidden_size'"),
    ("hidden_size=abc", "expected a int"),
    ("batch_size=1.5", "expected a int"),
    ("xla_compile=maybe", r"xla_compile='maybe': expected a bool \(true/false\) or auto"),
    ("mixed_precision=bfloat16", "mixed_precision must be float32, mixed_float16, mixed_bfloat16 or auto"),
    ("hidden_size", "expected name=value"),
    ("norm_type=middle", "norm_type must be"),
    ("num_heads=7", "divisible by num_heads"),
    ("layer_prepostprocess_dropout=1.5", "must be in"),
])
def test_override_errors(overrides, message):
  with pytest.raises(ValueError, match=message):
    get_hparams("base", overrides)


def test_auto_precision_and_xla_is_asked_for_never_a_sets_default():
  """Every set trains in float32 without XLA (T2T's, and the path the recipes were measured on)
  until "auto" is measured on a set; "auto" parses in any case, is kept through JSON, and is
  checked where set directly."""
  for name in registry.hparams_sets.names():
    hp = get_hparams(name)
    assert (hp.mixed_precision, hp.xla_compile) == ("float32", False), name
  hp = get_hparams("base", "mixed_precision=AUTO,xla_compile=Auto")
  assert (hp.mixed_precision, hp.xla_compile) == (AUTO, AUTO)
  assert HParams.from_json(hp.to_json()) == hp
  assert get_hparams("multi30k", "xla_compile=false,mixed_precision=float32").xla_compile is False
  for bad in ({"xla_compile": "yes"}, {"xla_compile": 1}, {"mixed_precision": "Auto"}):
    with pytest.raises(ValueError, match="must be"):
      HParams(**bad)


def test_json_round_trip_every_set():
  for name in registry.hparams_sets.names():
    hp = get_hparams(name)
    assert HParams.from_json(hp.to_json()) == hp
  with pytest.raises(ValueError, match="unknown fields"):
    HParams.from_json('{"hidden_sise": 3}')


def test_hparams_are_frozen():
  with pytest.raises(dataclasses.FrozenInstanceError):
    get_hparams("base").hidden_size = 3


def test_decode_hparams():
  dh = DecodeHParams().parse("beam_size=8,alpha=1.0,return_beams=true")
  # extra_length: T2T's default 100 (issue 19; it was the paper's 50, which the recipes pass).
  assert (dh.beam_size, dh.alpha, dh.return_beams, dh.extra_length) == (8, 1.0, True, 100)
  assert DecodeHParams().beam_size == 4 and DecodeHParams().alpha == 0.6
  with pytest.raises(ValueError, match="unknown hparam"):
    DecodeHParams().parse("beam=3")
  with pytest.raises(ValueError, match="needs beam_size=1"):
    DecodeHParams().parse("sampling_temperature=1.0")
  assert DecodeHParams().beam_stop == "exact"
  assert DecodeHParams().parse("beam_stop=finished").beam_stop == "finished"
  with pytest.raises(ValueError, match="beam_stop must be 'exact'.*got 'finishd'"):
    DecodeHParams().parse("beam_stop=finishd")
