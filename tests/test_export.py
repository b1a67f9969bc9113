"""SavedModel export: layout, atomic write, and loading without t2t_lite in a fresh process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from t2t_lite.bin import exporter
from t2t_lite.decoding.translator import load_translator
from t2t_lite.export import saved_model
from t2t_lite.hparams import DecodeHParams

from conftest import TINY_EXPORT_DECODE

SENTENCES = ["A man is riding a bike .", "", "Two dogs play in the snow while a child watches them .",
             "A woman .", "A very long sentence " + "with many many words " * 80 + "."]

# Runs in a fresh interpreter where importing t2t_lite fails: the SavedModel must stand alone,
# loaded by the statements the exporter prints (`saved_model.load_hint`).
LOAD_SCRIPT = """
import json, sys
sys.modules["t2t_lite"] = None  # any import of t2t_lite now raises ImportError
exec(sys.argv[1])  # defines tf, model and translate
sentences = json.loads(sys.argv[2])
out = translate(text=tf.constant(sentences))
short = translate(text=tf.constant(sentences[:4:3]))  # another batch and width
nbest = model.signatures["nbest"](text=tf.constant(sentences))
text = lambda t: [x.decode("utf-8") for x in t.numpy().reshape(-1)]
print(json.dumps({"translations": text(out["translations"]), "scores": out["scores"].numpy().tolist(),
                  "short": text(short["translations"]), "nbest": text(nbest["translations"]),
                  "nbest_scores": nbest["scores"].numpy().tolist()}))
"""


@pytest.fixture(scope="module")
def exported(tiny_model_dir, tiny_export):
  """(model_dir, export folder): tests/conftest.py's `tiny_export` (beam 2, extra_length 20)."""
  return tiny_model_dir[0], tiny_export


def test_layout_is_tf_serving_versioned(exported):
  _, export_dir = exported
  assert sorted(os.listdir(export_dir)) == ["7"]
  assert os.path.exists(export_dir / "7" / "saved_model.pb")
  assert os.path.isdir(export_dir / "7" / "variables")
  # Beside it, what the graph decodes with, and the source widths it pads to: the last is its
  # source limit (the default max_input_size, 256, below the model's own), recorded once.
  extra = export_dir / "7" / "assets.extra"
  assert json.loads((extra / saved_model.DECODE_HPARAMS_FILE).read_text())["beam_size"] == 2
  assert json.loads((extra / saved_model.SHAPES_FILE).read_text()) == {
      "width_buckets": [16, 32, 64, 128, 256]}


def test_loads_without_t2t_lite_and_matches_the_decoder(exported, tiny_decode_defaults):
  model_dir, export_dir = exported
  result = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, saved_model.load_hint(str(export_dir / "7")),
                           json.dumps(SENTENCES)], capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  served = json.loads(result.stdout.strip().split("\n")[-1])
  # The reference runs the search as a plain graph (tests/test_decoder.py: the XLA search gives
  # the same beams); the SavedModel's is compiled by XLA, which the test's process need not repeat.
  translator, _ = load_translator(str(model_dir),
                                  tiny_decode_defaults.parse(f"{TINY_EXPORT_DECODE},xla=false"))
  translator.warn = lambda message: None
  assert served["translations"] == translator.translate(SENTENCES)
  assert served["translations"][1] == "" and served["scores"][1] == 0.0
  assert all(served["translations"][i] for i in (0, 2, 3, 4))
  assert served["short"] == translator.translate(SENTENCES[:4:3])
  beams = translator.translate_beams(SENTENCES)
  assert served["nbest"] == [text for line in beams for text, _ in line or [("", 0.0)] * 2]
  np.testing.assert_allclose([score for line in served["nbest_scores"] for score in line],
                             [s for line in beams for _, s in line or [("", 0.0)] * 2], atol=1e-4)


def test_search_is_one_xla_program_in_padded_shapes(exported):
  """The search runs compiled with XLA in the SavedModel (fast with no environment settings:
  docs/ctranslate2.md, "SavedModel speed"), on a few padded shapes."""
  _, export_dir = exported
  # The attr itself, set to true: TensorFlow writes `_XlaMustCompile` whenever jit_compile is
  # given, false included, so finding its name in the file says nothing.
  proto = saved_model_pb2.SavedModel()
  proto.ParseFromString((export_dir / "7" / "saved_model.pb").read_bytes())
  functions = proto.meta_graphs[0].graph_def.library.function
  compiled = [f.signature.name for f in functions
              if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b]
  assert compiled, "no function of the SavedModel is compiled with XLA"
  assert saved_model.width_buckets(256) == (16, 32, 64, 128, 256)
  assert saved_model.width_buckets(100) == (16, 32, 64, 100)
  assert [int(saved_model.padded_batch(n)) for n in (0, 1, 3, 4, 5, 33, 64, 65, 200)] == [
      1, 1, 4, 4, 8, 64, 64, 128, 256]


def test_saved_model_cli_lists_the_signature(exported):
  _, export_dir = exported
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  command = [cli] if os.path.exists(cli) else [
      sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]  # a venv without the script
  result = subprocess.run(command + ["show", "--all", "--dir", str(export_dir / "7")],
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr
  text = result.stdout
  assert "signature_def['serving_default']" in text
  assert "inputs['text']" in text and "DT_STRING" in text
  assert "outputs['translations']" in text and "outputs['scores']" in text


def test_failed_export_leaves_no_version_behind(tiny_model_dir, tmp_path, monkeypatch):
  model_dir, _ = tiny_model_dir
  real_save = tf.saved_model.save

  def save_then_fail(*args, **kwargs):  # a failure after the files are written
    real_save(*args, **kwargs)
    assert os.listdir(tmp_path)
    raise RuntimeError("injected failure during export")

  monkeypatch.setattr(tf.saved_model, "save", save_then_fail)
  # One width bucket (a source limit of 16): the graph traces a search per bucket, and what is
  # checked is the rename, not the graph.
  with pytest.raises(RuntimeError, match="injected failure"):
    saved_model.export(str(model_dir), str(tmp_path), DecodeHParams(beam_size=1, max_input_size=16),
                       version=3)
  assert os.listdir(tmp_path) == []
  with pytest.raises(ValueError, match="must be a number"):
    saved_model.export(str(model_dir), str(tmp_path), version="v1")


def test_the_exporter_prints_the_statements_that_load_its_export(tiny_model_dir, tmp_path, monkeypatch,
                                                                capsys):
  """Its last lines name the version's folder and the Python that loads it (the statements
  test_loads_without_t2t_lite_and_matches_the_decoder runs with t2t_lite unimportable)."""
  model_dir, _ = tiny_model_dir

  def save_nothing(module, path, signatures):  # the layout only: no graph is traced
    os.makedirs(path)
    open(os.path.join(path, "saved_model.pb"), "wb").close()

  monkeypatch.setattr(tf.saved_model, "save", save_nothing)
  final = saved_model.export(str(model_dir), str(tmp_path), DecodeHParams(beam_size=1, max_input_size=16),
                             version=5)
  assert final == str(tmp_path / "5")
  out = capsys.readouterr().out
  assert f"exported {model_dir} to {final}\n" in out
  assert f"{saved_model.load_hint(final)}; translate(" in out
  assert saved_model.load_hint(final).startswith("import tensorflow as tf, tensorflow_text; ")


def test_an_existing_version_is_refused_and_kept(tiny_model_dir, tmp_path, capsys):
  """TF Serving may be serving EXPORT_DIR/<version>: exporting that version again exits 2 and
  leaves it as it was (written_atomically would replace it). So do the flags of the other
  format (--quantization, CTranslate2's --version) and a version that is not a number, before
  anything is written."""
  model_dir, _ = tiny_model_dir
  served = tmp_path / "7" / "saved_model.pb"
  served.parent.mkdir()
  served.write_bytes(b"being served")
  flags = [f"--output_dir={model_dir}", f"--export_dir={tmp_path}",
           "--decode_hparams=beam_size=1,max_input_size=16"]  # one width bucket, if it traced
  assert exporter.main(flags + ["--version=7"]) == 2
  assert "exists already" in capsys.readouterr().err
  assert exporter.main(flags + ["--version=8", "--quantization=int8"]) == 2
  assert "--quantization applies to --export_format=ctranslate2" in capsys.readouterr().err
  assert exporter.main([f"--output_dir={model_dir}", f"--export_dir={tmp_path / 'ct2'}",
                        "--export_format=ctranslate2", "--version=8"]) == 2
  assert "--version names SavedModel versions" in capsys.readouterr().err
  assert exporter.main(flags + ["--version=v8"]) == 2  # a usage error, not a traceback
  assert "export version must be a number" in capsys.readouterr().err
  assert os.listdir(tmp_path) == ["7"] and os.listdir(served.parent) == ["saved_model.pb"]
  assert served.read_bytes() == b"being served"
