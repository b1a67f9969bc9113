"""`transformer_big_v1`: the paper's post-norm big model, `transformer_base_v1` with T2T's big
assignments (tensor2tensor models/transformer.py, `transformer_big`: hidden_size 1024,
filter_size 4096, num_heads 16, layer_prepostprocess_dropout 0.3), keeping base's 4096 tokens
per GPU (the paper's ~25k-token batches on 8 GPUs)."""

import dataclasses

from t2t_lite.hparams import get_hparams

BIG_CHANGES = {"hidden_size": 1024, "filter_size": 4096, "num_heads": 16,
               "layer_prepostprocess_dropout": 0.3}


def test_big_v1_is_base_v1_with_t2t_big_assignments_value_for_value():
  base_v1 = dataclasses.asdict(get_hparams("transformer_base_v1"))
  big_v1 = dataclasses.asdict(get_hparams("transformer_big_v1"))
  t2t_big = dataclasses.asdict(get_hparams("transformer_big"))
  differing = {name for name in base_v1 if base_v1[name] != big_v1[name]}
  assert differing == set(BIG_CHANGES)
  assert {name: big_v1[name] for name in BIG_CHANGES} == BIG_CHANGES
  assert {name: t2t_big[name] for name in BIG_CHANGES} == BIG_CHANGES  # T2T's big values
  # The paper's model: post-norm, the paper's Adam and schedule, its batch per GPU.
  assert (big_v1["norm_type"], big_v1["optimizer_adam_beta2"], big_v1["learning_rate_warmup_steps"],
          big_v1["learning_rate_schedule"], big_v1["batch_size"]) == ("post", 0.98, 4000, "legacy", 4096)
  assert (t2t_big["norm_type"], t2t_big["batch_size"]) == ("pre", 2048)


def test_aliases():
  assert get_hparams("big_v1") == get_hparams("paper_big") == get_hparams("transformer_big_v1")
