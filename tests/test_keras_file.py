"""The native Keras format: a trained model (with moving averages of its weights) saved as
.keras with its hparams and vocabulary; keras.saving.load_model loads it and the decoder decodes
with it exactly as with the checkpoint."""

import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.bin import decoder, trainer

from file_modes import modes_unlike_the_umasks

MICRO = ("transformer_tiny,hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,"
         "batch_size=256,max_length=16,eval_bleu_examples=0,weight_ema_decay=0.9")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  out = tmp_path_factory.mktemp("keras_file") / "model"
  assert trainer.main(["--problem=algorithmic_copy", f"--output_dir={out}", f"--hparams={MICRO}",
                       "--train_steps=6", "--local_eval_frequency=3", "--eval_steps=1",
                       "--export_keras"]) == 0
  return out


def test_the_keras_file_round_trips_with_hparams_vocabulary_and_the_decoded_weights(trained):
  path = trained / "model.keras"
  loaded = keras.saving.load_model(str(path))  # Keras' own loader, nothing of ours around it
  best = trained / "best"  # the trainer exports its best checkpoint
  _, reference, _ = model_dir.restore_model(str(best))  # the moving averages, as decoding uses
  ours = model_dir.checkpointable(loaded)
  for name, variable in model_dir.checkpointable(reference).items():
    np.testing.assert_array_equal(ours[name].numpy(), variable.numpy(), err_msg=name)
  # Not only restore_model's view (save_keras restores with it too): the checkpoint's own moving
  # averages, read with TensorFlow's reader, which after 6 updates differ from its raw weights.
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(best)))

  def stored(root, name):  # TensorFlow's object-graph escaping: "." as "..", "/" as ".S"
    escaped = name.replace(".", "..").replace("/", ".S")
    return reader.get_tensor(f"{root}/{escaped}/.ATTRIBUTES/VARIABLE_VALUE")
  moved = 0
  for name, variable in ours.items():
    np.testing.assert_array_equal(variable.numpy(), stored(model_dir.EMA_ROOT, name), err_msg=name)
    moved += not np.array_equal(stored(model_dir.EMA_ROOT, name), stored("model", name))
  assert moved > len(ours) / 2, moved
  record, vocab, _ = model_dir.load_keras(str(path))
  assert record == model_dir.read_record(str(trained))
  assert vocab.model_proto == (trained / model_dir.VOCAB_FILE).read_bytes()
  batch = {"inputs": np.array([[5, 6, 7, 1]], "int32"), "targets": np.array([[5, 6, 7, 1]], "int32")}
  np.testing.assert_allclose(loaded(batch), reference(batch), rtol=1e-6, atol=1e-6)


def test_the_decoder_decodes_the_keras_file_as_the_checkpoint(trained, tmp_path):
  source = tmp_path / "in.txt"
  source.write_text("4 5 6 7\n9 9 3\n12 2 8 5 5\n", encoding="utf-8")
  outputs = {}
  for name, folder in (("checkpoint", trained / "best"), ("keras", trained / "model.keras")):
    assert decoder.main([f"--output_dir={folder}", f"--decode_from_file={source}",
                         f"--decode_to_file={tmp_path / name}", "--decode_hparams=beam_size=2"]) == 0
    outputs[name] = (tmp_path / name).read_text(encoding="utf-8")
  assert outputs["keras"] == outputs["checkpoint"] and len(outputs["keras"].splitlines()) == 3
  # What the training and the decodes wrote (hparams.json, vocab.model, best/, the .keras file,
  # the translations) has the mode of any new file, like TensorFlow's checkpoints beside them.
  assert not modes_unlike_the_umasks(trained, tmp_path / "checkpoint", tmp_path / "keras")


def test_a_file_that_is_not_ours_is_a_clear_error(tmp_path, capsys):
  other = tmp_path / "other.keras"
  with zipfile.ZipFile(other, "w") as archive:
    archive.writestr("config.json", "{}")
  assert decoder.main([f"--output_dir={other}", f"--decode_from_file={other}"]) == 2
  assert "not a .keras file written by t2t_lite" in capsys.readouterr().err
