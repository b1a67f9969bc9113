"""Files and folders written through a temporary name and a rename (hparams.json, vocab.model,
flags.txt, best/, a .keras file, an imported model, the decoder's output) get the mode the umask
gives any new file, like the checkpoints TensorFlow writes beside them: readable by a server's
account, a colleague or a container where the user's other files are. The whole-run checks are
beside their runs: tests/test_keras_file.py (a training and a decode), tests/test_import_marian.py."""

import os
import stat

import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.training import best

from file_modes import modes_unlike_the_umasks


@pytest.fixture(params=[0o022, 0o027, 0o002], ids=["022", "027", "002"])
def mask(request):
  old = os.umask(request.param)
  yield request.param
  os.umask(old)


def mode(path):
  return stat.S_IMODE(os.lstat(path).st_mode)


def test_atomic_write_gives_the_file_the_umasks_mode(tmp_path, mask):
  path = tmp_path / "new" / "hparams.json"
  model_dir.atomic_write(str(path), "{}\n")
  assert mode(path) == 0o666 & ~mask
  os.chmod(path, 0o600)  # a rewrite is a new file: the umask's mode again, not the old file's
  model_dir.atomic_write(str(path), b"{}\n")
  assert mode(path) == 0o666 & ~mask and path.read_text() == "{}\n"
  assert not modes_unlike_the_umasks(tmp_path / "new")


def test_best_is_a_folder_of_the_umasks_mode(tmp_path, mask):
  (tmp_path / model_dir.HPARAMS_FILE).write_text("{}\n")
  checkpoint = tf.train.Checkpoint(model={"v": tf.Variable([1.0, 2.0])})
  saved = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=1).save(checkpoint_number=3)
  best.write_best(str(tmp_path), checkpoint, 3, {"metric": "loss", "value": 1.0}, saved=saved)
  best.write_best(str(tmp_path), checkpoint, 5, {"metric": "loss", "value": 0.5})
  assert mode(tmp_path / ".best-5") == 0o777 & ~mask
  assert not modes_unlike_the_umasks(tmp_path / ".best-5"), modes_unlike_the_umasks(tmp_path)
