"""Decoding several models as one (`t2t_lite.models.ensemble.Ensemble`, the decoder's
`--ensemble_dirs`): the log of the members' averaged next-token probabilities, through every
search the translator runs.

References: teacher-forced full forward passes of each member, mixed in numpy, scoring every
sequence of a small vocabulary (an exhaustive search); and an ensemble of one model with itself,
which must translate as that model does whatever the search's cache layout.
"""

import shutil

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.bin import decoder as decoder_cli
from t2t_lite.decoding.beam_search import beam_search
from t2t_lite.hparams import DecodeHParams, ModelConfig
from t2t_lite.models.ensemble import Ensemble
from t2t_lite.models.transformer import Transformer
from t2t_lite.token_ids import EOS_ID
from test_beam_search import (assert_every_sequence_found, every_sequence, numpy,
                              target_log_probs, teacher_forced_log_probs)

VOCAB = 5


def random_transformer(seed, **config):
  keras.utils.set_random_seed(seed)
  settings = dict(hidden_size=16, filter_size=32, num_heads=2, num_encoder_layers=1,
                  num_decoder_layers=2, layer_prepostprocess_dropout=0.0, attention_dropout=0.0,
                  relu_dropout=0.0)
  model = Transformer(ModelConfig(**{**settings, **config}), vocab_size=VOCAB)
  model.build()
  return model


@pytest.mark.backend_independent
def test_beam_over_an_ensemble_equals_exhaustive_search_of_the_averaged_probabilities():
  """Two members of different architectures (pre-norm, 2 decoder layers, d 16; post-norm, 1
  layer, d 24, learned positions): every sequence of length <= 4 over a vocabulary of 5 scored by
  the mean of the members' teacher-forced probabilities, token by token, against a beam of 160
  over `Ensemble.decode_step` (it keeps every alive prefix: see test_beam_search's exhaustive
  test). The mixture is not either member's distribution."""
  members = [random_transformer(0),
             random_transformer(1, hidden_size=24, filter_size=48, num_decoder_layers=1,
                                norm_type="post", position_encoding="learned", max_position=16)]
  ensemble = Ensemble(members)
  max_length, alpha = 4, 0.6
  source = np.asarray([[2, 3, 4, 1]], "int32")
  memory, source_mask = ensemble.encode(source)
  cache = ensemble.init_cache(memory, source_mask, max_length)
  ids, scores = beam_search(ensemble.decode_step, cache, 1, 160, VOCAB, max_length, alpha=alpha,
                            stop_early=False)
  ids, scores = numpy(ids)[0], numpy(scores)[0]

  sequences, targets = every_sequence(max_length)
  member_log_probs = [teacher_forced_log_probs(m, source, targets) for m in members]
  mixture = np.logaddexp.reduce(np.stack(member_log_probs), axis=0) - np.log(2.0)
  mixed = target_log_probs(mixture, targets)
  assert len(assert_every_sequence_found(ids, scores, sequences, mixed, alpha)) == 85
  # Each member alone scores the sequences otherwise: the mixture is what was searched.
  for log_probs in member_log_probs:
    assert np.abs(target_log_probs(log_probs, targets) - mixed).max() > 1e-2


class LateEos:
  """The model with its EOS logit lowered by 30: outputs run to their length limit, through every
  cache phase (the 30-step model ends its translations within the first)."""

  def __init__(self, model):
    self.model = model

  def __getattr__(self, name):
    return getattr(self.model, name)

  def decode_step(self, ids, step, cache, **kwargs):
    logits, cache = self.model.decode_step(ids, step, cache, **kwargs)
    return ops.where(ops.arange(logits.shape[-1]) == EOS_ID, logits - 30.0, logits), cache


def test_an_ensemble_of_a_model_with_itself_translates_as_the_model(tiny_model_dir):
  """Through the translator's searches (`make_search_fn`, the decoder's: XLA and graph, the beams'
  shared cache and the tiled one, greedy; cache phases, the outputs longer than the first phase's
  16 positions): the ensemble [m, m]'s averaged probabilities are m's, so the same ids
  and scores. m's own translations are taken once per beam size, as a graph with the shared
  cache: its XLA and tiled-cache searches give the same (tests/test_decoder.py,
  tests/test_shared_beam_cache.py). Its cache holds both members' entries (twice the model's)."""
  from t2t_lite import model_dir as model_dir_lib
  from t2t_lite.decoding.translator import Translator
  _, trained, _ = model_dir_lib.restore_model(str(tiny_model_dir[0]))
  model = LateEos(trained)
  vocab = model_dir_lib.load_vocab(str(tiny_model_dir[0]))
  ensemble = Ensemble([model, model])
  lines = ["A man is riding a bike .", "Two dogs play in the snow near a red house .",
           "A woman ."]
  base = DecodeHParams(extra_length=20, alpha=1.2, batch_size=4)
  cases = [dict(beam_size=3), dict(beam_size=3, xla=False), dict(beam_size=3, shared_beam_cache=False),
           dict(beam_size=1)]
  sources = [vocab.encode(line) + [EOS_ID] for line in lines]
  wants = {beam: Translator(model, vocab, base.replace(beam_size=beam, xla=False)).translate_ids(sources)
           for beam in (3, 1)}
  for case in cases:
    want = wants[case["beam_size"]]
    got = Translator(ensemble, vocab, base.replace(**case)).translate_ids(sources)
    assert [[ids for ids, _ in beams] for beams in got] == [[ids for ids, _ in beams]
                                                            for beams in want], case
    np.testing.assert_allclose([[s for _, s in beams] for beams in got],
                               [[s for _, s in beams] for beams in want], rtol=1e-5, atol=1e-5)
    assert max(len(ids) for beams in got for ids, _ in beams) > 16, case  # a second cache phase
  memory, mask = ensemble.encode(np.asarray([[5, 6, 1]], "int32"))
  cache = ensemble.init_cache(memory, mask, 8)
  assert sorted(cache["decoder"]) == sorted(
      f"member_{i}.{name}" for i in (0, 1)
      for name in trained.init_cache(memory[0], mask, 8)["decoder"])


def test_the_decoders_ensemble_dirs(tiny_model_dir, tmp_path, capsys):
  """`--ensemble_dirs`: the model with a copy of itself writes the single model's translations;
  a model of another vocabulary, a folder that is no model directory and --score_file are
  errors (exit status 2) that say so."""
  model_dir, _ = tiny_model_dir
  copy = tmp_path / "copy"
  shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("xla_cache"))
  source = tmp_path / "in.en"
  source.write_text("A man is riding a bike .\nTwo women sing .\n", encoding="utf-8")
  flags = [f"--output_dir={model_dir}", f"--decode_from_file={source}",
           "--decode_hparams=beam_size=2,xla=false"]
  assert decoder_cli.main(flags + [f"--decode_to_file={tmp_path / 'one.de'}"]) == 0
  assert decoder_cli.main(flags + [f"--decode_to_file={tmp_path / 'two.de'}",
                                   f"--ensemble_dirs={copy}"]) == 0
  assert f"{copy}" in capsys.readouterr().err  # the decoding line names both checkpoints
  assert (tmp_path / "two.de").read_text() == (tmp_path / "one.de").read_text()

  from t2t_lite.data.vocab import SymbolVocab
  (copy / "vocab.model").write_bytes(SymbolVocab(10).model_proto)
  for extra, message in ((f"--ensemble_dirs={copy}", "has another vocabulary"),
                         (f"--ensemble_dirs={tmp_path / 'missing'}", "is not a model directory"),
                         (f"--score_file={source}", "no --ensemble_dirs")):
    argv = flags + [f"--decode_to_file={tmp_path / 'x.de'}", extra]
    if extra.startswith("--score_file"):
      argv += [f"--ensemble_dirs={model_dir}"]
    try:
      status = decoder_cli.main(argv)
    except SystemExit as e:
      status = e.code
    assert status == 2, extra
    assert message in capsys.readouterr().err, extra
