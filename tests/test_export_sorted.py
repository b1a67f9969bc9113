"""The SavedModel decodes each request through slots refilled as sentences finish (decode hparam
`refill_slots`), or sorted by source length in sub-batches (`sub_batch_size`; with refill, the
sub-batches its sources are encoded in): either way its outputs are the decoder's, in request
order. (The refill search against the batch search on more cases: tests/test_refill_search.py.)"""

import json

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.bin import exporter as exporter_cli
from t2t_lite.decoding.translator import load_translator
from t2t_lite.export import saved_model
from t2t_lite.hparams import DecodeHParams

# Lengths out of order (sorted, the long one moves from second to last and the empty lines to the
# front), two empty lines, and widths in both buckets (16 and the limit 32, the long sentence
# truncated to it): with sub-batches of 2, four sub-batches, the last holding the request's widest;
# with 2 slots, five sentences to decode (the empty lines are not), so slots are refilled.
SENTENCES = ["A dog .", "Two men in orange vests are working on the side of a busy street while "
             "a woman with a red umbrella walks past them and a child waves at the camera .",
             "", "A woman in a blue dress is sitting on a bench in the park .", "A man .",
             "   ", "Three children are playing football on the green grass near a white house ."]
DECODE = "beam_size=2,extra_length=20,max_input_size=32,sub_batch_size=2"


# (xla, refill_slots): the refill search compiled with XLA, as the default export runs it, and the
# sorted sub-batches as a plain graph. (The refill search as a graph: tests/test_refill_search.py.)
@pytest.fixture(scope="module", params=[(True, 2), (False, 0)], ids=["xla-refill", "graph-sub-batches"])
def exported(request, tiny_model_dir, tiny_decode_defaults, tmp_path_factory):
  """(the loaded SavedModel's signatures, the decoder's translator), exported with sub-batches of
  2, refill slots or not, and the search compiled with XLA or as a plain graph. The translator, the
  reference, runs its search as a plain graph either way (tests/test_decoder.py: the XLA search
  gives the same beams), so this process compiles no search of its own."""
  model_dir, _ = tiny_model_dir
  export_dir = tmp_path_factory.mktemp("export_sorted")
  xla, slots = request.param
  decode = f"{DECODE},xla={str(xla).lower()},refill_slots={slots}"
  assert exporter_cli.main([f"--output_dir={model_dir}", f"--export_dir={export_dir}",
                            f"--decode_hparams={decode}", "--version=1"]) == 0
  recorded = json.loads((export_dir / "1" / "assets.extra" / saved_model.DECODE_HPARAMS_FILE).read_text())
  assert recorded["sub_batch_size"] == 2 and recorded["xla"] is xla
  assert recorded["refill_slots"] == slots
  translator, _ = load_translator(str(model_dir), tiny_decode_defaults.parse(decode).replace(xla=False))
  translator.warn = lambda message: None
  return tf.saved_model.load(str(export_dir / "1")).signatures, translator


def texts(tensor):
  return [t.decode("utf-8") for t in tensor.numpy().reshape(-1)]


def test_mixed_request_gives_the_decoders_outputs_in_request_order(exported):
  signatures, translator = exported
  # The widths really differ: both buckets are met.
  widths = [len(translator.vocab.encode(s)) + 1 for s in SENTENCES if s.strip()]
  assert min(widths) <= 16 and max(widths) > 32
  out = signatures["serving_default"](text=tf.constant(SENTENCES))
  served = texts(out["translations"])
  expected = translator.translate(SENTENCES)
  assert served == expected
  assert served[2] == served[5] == "" and out["scores"].numpy()[[2, 5]].tolist() == [0.0, 0.0]
  assert all(served[i] for i in (0, 1, 3, 4, 6))
  # Each sentence alone (a request smaller than a sub-batch: one batch, as before sub-batches)
  # gives the same translation and score as in the mixed request.
  for i in (0, 1, 4):
    alone = signatures["serving_default"](text=tf.constant(SENTENCES[i:i + 1]))
    assert texts(alone["translations"]) == [served[i]]
    np.testing.assert_allclose(alone["scores"].numpy(), out["scores"].numpy()[i:i + 1], atol=1e-4)
  # A request of exactly one sub-batch, in reverse length order.
  pair = [SENTENCES[6], SENTENCES[0]]
  assert texts(signatures["serving_default"](text=tf.constant(pair))["translations"]) == [
      served[6], served[0]]


def test_nbest_of_a_mixed_request_is_the_decoders(exported):
  signatures, translator = exported
  out = signatures["nbest"](text=tf.constant(SENTENCES))
  assert out["translations"].shape == (len(SENTENCES), 2)
  beams = translator.translate_beams(SENTENCES)
  assert texts(out["translations"]) == [text for line in beams for text, _ in line or [("", 0.0)] * 2]
  np.testing.assert_allclose(out["scores"].numpy().reshape(-1),
                             [s for line in beams for _, s in line or [("", 0.0)] * 2], atol=1e-4)


def test_sub_batch_size_is_a_power_of_two_or_off():
  assert DecodeHParams().parse("sub_batch_size=0").sub_batch_size == 0
  assert DecodeHParams().parse("sub_batch_size=32").sub_batch_size == 32
  with pytest.raises(ValueError, match="sub_batch_size must be a power of two"):
    DecodeHParams().parse("sub_batch_size=12")
