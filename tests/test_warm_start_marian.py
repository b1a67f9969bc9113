"""Warm start from an imported OPUS-MT model (tests/test_import_marian.py builds one offline):
the new directory fine-tunes it on Multi30k in the imported vocabulary, building none."""

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("torch")
pytest.importorskip("transformers")

from t2t_lite import model_dir  # noqa: E402
from t2t_lite.bin import trainer  # noqa: E402
from test_import_marian import hf_model_dir, imported  # noqa: E402,F401  (the fixtures)


def test_warm_start_from_an_imported_opus_mt_model(imported, multi30k_slice, tmp_path):  # noqa: F811
  source, model, _ = imported
  out = tmp_path / "tuned"
  assert trainer.main(["--problem=translate_ende_multi30k", f"--raw_data_dir={multi30k_slice}",
                       f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}",
                       f"--warm_start_from={source}", "--train_steps=2", "--eval_steps=0",
                       "--local_eval_frequency=2"]) == 0
  assert not any((tmp_path / "data").glob("vocab.*"))  # no vocabulary of the problem's built
  assert (out / model_dir.VOCAB_FILE).read_bytes() == (source / model_dir.VOCAB_FILE).read_bytes()
  assert model_dir.read_model_dir(str(out))[1] == model_dir.read_model_dir(str(source))[1]
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-2")
  _, tuned, _ = model_dir.restore_model(str(out))
  before = model_dir.checkpointable(model)
  changed = [p for p, v in model_dir.checkpointable(tuned).items()
             if not np.array_equal(v.numpy(), before[p].numpy())]
  assert "shared_embedding/logits_bias" in changed
