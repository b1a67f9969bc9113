"""Dev BLEU during training (`dev_bleu.bleu_evaluation`): which sentences it decodes, and what it
scores them against.

On the Multi30k slice (a real translation problem: its sources are not its targets), with the
Translator swapped for a stub that answers chosen lines, so no model decodes anything and the
expected score is known: the references themselves score 100, the sources or empty lines far
below. The stub records what it was asked to translate.
"""

import pytest
import sacrebleu

from t2t_lite.decoding import dev_bleu
from t2t_lite.problems import get_problem


def _lines(folder, name):
  return (folder / name).read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture
def stub_translator(monkeypatch):
  """Swaps dev_bleu's Translator for a stub. Returns (calls, built, answer): the source lists it
  was asked to translate and the (model, vocab, decode_hparams) it was built with, each in order,
  and a dict whose "fn", `fn(sources) -> lines`, says what it answers."""
  calls, built, answer = [], [], {}

  class StubTranslator:
    def __init__(self, model, vocab, decode_hparams):
      built.append((model, vocab, decode_hparams))

    def translate(self, sources):
      calls.append(list(sources))
      return answer["fn"](sources)

  monkeypatch.setattr(dev_bleu, "Translator", StubTranslator)
  return calls, built, answer


@pytest.fixture(scope="module")
def vocab_data_dir(multi30k_slice, tmp_path_factory):
  """A data dir holding the slice's vocabulary, built once for the module."""
  data_dir = str(tmp_path_factory.mktemp("dev_bleu_data"))
  get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_slice)).get_vocab(data_dir)
  return data_dir


@pytest.mark.parametrize("split,prefix", [("dev", "val"), ("test", "test_2016_flickr")])
def test_dev_bleu_decodes_the_first_examples_in_order_and_scores_them_against_the_targets(
    multi30k_slice, vocab_data_dir, stub_translator, split, prefix):
  """The first `examples` sources of the split, in file order, go to the Translator, once per
  evaluation; its lines are scored against the matching targets: the targets themselves give
  100, the sources (English against German) and empty lines far less, each exactly sacreBLEU's
  figure computed here."""
  calls, built, answer = stub_translator
  sources, targets = _lines(multi30k_slice, f"{prefix}.en"), _lines(multi30k_slice, f"{prefix}.de")
  assert sources[:7] != targets[:7]
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_slice))
  evaluate = dev_bleu.bleu_evaluation(problem, vocab_data_dir, 7, split=split)
  model = object()

  reference = dict(zip(sources, targets))
  answer["fn"] = lambda asked: [reference[s] for s in asked]
  assert evaluate(model) == {"bleu": pytest.approx(100.0)}
  assert calls == [sources[:7]]
  assert len(built) == 1 and built[0][0] is model and built[0][2].beam_size == 1
  assert built[0][1] is problem.get_vocab(vocab_data_dir)

  answer["fn"] = list
  bleu = evaluate(model)["bleu"]
  assert bleu == pytest.approx(sacrebleu.corpus_bleu(sources[:7], [targets[:7]]).score) and bleu < 20
  answer["fn"] = lambda asked: [""] * len(asked)
  assert evaluate(model) == {"bleu": 0.0}
  # The same model: the same Translator, the same sentences each time.
  assert calls == [sources[:7]] * 3 and len(built) == 1


def test_dev_bleu_with_more_examples_than_the_split_decodes_it_all(multi30k_slice, vocab_data_dir,
                                                                   stub_translator):
  """`examples` beyond the split's 100 pairs: all of them, once; a new model gets a new
  Translator."""
  calls, built, answer = stub_translator
  sources = _lines(multi30k_slice, "val.en")
  targets = _lines(multi30k_slice, "val.de")
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_slice))
  evaluate = dev_bleu.bleu_evaluation(problem, vocab_data_dir, 1000)
  reference = dict(zip(sources, targets))
  answer["fn"] = lambda asked: [reference[s] for s in asked]
  first, second = object(), object()
  assert evaluate(first) == evaluate(second) == {"bleu": pytest.approx(100.0)}
  assert calls == [sources] * 2 and len(sources) == 100
  assert [b[0] for b in built] == [first, second]
