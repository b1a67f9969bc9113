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


# Table 3 of the paper (REFERENCE.md section 3), written out here from the paper rather than read
# from the library: the base row's columns, then each row's entries, those that differ from base
# (the paper's "unlisted values equal base"). Every row trains 100K steps, as base does (only the
# big model differs); steps are the trainer's --train_steps, not an hparam, so not compared.
PAPER_BASE_ROW = dict(N=6, d_model=512, d_ff=2048, h=8, d_k=64, d_v=64, P_drop=0.1, eps_ls=0.1,
                      positions="sinusoid")
PAPER_TABLE3 = {
    "transformer_table3_a_h1": dict(h=1, d_k=512, d_v=512),
    "transformer_table3_a_h4": dict(h=4, d_k=128, d_v=128),
    "transformer_table3_a_h16": dict(h=16, d_k=32, d_v=32),
    "transformer_table3_a_h32": dict(h=32, d_k=16, d_v=16),
    "transformer_table3_b_dk16": dict(d_k=16),
    "transformer_table3_b_dk32": dict(d_k=32),
    "transformer_table3_c_n2": dict(N=2),
    "transformer_table3_c_n4": dict(N=4),
    "transformer_table3_c_n8": dict(N=8),
    "transformer_table3_c_d256": dict(d_model=256, d_k=32, d_v=32),
    "transformer_table3_c_d1024": dict(d_model=1024, d_k=128, d_v=128),
    "transformer_table3_c_ff1024": dict(d_ff=1024),
    "transformer_table3_c_ff4096": dict(d_ff=4096),
    "transformer_table3_d_drop0": dict(P_drop=0.0),
    "transformer_table3_d_drop02": dict(P_drop=0.2),
    "transformer_table3_d_ls0": dict(eps_ls=0.0),
    "transformer_table3_d_ls02": dict(eps_ls=0.2),
    "transformer_table3_e_learned": dict(positions="learned"),
}


def _paper_columns(hp):
  """An hparams set's values in the paper's columns (d_k, d_v: the resolved widths per head)."""
  return dict(N=(hp.num_encoder_layers, hp.num_decoder_layers), d_model=hp.hidden_size,
              d_ff=hp.filter_size, h=hp.num_heads, d_k=hp.key_channels / hp.num_heads,
              d_v=hp.value_channels / hp.num_heads, P_drop=hp.layer_prepostprocess_dropout,
              eps_ls=hp.label_smoothing, positions=hp.position_encoding)


def test_table3_rows_are_base_v1_with_the_papers_changes_only():
  """Each Table 3 set is `transformer_base_v1` with exactly its row's changes: every hparams field
  outside the paper's columns equals base_v1's, and every column equals the paper's (so a changed
  value, a change the row lacks, or one it does not make all fail)."""
  table3_sets = {n for n in registry.hparams_sets.names() if n.startswith("transformer_table3_")}
  assert table3_sets == set(PAPER_TABLE3) == set(TABLE3_ROWS)
  base = get_hparams("transformer_base_v1")
  assert _paper_columns(base) == dict(PAPER_BASE_ROW, N=(6, 6))
  columns = {"num_encoder_layers", "num_decoder_layers", "hidden_size", "filter_size", "num_heads",
             "attention_key_channels", "attention_value_channels", "layer_prepostprocess_dropout",
             "label_smoothing", "position_encoding"}
  mismatches = {}
  for name, changes in PAPER_TABLE3.items():
    hp = get_hparams(name)
    row = dict(PAPER_BASE_ROW, **changes)
    row["N"] = (row["N"], row["N"])  # encoder and decoder
    diff = {key: (got, row[key]) for key, got in _paper_columns(hp).items() if got != row[key]}
    diff.update({f.name: (getattr(hp, f.name), getattr(base, f.name))
                 for f in dataclasses.fields(HParams) if f.name not in columns
                 and getattr(hp, f.name) != getattr(base, f.name)})
    if diff:
      mismatches[name] = diff
  assert mismatches == {}


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
