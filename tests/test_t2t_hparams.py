"""T2T's hparams as a T2T user types them: sets value for value, schedule strings, T2T names.

Expected values are T2T's own (tensor2tensor models/transformer.py, utils/learning_rate.py,
layers/common_hparams.py at its final commit), written out here, not derived from our sets.
"""

import logging

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams import get_hparams
from t2t_lite.training.schedule import TransformerSchedule

# T2T's values of the settings that exist here, for each set.
T2T_SETS = {
    "transformer_base_v1": dict(
        hidden_size=512, filter_size=2048, num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
        norm_type="post", layer_prepostprocess_dropout=0.1, attention_dropout=0.0, relu_dropout=0.0,
        batch_size=4096, max_length=256, label_smoothing=0.1, clip_grad_norm=0.0,
        optimizer="adam", optimizer_adam_beta1=0.9, optimizer_adam_beta2=0.98,
        optimizer_adam_epsilon=1e-9, learning_rate_schedule="legacy", learning_rate=0.1,
        learning_rate_warmup_steps=4000, layer_norm_epsilon=1e-6, gradient_accumulation_steps=1,
        weight_decay=0.0),
    "transformer_base_v2": dict(
        norm_type="pre", layer_prepostprocess_dropout=0.1, attention_dropout=0.1, relu_dropout=0.1,
        optimizer_adam_beta2=0.98, learning_rate_schedule="legacy", learning_rate=0.2,
        learning_rate_warmup_steps=8000, batch_size=4096),
    "transformer_base_v3": dict(
        norm_type="pre", optimizer_adam_beta2=0.997, learning_rate=0.2,
        learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
        learning_rate_constant=2.0, learning_rate_warmup_steps=8000),
    "transformer_base_single_gpu": dict(
        batch_size=1024, learning_rate_schedule="constant*linear_warmup*rsqrt_decay",
        learning_rate_constant=0.1, learning_rate_warmup_steps=16000, optimizer_adam_beta2=0.997),
    "transformer_base_multistep8": dict(gradient_accumulation_steps=8, optimizer="adam",
                                        batch_size=4096, learning_rate_warmup_steps=8000),
    "transformer_big_enfr": dict(
        hidden_size=1024, filter_size=8192, num_heads=16, layer_prepostprocess_dropout=0.1,
        attention_dropout=0.1, relu_dropout=0.1, batch_size=4096,
        shared_embedding_and_softmax_weights=False, shared_embedding=False,
        learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
        learning_rate_constant=2.0, learning_rate_warmup_steps=8000),
    "transformer_tpu": dict(optimizer="adafactor", learning_rate_schedule="rsqrt_decay",
                            learning_rate_warmup_steps=10000, max_length=64, batch_size=2048,
                            hidden_size=512, norm_type="pre"),
}


@pytest.mark.parametrize("name", sorted(T2T_SETS))
def test_sets_have_t2t_values(name):
  hp = get_hparams(name)
  assert {k: getattr(hp, k) for k in T2T_SETS[name]} == T2T_SETS[name]


# Each set as T2T writes it: the set it starts from and its assignments (the settings T2T's
# function assigns that exist here), so that a set equal to its parent.replace(**these) holds
# every other setting at the parent's value too. T2T's `transformer_big_enfr` starts from
# `transformer_big_dr1` (base with d 1024, d_ff 4096, h 16, dropout 0.1), written out on base.
T2T_ASSIGNMENTS = {
    "transformer_big": ("transformer_base", dict(
        hidden_size=1024, filter_size=4096, batch_size=2048, num_heads=16,
        layer_prepostprocess_dropout=0.3)),
    "transformer_big_single_gpu": ("transformer_big", dict(
        layer_prepostprocess_dropout=0.1, learning_rate_warmup_steps=16000)),
    "transformer_base_single_gpu": ("transformer_base", dict(
        batch_size=1024, learning_rate_schedule="constant*linear_warmup*rsqrt_decay",
        learning_rate_constant=0.1, learning_rate_warmup_steps=16000)),
    "transformer_base_multistep8": ("transformer_base", dict(gradient_accumulation_steps=8)),
    "transformer_big_enfr": ("transformer_base", dict(
        hidden_size=1024, filter_size=8192, num_heads=16, layer_prepostprocess_dropout=0.1,
        shared_embedding_and_softmax_weights=False)),
    "transformer_small": ("transformer_base", dict(
        num_encoder_layers=2, num_decoder_layers=2, hidden_size=256, filter_size=1024,
        num_heads=4)),
    "transformer_tiny": ("transformer_base", dict(
        num_encoder_layers=2, num_decoder_layers=2, hidden_size=128, filter_size=512,
        num_heads=4)),
}


@pytest.mark.parametrize("name", sorted(T2T_ASSIGNMENTS))
def test_sets_are_their_t2t_parent_with_t2t_assignments(name):
  """The whole set, not the few values T2T_SETS lists: `transformer_big_single_gpu` keeping
  big's dropout of 0.3, or `transformer_tiny` a d_ff of 256, passed every test before."""
  parent, assignments = T2T_ASSIGNMENTS[name]
  assert get_hparams(name) == get_hparams(parent).replace(**assignments)


def test_transformer_base_is_v3():
  assert get_hparams("transformer_base") == get_hparams("transformer_base_v3")
  v2, v3 = get_hparams("transformer_base_v2"), get_hparams("transformer_base_v3")
  assert [k for k in v3.to_dict() if getattr(v2, k) != getattr(v3, k)] == [
      "optimizer_adam_beta2", "learning_rate_schedule", "learning_rate_constant"]


def _t2t_rate(name, hp, global_step):
  """T2T's learning rate of `hp` as utils/learning_rate.py computes it, at T2T's `global_step`:
  the updates already applied, 0 at the first update (`tf.train.get_or_create_global_step()`,
  read before the update increments it). Its legacy schedule (v1, v2) adds 1 to that step inside
  `legacy_learning_rate_schedule`; `learning_rate_factor` (the `*`-products) uses it as it is."""
  d, w = hp.hidden_size, hp.learning_rate_warmup_steps
  legacy_step = global_step + 1
  noam = d ** -0.5 * min(legacy_step * w ** -1.5, legacy_step ** -0.5)
  rsqrt_decay = max(global_step, w) ** -0.5
  return {
      "transformer_base_v1": 5000.0 * 0.002 * 0.1 * noam,
      "transformer_base_v2": 5000.0 * 0.002 * 0.2 * noam,
      "transformer_base_v3": 2.0 * min(1.0, global_step / w) * rsqrt_decay * d ** -0.5,
      "transformer_base_single_gpu": 0.1 * min(1.0, global_step / w) * rsqrt_decay,
      "transformer_tpu": rsqrt_decay,
  }[name]


LEGACY = ("transformer_base_v1", "transformer_base_v2")


@pytest.mark.parametrize("name", [*LEGACY, "transformer_base_v3", "transformer_base_single_gpu",
                                  "transformer_tpu"])
@pytest.mark.parametrize("global_step", [0, 1, 99, 3999, 4000, 8000, 10000, 16000, 50000])
def test_learning_rates_are_t2t_formulas(name, global_step):
  """Keras calls the schedule with the optimizer's counter, 0 at the first update: T2T's global
  step. The legacy sets give T2T's value at every update. The `*`-product sets differ from T2T
  by one update, deliberately (schedule.py): this schedule counts updates from 1 for every
  schedule, as T2T's legacy one does, so its rate at update g+1 is T2T's at g+1 computed one
  global step later - and T2T's first update, at global step 0, has linear_warmup = 0, a learning
  rate of 0, where this one has the rate of T2T's second update."""
  hp = get_hparams(name)
  rate = float(TransformerSchedule.from_hparams(hp)(global_step))
  if name in LEGACY:
    assert rate == pytest.approx(_t2t_rate(name, hp, global_step), rel=1e-6)
  else:
    assert rate == pytest.approx(_t2t_rate(name, hp, global_step + 1), rel=1e-6)  # the shift
    if global_step == 0 and name != "transformer_tpu":   # (no linear_warmup in transformer_tpu)
      assert _t2t_rate(name, hp, 0) == 0.0 < rate


def test_single_gpu_learning_rate_is_t2t_not_base_scaled():
  """The set used to keep base's schedule: 2 / sqrt(512) = 0.0884 against T2T's 0.1, 11.6% low."""
  hp = get_hparams("transformer_base_single_gpu")
  peak = float(TransformerSchedule.from_hparams(hp)(16000 - 1))
  assert peak == pytest.approx(0.1 * 16000 ** -0.5, rel=1e-6)


def test_learning_rate_is_the_legacy_factor_only(caplog):
  """T2T's learning_rate scales the legacy schedule and nothing else (learning_rate.py)."""
  def rate(spec, overrides):
    return float(TransformerSchedule.from_hparams(get_hparams(spec, overrides))(999))
  assert rate("transformer_base_v2", "learning_rate=0.4") == pytest.approx(
      2 * rate("transformer_base_v2", ""), rel=1e-6)
  with caplog.at_level(logging.WARNING):
    assert rate("transformer_base", "learning_rate=0.4") == rate("transformer_base", "")
  assert "learning_rate=0.4 has no effect" in caplog.text
  # T2T's spelling of v1's schedule and the paper's "noam" give the same rates.
  assert rate("transformer_base_v1", "") == pytest.approx(
      rate("transformer_base_v1", "learning_rate_schedule=noam,learning_rate_constant=1"), rel=1e-6)


@pytest.mark.parametrize("schedule, expected", [
    ("constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
     lambda s: 2.0 * min(1, s / 8000) * max(s, 8000) ** -0.5 * 512 ** -0.5),
    ("constant * linear_warmup", lambda s: 2.0 * min(1, s / 8000)),
    ("rsqrt_normalized_decay", lambda s: 8000 ** 0.5 * max(s, 8000) ** -0.5),
    ("constant", lambda s: 2.0),
])
def test_t2t_schedule_strings_parse(schedule, expected):
  hp = get_hparams("transformer_base", f"learning_rate_schedule={schedule}")
  for step in (1, 5000, 8000, 20000):
    assert float(TransformerSchedule.from_hparams(hp)(step - 1)) == pytest.approx(expected(step))


def _t2t_decay_factor(name, step_num, train_steps, decay_steps, warmup_steps):
  """T2T's learning_rate_factor for its two decays (utils/learning_rate.py), written out."""
  if name == "linear_decay":
    return min(1.0, max(0.0, (train_steps - step_num) / decay_steps))
  in_warmup = float(step_num <= warmup_steps)  # cosdecay (OpenAI GPT's)
  return in_warmup + (1 - in_warmup) * 0.5 * (1 + np.cos(np.pi * step_num / decay_steps))


@pytest.mark.parametrize("factor", ["linear_decay", "cosdecay"])
@pytest.mark.parametrize("global_step", [0, 499, 999, 1000, 2999, 3000, 3999, 4000, 5000, 7000])
def test_t2t_decay_factors(factor, global_step):
  """T2T's linear_decay (1 until the last learning_rate_decay_steps updates of --train_steps,
  then down to 0) and cosdecay, times the schedule before them, with the one-update shift of
  every `*`-product schedule (test_learning_rates_are_t2t_formulas)."""
  hp = get_hparams("transformer_base", "learning_rate_warmup_steps=1000,learning_rate_decay_steps="
                   f"3000,learning_rate_schedule=constant*linear_warmup*rsqrt_decay*{factor}")
  schedule = TransformerSchedule.from_hparams(hp, train_steps=5000)
  s = global_step + 1
  expected = 2.0 * min(1, s / 1000) * max(s, 1000) ** -0.5 * _t2t_decay_factor(
      factor, s, 5000, 3000, 1000)
  assert float(schedule(global_step)) == pytest.approx(expected, rel=1e-5, abs=1e-9)
  if factor == "linear_decay":  # flat until update 2,000, then down to 0 at update 5,000
    assert (float(schedule(global_step)) == 0.0) == (s >= 5000)


def test_linear_decay_needs_the_runs_end():
  hp = get_hparams("transformer_base", "learning_rate_schedule=constant*linear_decay")
  with pytest.raises(ValueError, match="linear_decay ends at the run's train_steps"):
    TransformerSchedule.from_hparams(hp)
  with pytest.raises(ValueError, match="learning_rate_decay_steps must be >= 1"):
    get_hparams("transformer_base", "learning_rate_decay_steps=0")


def test_the_trainer_decays_to_its_train_steps(tmp_path):
  """The Trainer (which train_and_evaluate gives --train_steps) builds its optimizer's schedule
  with the run's end: in a run of 12 updates decaying over 4, the rate falls from update 9 on
  and is 0 at the last."""
  from t2t_lite.training import train_loop
  hp = get_hparams("transformer_tiny", "hidden_size=16,filter_size=32,num_heads=2,"
                   "num_hidden_layers=1,learning_rate_schedule=constant*linear_decay,"
                   "learning_rate_decay_steps=4,learning_rate_constant=0.5")
  trainer = train_loop.Trainer(hp, 32, str(tmp_path / "t"), train_steps=12)
  rates = []
  for global_step in (0, 7, 8, 9, 10, 11):
    trainer.optimizer.iterations.assign(global_step)
    rates.append(float(trainer.optimizer.learning_rate))
  assert rates == pytest.approx([0.5, 0.5, 0.375, 0.25, 0.125, 0.0])


@pytest.mark.parametrize("schedule, message", [
    ("constant*single_cycle_cos_decay", "'single_cycle_cos_decay' has no counterpart in t2t_lite"),
    ("constant*warmup", "unknown factor 'warmup'"),
])
def test_schedule_errors(schedule, message):
  with pytest.raises(ValueError, match=message):
    get_hparams("transformer_base", f"learning_rate_schedule={schedule}")


@pytest.mark.parametrize("overrides, expected", [
    ("layer_preprocess_sequence=none,layer_postprocess_sequence=dan", {"norm_type": "post"}),
    ("layer_preprocess_sequence=n,layer_postprocess_sequence=da", {"norm_type": "pre"}),
    # Each alone too: above, the postprocess sequence, read last, decides either way.
    ("layer_preprocess_sequence=none", {"norm_type": "post"}),
    ("layer_preprocess_sequence=n", {"norm_type": "pre"}),
    ("norm_epsilon=1e-5", {"layer_norm_epsilon": 1e-5}),
    ("pos=emb", {"position_encoding": "learned"}),
    ("activation_dtype=bfloat16", {"mixed_precision": "mixed_bfloat16"}),
    ("norm_type=layer", {"norm_type": "pre"}),
    ("optimizer=multistep_adam,optimizer_multistep_accumulate_steps=4",
     {"optimizer": "adam", "gradient_accumulation_steps": 4}),
    ("optimizer=Adafactor", {"optimizer": "adafactor"}),
    ("max_input_seq_length=50,use_fixed_batch_size=true",
     {"max_input_seq_length": 50, "use_fixed_batch_size": True}),
    ("shared_embedding_and_softmax_weights=true,ffn_layer=dense_relu_dense,weight_noise=0.0,"
     "symbol_modality_num_shards=16,learning_rate_decay_scheme=noam", {}),
    ("weight_decay=1e-6", {"weight_decay": 1e-6}),  # T2T's L2 term (tests/test_weight_decay.py)
])
def test_t2t_names_map_onto_ours(overrides, expected):
  base = get_hparams("transformer_base")
  hp = get_hparams("transformer_base", overrides)
  assert {k: getattr(hp, k) for k in expected} == expected
  assert [k for k in base.to_dict() if getattr(base, k) != getattr(hp, k)] == sorted(
      [k for k in expected if getattr(base, k) != expected[k]], key=list(base.to_dict()).index)


@pytest.mark.parametrize("overrides", [
    "ffn_layer=conv_relu_conv", "initializer=orthogonal", "layer_preprocess_sequence=nd",
    "weight_noise=1e-6", "learning_rate_decay_scheme=cosine", "attention_dropout_broadcast_dims=0,1",
])
def test_t2t_names_without_counterpart_say_so(overrides):
  with pytest.raises(ValueError, match="has no counterpart in t2t_lite"):
    get_hparams("transformer_base", overrides)


def _t2t_adafactor_step(w, g, r, c, v, step, lr):
  """One update of T2T's AdafactorOptimizer (utils/adafactor.py) at its default hparams."""
  decay = 1.0 - step ** -0.8
  g2 = g * g + 1e-30
  if w.ndim >= 2:
    r = decay * r + (1 - decay) * g2.mean(-1)
    c = decay * c + (1 - decay) * g2.mean(-2)
    u = g / np.sqrt(np.outer(r / r.mean(), c))
  else:
    v = decay * v + (1 - decay) * g2
    u = g / np.sqrt(v)
  u = u / max(1.0, np.sqrt((u * u).mean()) / 1.0)
  return w - lr * max(1e-3, np.sqrt((w * w).mean())) * u, r, c, v


def test_adafactor_is_t2ts():
  from t2t_lite.training.train_loop import build_optimizer
  hp = get_hparams("transformer_tpu")
  rng = np.random.default_rng(0)
  weights = [tf.Variable(rng.normal(size=(6, 4)).astype("float32")),
             tf.Variable(rng.normal(size=(5,)).astype("float32"))]
  optimizer = build_optimizer(hp)
  state = [(w.numpy().astype("float64"), np.zeros(w.shape[:-1]), np.zeros(w.shape[-1:]),
            np.zeros(w.shape)) for w in weights]
  for step in range(1, 4):
    grads = [rng.normal(size=w.shape).astype("float32") for w in weights]
    optimizer.apply_gradients(zip([tf.constant(g) for g in grads], weights))
    lr = max(step, 10000) ** -0.5
    state = [_t2t_adafactor_step(w, g.astype("float64"), r, c, v, step, lr)
             for (w, r, c, v), g in zip(state, grads)]
    for variable, (expected, *_) in zip(weights, state):
      np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_max_seq_lengths_cut_and_fixed_batch_size_counts_pairs():
  """T2T's max_input_seq_length / max_target_seq_length cut (EOS included, training and eval);
  use_fixed_batch_size makes batch_size a number of pairs, padded to each batch's longest."""
  from t2t_lite.data import pipeline
  from t2t_lite.hparams import HParams
  lengths = [3, 12, 5, 9, 2, 7, 11]
  chunks = tf.data.Dataset.from_tensors(
      {"inputs": tf.ragged.constant([list(range(2, 2 + n)) for n in lengths]),
       "targets": tf.ragged.constant([list(range(2, 4 + n)) for n in lengths])})
  hp = HParams(batch_size=3, max_length=64, use_fixed_batch_size=True, max_input_seq_length=6,
               max_target_seq_length=8)
  batches = list(pipeline.make_batches(chunks, hp, training=False).as_numpy_iterator())
  assert [len(b["inputs"]) for b in batches] == [3, 3, 1]
  rows = [row for b in batches for row in b["inputs"].tolist()]
  assert [r[:6] for r in rows] == [(list(range(2, 2 + n)) + [1] + [0] * 6)[:6] for n in lengths]
  groups = (lengths[:3], lengths[3:6], lengths[6:])  # in input order: no length buckets
  assert [b["inputs"].shape[1] for b in batches] == [
      max(max(min(n + 1, 6), min(n + 3, 8)) for n in group) for group in groups]
  targets = [row for b in batches for row in b["targets"].tolist()]
  assert [sum(1 for t in row if t) for row in targets] == [min(n + 3, 8) for n in lengths]


def test_a_time_budget_moves_linear_decays_end_to_where_the_clock_stops(tmp_path, train_clock,
                                                                         capsys):
  """With --train_minutes the run's end is the clock's: linear_decay ends at the update the run
  reaches when its budget is spent, estimated from its rate since its first log line (a fake
  clock: each update 0.25 s, so 4 updates/s and 40 updates in a 10 s budget), and the run stops
  there, its learning rate down to 0, not at train_steps (1,000), where T2T's schedule would end."""
  import re  # pylint: disable=import-outside-toplevel
  from t2t_lite.problems import get_problem  # pylint: disable=import-outside-toplevel
  from t2t_lite.training import train_loop  # pylint: disable=import-outside-toplevel
  del train_clock  # each update takes 0.25 s of it
  hparams = get_hparams("transformer_tiny", "hidden_size=16,filter_size=32,num_heads=2,"
                        "num_hidden_layers=1,batch_size=256,max_length=16,eval_bleu_examples=0,"
                        "learning_rate_schedule=constant*linear_decay,learning_rate_constant=1,"
                        "learning_rate_decay_steps=8")
  results = train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), hparams, str(tmp_path / "run"), str(tmp_path / "data"),
      train_steps=1000, eval_steps=0, save_checkpoints_steps=100, log_every=2, progress=False,
      max_train_seconds=10.0)
  out = capsys.readouterr().out
  assert results["step"] == 40, out
  assert "linear_decay ends at step 40: this run's 4 updates/s" in out
  assert "linear_decay reached 0 at step 40, the estimated end of the time budget" in out
  # Each log line's lr is the next update's: flat until update 32, then (40 - update) / 8.
  lrs = {int(m[1]): float(m[2]) for m in re.finditer(r"step (\d+): loss \S+ lr (\S+) ", out)}
  assert [lrs[s] for s in (2, 30, 32, 36, 38)] == pytest.approx([1.0, 1.0, 0.875, 0.375, 0.125])
