"""The Transformer hparams sets of tensor2tensor's `models/transformer.py` and the paper's Table 3.

Each set is base + a few assignments, with T2T's values. `transformer_base_v1` is the paper's base
model (post-norm, Adam beta2 0.98, warmup 4000, T2T's "legacy" noam schedule); `_v2` moved to
pre-norm with dropout everywhere and warmup 8000; `_v3`, which is `transformer_base`, to beta2
0.997 and the multiplicative schedule `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size` with
a constant of 2 (the same curve as v2's).
"""

from t2t_lite import registry
from t2t_lite.hparams.base import HParams

register = registry.hparams_sets.register


@register(aliases=("base",))
def transformer_base():
  """T2T's `transformer_base`: pre-norm, dropout .1/.1/.1, warmup 8000, 4096 tokens per GPU."""
  return HParams()


@register(aliases=("base_v1", "paper_base"))
def transformer_base_v1():
  """The paper's base model (Table 3, first row): post-norm, no attention/ReLU dropout.

  T2T's "legacy" schedule with learning_rate 0.1 is the paper's formula exactly
  (5000 * 0.002 * 0.1 = 1 times d^-0.5 * min(step^-0.5, step * warmup^-1.5)).
  """
  return transformer_base().replace(
      norm_type="post", attention_dropout=0.0, relu_dropout=0.0,
      optimizer_adam_beta2=0.98, learning_rate_schedule="legacy", learning_rate=0.1,
      learning_rate_constant=1.0, learning_rate_warmup_steps=4000)


@register(aliases=("base_v2",))
def transformer_base_v2():
  """T2T's v2: pre-norm, dropout .1/.1/.1, warmup 8000, the legacy schedule at learning_rate 0.2."""
  return transformer_base_v1().replace(
      norm_type="pre", layer_prepostprocess_dropout=0.1, attention_dropout=0.1, relu_dropout=0.1,
      learning_rate_warmup_steps=8000, learning_rate=0.2)


@register(aliases=("base_v3",))
def transformer_base_v3():
  """T2T's v3 (= transformer_base): beta2 0.997, the multiplicative schedule, constant 2."""
  return transformer_base_v2().replace(
      optimizer_adam_beta2=0.997,
      learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
      learning_rate_constant=2.0)


@register(aliases=("big",))
def transformer_big():
  """T2T's `transformer_big` (the paper's big model, Table 3 last row): d 1024, h 16, dropout 0.3."""
  return transformer_base().replace(
      hidden_size=1024, filter_size=4096, num_heads=16, batch_size=2048,
      layer_prepostprocess_dropout=0.3)


@register(aliases=("big_v1", "paper_big"))
def transformer_big_v1():
  """The paper's big model (Table 3, last row) as `transformer_base_v1` is its base: post-norm, no
  attention/ReLU dropout, beta2 0.98, the legacy schedule at warmup 4000, with T2T's big changes
  (d 1024, d_ff 4096, h 16, residual dropout 0.3). T2T has no post-norm big set; this is
  `transformer_base_v1` with `transformer_big`'s assignments, except `batch_size`: T2T's big
  lowered it to 2048 to fit 12 GB GPUs, while the paper's batches of about 25,000 source and
  25,000 target tokens on 8 GPUs are base's 4096 per GPU, kept here (`--worker_gpu=8`)."""
  return transformer_base_v1().replace(
      hidden_size=1024, filter_size=4096, num_heads=16, layer_prepostprocess_dropout=0.3)


@register(aliases=("big_single_gpu",))
def transformer_big_single_gpu():
  """Big for one GPU: dropout 0.1, warmup 16000 (T2T)."""
  return transformer_big().replace(layer_prepostprocess_dropout=0.1, learning_rate_warmup_steps=16000)


@register(aliases=("base_single_gpu",))
def transformer_base_single_gpu():
  """Base for one GPU (T2T): 1024 tokens per batch, warmup 16000, and the schedule
  `constant*linear_warmup*rsqrt_decay` with constant 0.1 (no d_model^-0.5 factor)."""
  return transformer_base().replace(
      batch_size=1024, learning_rate_schedule="constant*linear_warmup*rsqrt_decay",
      learning_rate_constant=0.1, learning_rate_warmup_steps=16000)


@register(aliases=("base_multistep8",))
def transformer_base_multistep8():
  """Base emulating 8 GPUs on one: each update accumulates 8 batches (T2T's multistep_adam)."""
  return transformer_base().replace(gradient_accumulation_steps=8)


@register
def transformer_tpu():
  """T2T's base for TPUs (`update_hparams_for_tpu`): Adafactor with the schedule `rsqrt_decay`
  and warmup 10000, max_length 64, at most 2048 tokens per core. T2T also broadcasts its dropout
  masks there (to save memory); masks are never broadcast here."""
  base = transformer_base()
  return base.replace(optimizer="adafactor", learning_rate_schedule="rsqrt_decay",
                      learning_rate_warmup_steps=10000, max_length=64,
                      batch_size=min(base.batch_size, 2048))


@register
def transformer_big_enfr():
  """T2T's big model for WMT EN-FR: d 1024, d_ff 8192, h 16, dropout 0.1, base's 4096 tokens, and
  the pre-softmax projection apart from the embeddings."""
  return transformer_base().replace(
      hidden_size=1024, filter_size=8192, num_heads=16, layer_prepostprocess_dropout=0.1,
      shared_embedding_and_softmax_weights=False)


@register(aliases=("small",))
def transformer_small():
  return transformer_base().replace(hidden_size=256, filter_size=1024, num_heads=4,
                                    num_encoder_layers=2, num_decoder_layers=2)


@register(aliases=("tiny",))
def transformer_tiny():
  return transformer_base().replace(hidden_size=128, filter_size=512, num_heads=4,
                                    num_encoder_layers=2, num_decoder_layers=2)


@register(aliases=("multi30k",))
def transformer_multi30k():
  """Sized for Multi30k (29k caption pairs) on a 2-core CPU in one hour: d 256, 3+3 layers.

  Small data wants a small model (about 19 epochs in the hour: docs/training.md); the peak
  learning rate (constant 1, warmup 1000: 2e-3) suits a run of a few thousand updates. It trains
  in float32 as a graph, the path its recipe figures were measured on; `mixed_precision=auto,
  xla_compile=auto` lets t2t_lite.fast_path pick the machine's path instead (not yet measured on
  this set, so not its default).
  """
  return transformer_base().replace(
      hidden_size=256, filter_size=1024, num_heads=4, num_encoder_layers=3, num_decoder_layers=3,
      batch_size=4096, max_length=128, layer_prepostprocess_dropout=0.1,
      learning_rate_constant=1.0, learning_rate_warmup_steps=1000, optimizer_adam_beta2=0.98,
      eval_bleu_examples=200)


@register(aliases=("multi30k_tiny",))
def transformer_multi30k_tiny():
  """The Multi30k recipe's set (scripts/multi30k_recipe.sh): d 128, d_ff 256, 4+4 layers.

  Chosen on Multi30k's val split only (docs/training.md, "Tuning on the val split"): with the
  recipe's budget, a model half as wide and one layer deeper than `transformer_multi30k` trains
  about 2.2x the updates in the same minutes on a 2-core CPU, and it scored higher on val than the
  wider set, and than the same model with a higher peak, half the batch or half the vocabulary.
  Dropout 0.2 on the residuals and embeddings (0.3 scored lower); attention and ReLU dropout 0, as
  in every tiny setting tuned (a dropout of 0 skips its op); peak learning rate 5e-3 (constant
  1.79 = 5e-3 * 128^0.5 * 1000^0.5 with `transformer_multi30k`'s warmup of 1000).
  """
  return transformer_multi30k().replace(
      hidden_size=128, filter_size=256, num_encoder_layers=4, num_decoder_layers=4,
      layer_prepostprocess_dropout=0.2, attention_dropout=0.0, relu_dropout=0.0,
      learning_rate_constant=1.79)


# Table 3 of the paper: variations of the base model (EN-DE dev). Unlisted values equal base;
# d_k = d_v = d_model / h unless the row says otherwise, so attention channels are h * d_k.
def _row(**changes):
  return lambda: transformer_base_v1().replace(**changes)


TABLE3_ROWS = {
    # name: (changes, parameter count in millions from the paper, or None)
    "transformer_table3_a_h1": (dict(num_heads=1), None),
    "transformer_table3_a_h4": (dict(num_heads=4), None),
    "transformer_table3_a_h16": (dict(num_heads=16), None),
    "transformer_table3_a_h32": (dict(num_heads=32), None),
    "transformer_table3_b_dk16": (dict(attention_key_channels=8 * 16), 58),
    "transformer_table3_b_dk32": (dict(attention_key_channels=8 * 32), 60),
    "transformer_table3_c_n2": (dict(num_encoder_layers=2, num_decoder_layers=2), 36),
    "transformer_table3_c_n4": (dict(num_encoder_layers=4, num_decoder_layers=4), 50),
    "transformer_table3_c_n8": (dict(num_encoder_layers=8, num_decoder_layers=8), 80),
    "transformer_table3_c_d256": (dict(hidden_size=256), 28),
    "transformer_table3_c_d1024": (dict(hidden_size=1024), 168),
    "transformer_table3_c_ff1024": (dict(filter_size=1024), 53),
    "transformer_table3_c_ff4096": (dict(filter_size=4096), 90),
    "transformer_table3_d_drop0": (dict(layer_prepostprocess_dropout=0.0), None),
    "transformer_table3_d_drop02": (dict(layer_prepostprocess_dropout=0.2), None),
    "transformer_table3_d_ls0": (dict(label_smoothing=0.0), None),
    "transformer_table3_d_ls02": (dict(label_smoothing=0.2), None),
    "transformer_table3_e_learned": (dict(position_encoding="learned"), None),
}

for _name, (_changes, _) in TABLE3_ROWS.items():
  register(_row(**_changes), name=_name)


# Constituency parsing (paper section 6.3): targets are linearized trees, about 2.5 tokens per
# word (62 on average, 573 at most in the WSJ sample); max_length 512 as in T2T's parsing sets.
# Dev BLEU of linearized trees says little; t2t-lite-parse-eval gives F1 after decoding.
#
# T2T's two parsing sets, value for value, for the full WSJ on GPUs. Both also set
# `learning_rate = 0.05`, which only T2T's "legacy" schedule reads (their schedule is
# constant * linear_warmup * rsqrt_decay * rsqrt_hidden_size), and `transformer_parsing_big`
# sets `shared_source_target_embedding = False`, an attribute no T2T code reads: neither
# changes what T2T trains, so neither has a counterpart here. The paper's WSJ-only parser
# (section 6.3: "a 4-layer transformer with d_model = 1024", 91.3 F1 on section 23) is
# `transformer_parsing_base` with `num_hidden_layers=4`. Decode with the problem's defaults:
# beam 21, alpha 0.3, input length + 300.
@register(aliases=("parsing_base",))
def transformer_parsing_base():
  """T2T's WSJ-only parsing set: base with d 1024, dropout .2/.2, warmup 16000, max_length 512
  and the softmax matrix apart from the embeddings."""
  return transformer_base().replace(
      attention_dropout=0.2, layer_prepostprocess_dropout=0.2, max_length=512,
      learning_rate_warmup_steps=16000, hidden_size=1024,
      shared_embedding_and_softmax_weights=False, eval_bleu_examples=0)


@register(aliases=("parsing_big",))
def transformer_parsing_big():
  """T2T's semi-supervised WSJ parsing set: big with max_length 512, warmup 4000, dropout .1
  and 2048 tokens per batch."""
  return transformer_big().replace(
      max_length=512, learning_rate_warmup_steps=4000, layer_prepostprocess_dropout=0.1,
      batch_size=2048, eval_bleu_examples=0)


@register(aliases=("parsing_cpu",))
def transformer_parsing_cpu():
  """Parsing on a 2-core CPU in an hour (the WSJ sample: 3,396 trees): d 256, 3+3 layers.

  The transformer_multi30k sizes, with the parsing sets' max_length 512 and dropout .2/.2 (a
  small treebank overfits quickly), and a schedule for a short run on little data: batches of
  2,048 tokens (about 120 updates an epoch instead of 60) and warmup 500, so warmup is a tenth
  of the run rather than half of it. Chosen on trees held out from the training files
  (scripts/parsing_tune.sh), never on the dev split.
  """
  return transformer_multi30k().replace(
      max_length=512, layer_prepostprocess_dropout=0.2, attention_dropout=0.2,
      batch_size=2048, learning_rate_warmup_steps=500, eval_bleu_examples=0)
