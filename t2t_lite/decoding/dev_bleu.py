"""Real BLEU during training: decode dev sentences with the model being trained and score them.

`bleu_evaluation(...)` returns the `evaluate_fn` that `t2t_lite.training.train_loop.
train_and_evaluate` calls at each evaluation, as flax's train.py takes decode.py's: training
never imports decoding. `t2t-lite-trainer` passes it unless `--no_eval_bleu`.
"""

from collections.abc import Callable

import keras

from t2t_lite.decoding.bleu_score import sacrebleu_score
from t2t_lite.decoding.translator import Translator
from t2t_lite.hparams import DecodeHParams
from t2t_lite.problems import Problem


def bleu_evaluation(problem: Problem, data_dir: str | None, examples: int,
                    decode_hparams: DecodeHParams | None = None, split: str = "dev"
                    ) -> Callable[[keras.Model], dict[str, float]]:
  """`evaluate(model) -> {"bleu": sacreBLEU}` on the first `examples` pairs of `split` (dev; the
  trainer's --eval_use_test_set gives test) of `problem`.

  Args:
    problem: the Problem being trained (its dev split and vocabulary).
    data_dir: where the problem keeps its vocabulary and data.
    examples: dev pairs to decode (the hparams' `eval_bleu_examples`).
    decode_hparams: default: the problem's, with beam 1 for speed.

  The same Translator serves every evaluation of a run (it reads the model's current variables),
  so its compiled search programs are built once, not once per evaluation.
  """
  decode_hparams = decode_hparams or problem.default_decode_hparams().replace(beam_size=1)
  state = {}

  def evaluate(model):
    if state.get("model") is not model:
      pairs = problem.text_pairs(split, data_dir)[:examples]
      state.update(model=model, pairs=pairs,
                   translator=Translator(model, problem.get_vocab(data_dir), decode_hparams))
    pairs = state["pairs"]
    if not pairs:
      return {}
    hypotheses = state["translator"].translate([source for source, _ in pairs])
    return {"bleu": sacrebleu_score(hypotheses, [target for _, target in pairs])[0]}

  return evaluate
