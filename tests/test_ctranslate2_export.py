"""The CTranslate2 exporter against CTranslate2 itself: the exported model, run by `ctranslate2`
with pieces from `sentencepiece`, writes the decoder's tokens (greedy and beam 4), for each
architecture switch; int8 runs; what cannot be represented is refused with exit status 2."""

import json
import os

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")

import sentencepiece as spm  # noqa: E402

from t2t_lite import model_dir  # noqa: E402
from t2t_lite.bin import exporter  # noqa: E402
from t2t_lite.data.vocab import strip_ids  # noqa: E402
from t2t_lite.decoding.translator import load_translator  # noqa: E402
from t2t_lite.export import ctranslate2 as ct2_export  # noqa: E402
from t2t_lite.hparams import DecodeHParams  # noqa: E402
from t2t_lite.token_ids import PAD_ID  # noqa: E402
from t2t_lite.training.train_loop import Trainer  # noqa: E402

SOURCES = ["A man is riding a bike .", "Two dogs play in the snow while a child watches them .",
           "A woman .", "People are walking along the beach at sunset next to the water ."]
EXTRA = 12  # short outputs: random models run to the length limit, which must match too
XLA = False  # the decoder's search as a plain graph, not compiled (tests/test_decoder.py: the same beams)
PAD_LEAD = 10.0  # added to PAD's logits bias in variant_dir
INT8_SCORE_RTOL = 0.05  # int8 against float32 scores of the same tokens: at most 1.1% measured


def variant_dir(tiny_model_dir, folder, overrides, seed):
  """A model directory with the tiny model's problem and vocabulary, `overrides` applied to its
  hparams, and random weights (biases and norms random too), saved as checkpoint 0. A logits
  bias raises PAD's by PAD_LEAD: PAD would win steps of a random model, so never_predict_pad's
  mask decides tokens (without it PAD is about as likely as any other id, and never wins)."""
  source, _ = tiny_model_dir
  problem, hparams = model_dir.read_model_dir(str(source))
  hparams = hparams.parse(overrides)
  vocab = model_dir.load_vocab(str(source))
  model_dir.write_model_dir(str(folder), hparams, problem, {}, vocab.vocab_size)
  model_dir.write_vocab(str(folder), vocab)
  trainer = Trainer(hparams, vocab.vocab_size, str(folder))
  rng = np.random.default_rng(seed)
  for path, variable in model_dir.checkpointable(trainer.model).items():
    shape = tuple(variable.shape)
    if path.endswith(("gamma",)):
      variable.assign(1.0 + 0.2 * rng.standard_normal(shape).astype(np.float32))
    elif path.endswith(("beta", "bias", "bias_1", "bias_2", "logits_bias")):
      values = 0.2 * rng.standard_normal(shape).astype(np.float32)
      if path.endswith("logits_bias"):
        values[PAD_ID] += PAD_LEAD
      variable.assign(values)
    else:  # kernels [in, out] and tables [V or positions, d]: unit-variance products
      fan_in = shape[1] if "embeddings" in path else shape[0]
      variable.assign((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))
  trainer.save()
  return folder


def export(model, folder, *flags):
  assert exporter.main([f"--output_dir={model}", "--export_format=ctranslate2",
                        f"--export_dir={folder}", *flags]) == 0
  return folder


def ours(model, beam, alpha=0.0):
  """The decoder's token ids (up to EOS) for SOURCES."""
  translator, _ = load_translator(str(model), DecodeHParams(beam_size=beam, alpha=alpha,
                                                            extra_length=EXTRA, xla=XLA))
  vocab = translator.vocab
  sources = [vocab.encode(s) + [1] for s in SOURCES]
  results = translator.translate_ids(sources)
  ours.scores = [beams[0][1] for beams in results]
  return [beams[0][0] for beams in results], [len(s) for s in sources]


def theirs(folder, beam, lengths, compute_type="float32", alpha=0.0):
  """CTranslate2's token ids for SOURCES, with sentencepiece's pieces and nothing of t2t_lite:
  one sentence a call, so that each has t2t_lite's length limit (source + EOS + EXTRA)."""
  processor = spm.SentencePieceProcessor(model_file=os.path.join(folder, "source.spm"))
  translator = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute_type)
  vocabulary = read_vocabulary(folder)
  index = {piece: i for i, piece in enumerate(vocabulary)}
  out, theirs.scores = [], []
  for text, length in zip(SOURCES, lengths):
    result = translator.translate_batch([processor.encode(text, out_type=str)], beam_size=beam,
                                        length_penalty=alpha, max_decoding_length=length + EXTRA,
                                        return_end_token=True, return_scores=True)
    out.append([index[p] for p in result[0].hypotheses[0]])
    theirs.scores.append(result[0].scores[0])
  return out


def read_vocabulary(folder):
  with open(os.path.join(folder, "shared_vocabulary.json"), encoding="utf-8") as f:
    return json.load(f)


def same_tokens(a, b):
  """Both token lists, each up to and without EOS."""
  return [strip_ids(x) for x in a] == [strip_ids(np.array(y)) for y in b]


# Each architecture switch once, with random weights (biases and norms too); the trained model
# (test_trained_model_float32_and_int8) is the default layout: pre-norm, T2T's sinusoid, one table.
VARIANTS = {
    "post-norm (transformer_base_v1), paper sinusoid, separate tables": (
        "norm_type=post,position_encoding=sinusoid_paper,shared_embedding_and_softmax_weights=false"),
    "pre-norm, paper sinusoid in T2T's halves, shared source/target, separate softmax": (
        "position_encoding=sinusoid_paper_halves,shared_embedding_and_softmax_weights=false,"
        "shared_embedding=true"),
    "learned positions, Marian switches: biases, swish, no scale, PAD's row": (
        "position_encoding=learned,max_position=128,norm_type=post,attention_bias=true,"
        "logits_bias=true,ffn_activation=swish,scale_embeddings=false,decoder_start=pad_embedding,"
        "never_predict_pad=true,layer_norm_epsilon=1e-5"),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tiny_model_dir, tmp_path_factory):
  root = tmp_path_factory.mktemp("ct2_variant")
  model = variant_dir(tiny_model_dir, root / "model", VARIANTS[request.param],
                      seed=list(VARIANTS).index(request.param))
  return model, export(model, root / "ct2")


@pytest.mark.parametrize("beam", [1, 4])
def test_outputs_equal_the_decoders(variant, beam):
  """The same tokens and the same scores (alpha 0: sums of log-probabilities, about -100 here;
  they agree to 3e-6 of that). The LayerNorm epsilon moves neither measurably (1e-4 for 1e-6
  moved the scores by 2e-5 of themselves): CTranslate2's config.json must hold the model's."""
  model, folder = variant
  expected, lengths = ours(model, beam)
  assert same_tokens(expected, theirs(folder, beam, lengths))
  assert any(len(strip_ids(x)) > 3 for x in expected)  # real outputs, not all empty
  np.testing.assert_allclose(theirs.scores, ours.scores, rtol=1e-4)
  hparams = model_dir.read_model_dir(str(model))[1]
  config = json.loads((folder / "config.json").read_text())
  assert config["layer_norm_epsilon"] == hparams.layer_norm_epsilon


def test_trained_model_float32_and_int8(tiny_model_dir, tmp_path):
  """float32: the decoder's tokens. int8: float32's tokens on at least 3 of the 4 sentences, and
  where they agree, scores within INT8_SCORE_RTOL of float32's (they were on all 4, within 1.1%,
  greedy and beam 4). Hypotheses are never empty (return_end_token): non-empty proves nothing."""
  model, _ = tiny_model_dir
  folder = export(model, tmp_path / "f32")
  for beam in (1, 4):
    expected, lengths = ours(model, beam)
    assert same_tokens(expected, theirs(folder, beam, lengths))
    float32_scores = theirs.scores
  int8 = export(model, tmp_path / "int8", "--quantization=int8")
  assert os.path.getsize(int8 / "model.bin") < 0.5 * os.path.getsize(folder / "model.bin")
  quantized = theirs(int8, 4, lengths, compute_type="int8")
  agree = [same_tokens([x], [y]) for x, y in zip(expected, quantized)]
  assert sum(agree) >= 3, (expected, quantized)
  np.testing.assert_allclose(np.array(theirs.scores)[agree], np.array(float32_scores)[agree],
                             rtol=INT8_SCORE_RTOL)
  record = json.loads((folder / ct2_export.DECODE_FILE).read_text())
  defaults = model_dir.decode_defaults(model_dir.find_problem("translate_ende_multi30k"))
  assert record["decode_hparams"]["beam_size"] == defaults.beam_size
  assert defaults.alpha > 0 and record["translate_batch"] == {
      "beam_size": defaults.beam_size, "max_input_length": 256,
      "length_penalty": ct2_export.ctranslate2_length_penalty(defaults.alpha)}
  assert record["decode_hparams"]["extra_length"] == defaults.extra_length


def test_length_penalty_is_the_power_of_length_closest_to_gnmts():
  """Against a brute-force search: over the fitted lengths, the p whose p * log(length), shifted
  by its best constant (a constant factor on every penalty ranks alike), is nearest in squares to
  GNMT's alpha * log((5 + length) / 6); exactly 0 at alpha 0."""
  lengths = ct2_export.FIT_LENGTHS.astype(float)
  assert ct2_export.ctranslate2_length_penalty(0.0) == 0.0
  for alpha in (0.6, 1.0, 1.2, 2.0):
    target = alpha * np.log((5 + lengths) / 6)

    def error(p, target=target):
      residual = target - p * np.log(lengths)
      return np.sum((residual - residual.mean()) ** 2)
    grid = np.arange(0, 2.5, 0.0001)
    best = grid[np.argmin([error(p) for p in grid])]
    fitted = ct2_export.ctranslate2_length_penalty(alpha)
    assert abs(fitted - best) <= 2e-4 and fitted < alpha, (alpha, fitted, best)
    # Nearer to GNMT's than length ** alpha (what the exporter recorded before).
    assert error(fitted) < 0.1 * error(alpha)


def test_sampling_settings_are_carried_over():
  """Sampling (beam 1): translate_batch gets the temperature and top_k as CTranslate2's
  sampling_temperature and sampling_topk (0 in both: the whole distribution; CTranslate2's own
  default, 1, would be greedy search); beam search gets neither."""
  for top_k in (5, 0):
    options = ct2_export.translate_options(
        DecodeHParams(beam_size=1, sampling_temperature=0.7, top_k=top_k), 1024)
    assert options == {"beam_size": 1, "length_penalty": ct2_export.ctranslate2_length_penalty(0.6),
                       "max_input_length": 256,  # max_input_size's default, below 1024
                       "sampling_temperature": 0.7, "sampling_topk": top_k}
  options = ct2_export.translate_options(DecodeHParams(beam_size=4, top_k=5), 1024)
  assert "sampling_temperature" not in options and "sampling_topk" not in options


def test_refusals_exit_2(tiny_model_dir, tmp_path, capsys):
  model = variant_dir(tiny_model_dir, tmp_path / "model", "attention_key_channels=32", seed=9)
  assert exporter.main([f"--output_dir={model}", "--export_format=ctranslate2",
                        f"--export_dir={tmp_path / 'ct2'}"]) == 2
  assert "attention_key_channels=32" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "ct2") and not any(
      p.name.startswith(".tmp") for p in tmp_path.iterdir())
  trained, _ = tiny_model_dir
  assert exporter.main([f"--output_dir={trained}", "--export_format=ctranslate2",
                        f"--export_dir={tmp_path / 'q'}", "--quantization=int4"]) == 2
  assert "quantization must be one of" in capsys.readouterr().err
  export(trained, tmp_path / "once")
  assert exporter.main([f"--output_dir={trained}", "--export_format=ctranslate2",
                        f"--export_dir={tmp_path / 'once'}"]) == 2
  assert "exists already" in capsys.readouterr().err


def test_constrained_problem_is_refused():
  class Tree:  # any decoding constraint
    pass
  from t2t_lite.models.transformer import Transformer
  from t2t_lite.hparams import get_hparams
  model = Transformer(get_hparams("transformer_tiny", "num_hidden_layers=1"), vocab_size=20)
  with pytest.raises(ct2_export.ExportError, match="constrained=false"):
    ct2_export.check_convertible(model, DecodeHParams(), Tree())
  ct2_export.check_convertible(model, DecodeHParams())  # the same model without: fine



def test_imported_marian_model(marian_imported, tmp_path):
  """An imported Marian (OPUS-MT layout) model: post-norm, swish, biases, the logits bias, PAD's
  row as the decoder start, never PAD, its two SentencePiece models; and the text: CTranslate2's
  pieces joined by target.spm are the decoder's translations."""
  model = marian_imported
  folder = export(model, tmp_path / "ct2", "--decode_hparams=beam_size=4,alpha=0")
  assert sorted(p for p in os.listdir(folder) if p.endswith(".spm")) == ["source.spm", "target.spm"]
  expected, lengths = ours(model, 1)
  greedy = theirs(folder, 1, lengths)
  assert same_tokens(expected, greedy)
  # Beam 4: the same hypothesis, or a better-scoring one from t2t_lite, whose search admits any
  # of the 2 x beam candidates of a step that end in EOS to the finished set (T2T's rule);
  # CTranslate2's, like Hugging Face's, misses some (tests/test_import_marian.py).
  expected, lengths = ours(model, 4)
  got = theirs(folder, 4, lengths)
  same = [strip_ids(a) == strip_ids(b) for a, b in zip(expected, got)]
  for equal, score, their_score in zip(same, ours.scores, theirs.scores):
    assert equal or score > their_score + 1e-3, (score, their_score)
  translator, _ = load_translator(str(model), DecodeHParams(beam_size=1, extra_length=EXTRA, xla=XLA))
  target = spm.SentencePieceProcessor(model_file=str(folder / "target.spm"))
  vocabulary = read_vocabulary(folder)
  pieces = [[vocabulary[i] for i in strip_ids(ids)] for ids in greedy]
  assert [target.decode_pieces(p).strip() for p in pieces] == translator.translate(SOURCES)
  assert any(len(p) > 2 for p in pieces)


@pytest.fixture(scope="module")
def marian_imported(tmp_path_factory):
  """tests/test_import_marian.py's imported model (a random Marian model built offline, with its
  tokenizer; that module's fixtures, called as functions)."""
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from tests import test_import_marian as marian_tests  # pylint: disable=import-outside-toplevel
  hf_model_dir = marian_tests.hf_model_dir.__wrapped__(tmp_path_factory)
  return marian_tests.imported.__wrapped__(hf_model_dir, tmp_path_factory)[0]
