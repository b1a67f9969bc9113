"""T2T's commands as a T2T user types them: the decoder's T2T form, n-best, interactive decoding,
scoring, the exporter's T2T form and n-best signature, unknown names, every flag's help.

On the tiny model of conftest (poor translations: the plumbing is what is checked).
"""

import os
import select
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_TEST_HPARAMS

from t2t_lite import model_dir as model_dir_lib
from t2t_lite.bin import (attention, avg_all, avg_checkpoints, bleu, datagen, decoder, exporter,
                          trainer)
from t2t_lite.data import token_shards
from t2t_lite.decoding import scoring
from t2t_lite.decoding.translator import Translator, encode_sources, load_translator, make_search_fn
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID
from t2t_lite.training import average

SOURCES = ["A man is riding a bike .", "", "Two dogs play in the snow .", "A woman sings ."]
T2T_NAMES = ["--problem=translate_ende_multi30k", "--model=transformer",
             "--hparams_set=transformer_tiny", f"--hparams={TINY_TEST_HPARAMS}"]
# max_input_size=16, above SOURCES' subwords: the exported graph has one width bucket, so one
# search to trace (a search per bucket up to the default limit 256 costs several).
NBEST = "beam_size=3,alpha=0.6,extra_length=12,max_input_size=16"
FAST = "xla=false"  # a plain graph: traced, not compiled (tests/test_decoder.py checks xla = graph)


def exit_status(main, argv):
  """A command's exit status, whether main returns it or raises SystemExit."""
  try:
    return main(argv)
  except SystemExit as e:
    return e.code


@pytest.fixture(scope="module")
def model(tiny_model_dir, tmp_path_factory):
  """A copy of the tiny model directory (the exporter writes into it) and its data dir."""
  source, data = tiny_model_dir
  copy = tmp_path_factory.mktemp("t2t_commands") / "model"
  shutil.copytree(source, copy)
  return copy, data


def test_decoder_t2t_form_writes_t2t_nbest_equal_to_the_saved_models(model, tmp_path, capsys):
  """T2T's walkthrough decode command, with T2T's n-best format, and T2T's exporter command; the
  SavedModel's nbest signature gives the same beams and scores."""
  model_dir, data_dir = model
  source = tmp_path / "in.en"
  source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
  out = tmp_path / "out.de"
  assert decoder.main([f"--data_dir={data_dir}", *T2T_NAMES, f"--output_dir={model_dir}",
                       f"--decode_hparams={NBEST},{FAST},return_beams=true,write_beam_scores=true",
                       f"--decode_from_file={source}", f"--decode_to_file={out}"]) == 0
  assert "warning" not in capsys.readouterr().err  # the names agree with hparams.json
  rows = out.read_text(encoding="utf-8").split("\n")[:-1]
  assert len(rows) == len(SOURCES) and rows[1] == ""

  assert exporter.main([*T2T_NAMES, f"--data_dir={data_dir}", f"--output_dir={model_dir}",
                        f"--decode_hparams={NBEST}", "--version=5"]) == 0
  assert os.path.exists(model_dir / "export" / "5" / "saved_model.pb")  # T2T's OUTPUT_DIR/export
  loaded = tf.saved_model.load(str(model_dir / "export" / "5"))
  nbest = loaded.signatures["nbest"](text=tf.constant(SOURCES))
  texts = [[t.decode("utf-8") for t in row] for row in nbest["translations"].numpy()]
  scores = nbest["scores"].numpy()
  assert scores.shape == (len(SOURCES), 3)
  for row, text_row, score_row in zip(rows, texts, scores):
    if not row:
      continue
    fields = row.split("\t")  # T2T: text<TAB>score<TAB>text<TAB>score...
    assert fields[0::2] == text_row
    assert fields[1::2] == [f"{s:.2f}" for s in score_row]
    # Best first, every row (an -inf, an empty slot, sorts last like any other score).
    assert list(score_row) == sorted(score_row, reverse=True), score_row
  top = loaded.signatures["serving_default"](text=tf.constant(SOURCES))
  assert [t.decode("utf-8") for t in top["translations"].numpy()] == [r[0] for r in texts]
  # write_beam_scores without return_beams: the best translation and its score, as T2T's
  # dataset decoding writes them.
  assert decoder.main([f"--output_dir={model_dir}", f"--decode_hparams={NBEST},{FAST},write_beam_scores=true",
                       f"--decode_from_file={source}", f"--decode_to_file={out}"]) == 0
  best = out.read_text(encoding="utf-8").split("\n")[:-1]
  assert best == [f"{t[0]}\t{s[0]:.2f}" if line else "" for t, s, line in zip(texts, scores, SOURCES)]


def test_recorded_names_are_checked(model, capsys):
  model_dir, _ = model
  assert exit_status(decoder.main, [f"--output_dir={model_dir}",
                                    "--problem=translate_ende"]) == 2
  assert "was trained on translate_ende_multi30k" in capsys.readouterr().err
  # T2T's hparams.json wins over --hparams_set; a difference is a warning.
  assert exit_status(decoder.main, [f"--output_dir={model_dir}", "--hparams_set=transformer_base",
                                    "--score_file=/nonexistent"]) == 2
  err = capsys.readouterr().err
  assert "other hparams" in err and "'hidden_size': (64, 512)" in err


@pytest.mark.parametrize("main, argv, suggestion", [
    (trainer.main, ["--problem=translate_ende_multi30", "--output_dir=x"], "translate_ende_multi30k"),
    (trainer.main, ["--problem=translate_ende_multi30k", "--hparams_set=transformer_tinny",
                    "--output_dir=x"], "transformer_tiny"),
    (trainer.main, ["--problem=translate_ende_multi30k", "--model=transfomer", "--output_dir=x"],
     "transformer"),
    (datagen.main, ["--problem=translate_enfr_wmt64k", "--data_dir=x"], "translate_enfr_wmt8k"),
    (datagen.main, ["--problem=translate_enfr_wmt_small16k", "--data_dir=x"],
     "translate_enfr_wmt_small8k"),
    (decoder.main, ["--problem=translate_ende_multi3k"], "translate_ende_multi30k"),
    (decoder.main, ["--hparams_set=transformer_tinny"], "transformer_tiny"),
    (decoder.main, ["--model=transfomer"], "transformer"),
    (exporter.main, ["--hparams_set=transformer_bse"], "transformer_base"),
    (decoder.main, ["--decode_hparams=beam_sise=2"], "beam_size"),
])
def test_unknown_names_exit_2_with_a_suggestion(model, main, argv, suggestion, capsys):
  model_dir, _ = model
  if main in (decoder.main, exporter.main):
    argv = [*argv, f"--output_dir={model_dir}"]
  assert exit_status(main, argv) == 2
  assert f"Did you mean '{suggestion}'" in capsys.readouterr().err


def bad_raw_data(folder):
  """A Multi30k folder whose train.de has one line fewer than train.en."""
  folder.mkdir()
  (folder / "train.en").write_text("A man .\nA dog .\n", encoding="utf-8")
  (folder / "train.de").write_text("Ein Mann .\n", encoding="utf-8")
  return folder


@pytest.mark.parametrize("main, argv, message", [
    (trainer.main, ["--train_steps=-5"], "--train_steps must be >= 0"),
    (trainer.main, ["--output_dir={tmp}/a_file"], "is a file; give a directory"),
    (trainer.main, ["--raw_data_dir={tmp}/none"], "missing data file {tmp}/none/train.en"),
    (trainer.main, ["--raw_data_dir={bad}"], "train.en has 2 lines, {bad}/train.de has 1"),
    (datagen.main, ["--raw_data_dir={bad}"], "train.en has 2 lines, {bad}/train.de has 1"),
    (datagen.main, ["--raw_data_dir={bad}", "--splits=train,bogus"], "unknown split 'bogus'"),
    (datagen.main, ["--raw_data_dir={bad}", "--splits=,"], "--splits names no split"),
    (datagen.main, ["--raw_data_dir={bad}", "--train_shards=0"], "--train_shards must be >= 1"),
])
def test_bad_data_and_numbers_exit_2_with_what_was_wrong(tmp_path, main, argv, message, capsys):
  """Raw files that are missing or do not pair line for line, a typo in --splits, and numbers out
  of range: `error: ...` and exit status 2, no traceback (the trainer checked the same raw files
  inside its data pipeline and datagen in its shard writer, both with a traceback and status 1)."""
  bad = bad_raw_data(tmp_path / "bad")
  (tmp_path / "a_file").write_text("not a directory\n")
  fill = lambda a: a.format(tmp=tmp_path, bad=bad)  # noqa: E731
  common = ["--problem=translate_ende_multi30k", f"--data_dir={tmp_path / 'data'}"]
  if main is trainer.main:
    common += [f"--output_dir={tmp_path / 'model'}", "--hparams=multi30k_tiny", "--train_steps=1"]
  assert exit_status(main, [*common, *map(fill, argv)]) == 2
  err = capsys.readouterr().err
  assert "error: " in err and fill(message) in err and "Traceback" not in err, err
  assert not os.path.exists(tmp_path / "model" / "ckpt-1.index")


def test_datagen_writes_the_train_split_into_train_shards_files(model, multi30k_slice, tmp_path):
  """--train_shards: the train split in that many TFRecord files, the pairs round-robin over
  them, and the manifest naming them (a datagen writing its default 8 whatever the flag said
  passed every test that gave the flag only out of range)."""
  _, vocab_dir = model
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  for name in os.listdir(vocab_dir):  # the slice's vocabulary, built once per session
    if name.startswith("vocab."):
      shutil.copy(vocab_dir / name, data_dir / name)
  assert datagen.main(["--problem=translate_ende_multi30k", f"--data_dir={data_dir}",
                       f"--raw_data_dir={multi30k_slice}", "--splits=train", "--train_shards=3"]) == 0
  names = token_shards.shard_names("translate_ende_multi30k", "train", 3)
  assert names[-1] == "translate_ende_multi30k-train-00002-of-00003.tfrecord"
  assert sorted(n for n in os.listdir(data_dir) if n.endswith(".tfrecord")) == names
  train = token_shards.read_manifest(str(data_dir), "translate_ende_multi30k")["splits"]["train"]
  pairs = len((multi30k_slice / "train.en").read_text(encoding="utf-8").splitlines())
  assert train["files"] == names and train["pairs"] == pairs
  counts = [sum(1 for _ in tf.data.TFRecordDataset(str(data_dir / name))) for name in names]
  assert counts == [len(range(i, pairs, 3)) for i in range(3)], counts


@pytest.mark.parametrize("main, argv, message", [
    (trainer.main, ["--problem=translate_ende_multi30k", "--output_dir={file}"],
     "--output_dir {file} is a file"),
    (datagen.main, ["--problem=translate_ende_multi30k", "--data_dir={file}"],
     "--data_dir {file} is a file"),
    (decoder.main, ["--output_dir={model}", "--decode_from_file={dir}"],
     "--decode_from_file {dir} is a directory"),
    (decoder.main, ["--output_dir={model}", "--decode_from_file={file}", "--decode_to_file={dir}"],
     "--decode_to_file {dir} is a directory"),
    (decoder.main, ["--output_dir={model}", "--score_file={dir}"], "--score_file {dir} is a directory"),
    (bleu.main, ["--translation={dir}", "--reference={file}"], "--translation {dir} is a directory"),
    (bleu.main, ["--translation={file}", "--reference={dir}"], "--reference {dir} is a directory"),
    (avg_checkpoints.main, ["--output_dir={model}", "--num_last_checkpoints=1", "--avg_dir={file}"],
     "--avg_dir {file} is a file"),
    (exporter.main, ["--output_dir={model}", "--export_dir={file}"], "--export_dir {file} is a file"),
    (avg_all.main, ["--model_dir={model}", "--output_dir={file}", "--n=1"], "--output_dir {file} is a file"),
    (avg_all.main, ["--model_dir={dir}/none", "--output_dir={dir}/avg"],
     "--model_dir {dir}/none does not exist"),
    (exporter.main, ["--output_dir={model}", "--export_dir={file}", "--export_format=ctranslate2"],
     "--export_dir {file} is a file"),
])
def test_a_path_of_the_wrong_kind_exits_2_before_any_work(model, tmp_path, main, argv, message, capsys):
  """A directory where a file is read or written, a file where a directory is written: refused
  before the model loads (the decoder used to translate the whole file first, then fail to rename
  its output onto the directory, with a traceback)."""
  model_path, _ = model
  (tmp_path / "dir").mkdir()
  (tmp_path / "file").write_text("A man .\n")
  fill = lambda a: a.format(model=model_path, dir=tmp_path / "dir", file=tmp_path / "file")  # noqa: E731
  assert exit_status(main, list(map(fill, argv))) == 2
  err = capsys.readouterr().err
  assert f"error: {fill(message)}; give " in err and "Traceback" not in err, err
  assert sorted(os.listdir(tmp_path)) == ["dir", "file"] and not os.listdir(tmp_path / "dir")


@pytest.mark.parametrize("main, argv", [
    (decoder.main, ["--decode_from_file={file}"]),
    (exporter.main, []),
    (exporter.main, ["--export_format=ctranslate2"]),
    (attention.main, ["--source=A man .", "--out_dir={tmp}/pictures"]),
])
def test_a_checkpoint_path_that_does_not_exist_exits_2_naming_the_kept_ones(model, tmp_path, main, argv,
                                                                            capsys):
  """--checkpoint_path of a checkpoint that is not there (a typo, a step the trainer no longer
  keeps): TensorFlow's NotFoundError was a traceback and status 1."""
  model_path, _ = model
  (tmp_path / "file").write_text("A man .\n")
  kept = sorted((f.name[:-len(".index")] for f in model_path.glob("ckpt-*.index")),
                key=lambda name: int(name.split("-")[1]))
  argv = [a.format(file=tmp_path / "file", tmp=tmp_path) for a in argv]
  assert exit_status(main, [f"--output_dir={model_path}", f"--checkpoint_path={model_path}/ckpt-999",
                            *argv]) == 2
  err = capsys.readouterr().err
  assert f"error: no checkpoint {model_path}/ckpt-999 " in err and "Traceback" not in err, err
  assert err.rstrip().endswith(f"{model_path} has {', '.join(kept)}"), err


@pytest.mark.parametrize("command", [trainer, decoder, datagen, exporter, avg_checkpoints, avg_all,
                                     bleu, attention])
def test_every_flag_has_help_and_its_default(command):
  parser = command.build_parser()
  for action in parser._actions:
    if action.help == "==SUPPRESS==" or action.dest == "help":
      continue
    assert action.help, f"{action.option_strings} has no help"
    formatted = parser.formatter_class("x")._get_help_string(action)
    assert "(default" in formatted, f"{action.option_strings} does not show its default"


def _eos_at_best(base):
  """`base` with the EOS logit raised to each position's best: the 30-step model rarely ranks
  EOS high enough to finish a hypothesis. Both the search and the scorer see this model."""
  from keras import ops

  def bonus(logits):
    eos = ops.one_hot(EOS_ID, base.vocab_size)
    return logits + eos * (ops.max(logits, axis=-1, keepdims=True) - logits[..., EOS_ID:EOS_ID + 1])

  class EosAtBest:
    vocab_size, config = base.vocab_size, base.config
    encode, init_cache, output_projection = base.encode, base.init_cache, base.output_projection

    def decode_step(self, *args, **kwargs):
      logits, cache = base.decode_step(*args, **kwargs)
      return bonus(logits), cache

    def __call__(self, features, training=False):
      return bonus(base(features, training=training))

  return EosAtBest()


def test_scores_equal_the_beam_searchs_own_scores(model):
  """Forced decoding (a teacher-forced pass) gives each finished beam the score the cached
  beam search gave it: log-probability over GNMT's length penalty."""
  model_dir, _ = model
  _, base, _ = model_dir_lib.restore_model(str(model_dir))
  vocab = model_dir_lib.load_vocab(str(model_dir))
  scored_model = _eos_at_best(base)
  alpha = 0.6
  sources = [vocab.encode(s) + [EOS_ID] for s in SOURCES if s]
  batch = np.zeros((len(sources), max(map(len, sources))), np.int32)
  for row, ids in enumerate(sources):
    batch[row, :len(ids)] = ids
  search = make_search_fn(scored_model, DecodeHParams(beam_size=4, alpha=alpha, extra_length=10),
                          1024)
  ids, scores = (np.asarray(t) for t in search(batch))
  finished = [(row, beam, list(ids[row, beam][:list(ids[row, beam]).index(EOS_ID)]))
              for row in range(len(sources)) for beam in range(4) if EOS_ID in ids[row, beam]]
  assert len(finished) >= 4
  forced = scoring.Scorer(scored_model, alpha, batch_size=3).score_ids(
      [sources[row] for row, _, _ in finished], [target for _, _, target in finished])
  np.testing.assert_allclose(forced, [scores[row, beam] for row, beam, _ in finished], atol=2e-4)


def _forced_log_prob(base, vocab, source, target):
  """(log P(target + EOS | source) from `base`'s teacher-forced pass in float64 numpy, the
  number of target tokens with EOS)."""
  target_ids = vocab.encode(target) + [EOS_ID]
  logits = base({"inputs": np.array([vocab.encode(source) + [EOS_ID]]),
                 "targets": np.array([target_ids])}, training=False)
  logits = np.asarray(logits, np.float64)[0]
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return sum(log_probs[t, token] for t, token in enumerate(target_ids)), len(target_ids)


def test_score_file_equals_a_teacher_forced_pass(model, tmp_path, capsys):
  """`--score_file`: each line's score is log P(target + EOS | source) from the model's full
  teacher-forced pass, over ((5 + len) / 6) ** alpha; alpha=0 gives the log-probability. A line
  with an empty side gets its score too (the last two: a scorer dropping them wrote 3 scores, and
  a zip of 3 scores with 5 pairs checked only the first 3)."""
  model_dir, _ = model
  _, base, _ = model_dir_lib.restore_model(str(model_dir))
  vocab = model_dir_lib.load_vocab(str(model_dir))
  pairs = [("A man is riding a bike .", "Ein Mann fährt Fahrrad ."), ("A dog .", "Ein Hund ."),
           ("Two women sing a song in the park .", "Zwei Frauen singen ein Lied im Park ."),
           ("", "Leer ."), ("A cat .", "")]
  path = tmp_path / "pairs.tsv"
  path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
  for alpha in (0.0, 0.6):
    out = tmp_path / f"scores.{alpha}"
    assert decoder.main([f"--output_dir={model_dir}", f"--score_file={path}",
                         f"--decode_to_file={out}", f"--decode_hparams=alpha={alpha},batch_size=2"]) == 0
    written = [float(line) for line in out.read_text().split("\n")[:-1]]
    assert len(written) == len(pairs), written
    for (source, target), score in zip(pairs, written):
      total, length = _forced_log_prob(base, vocab, source, target)
      assert score == pytest.approx(total / ((5 + length) / 6) ** alpha, abs=2e-4)
  path.write_text("no tab here\n", encoding="utf-8")
  assert decoder.main([f"--output_dir={model_dir}", f"--score_file={path}"]) == 2
  assert "line 1 has 0 tabs" in capsys.readouterr().err


def test_checkpoint_path_and_keep_timestamp(model, tmp_path, capsys):
  """T2T's --checkpoint_path: the decoder reads that checkpoint, not the latest (its --score_file
  scores are the first checkpoint's teacher-forced log-probabilities, which the latest's are not);
  --keep_timestamp gives --decode_to_file the modification time of that checkpoint's .index
  (set here to a time of its own: 2001-09-09)."""
  model_dir, _ = model
  steps = sorted(int(n[5:-6]) for n in os.listdir(model_dir) if n.startswith("ckpt-") and
                 n.endswith(".index"))
  first = str(model_dir / f"ckpt-{steps[0]}")
  vocab = model_dir_lib.load_vocab(str(model_dir))
  pair = ("A man is riding a bike .", "Ein Mann fährt Fahrrad .")
  path = tmp_path / "pair.tsv"
  path.write_text("\t".join(pair) + "\n", encoding="utf-8")
  expected = {}
  for checkpoint in (first, None):
    expected[checkpoint], _ = _forced_log_prob(model_dir_lib.restore_model(str(model_dir), checkpoint)[1],
                                               vocab, *pair)
    out = tmp_path / "score"
    assert decoder.main([f"--output_dir={model_dir}", f"--score_file={path}", f"--decode_to_file={out}",
                         "--decode_hparams=alpha=0", *([f"--checkpoint_path={checkpoint}"] if checkpoint
                                                       else [])]) == 0
    assert float(out.read_text()) == pytest.approx(expected[checkpoint], abs=2e-4)
  assert abs(expected[first] - expected[None]) > 1e-2   # the checkpoints tell apart
  os.utime(first + ".index", (1_000_000_000, 1_000_000_000))
  source, out = tmp_path / "in.en", tmp_path / "out.de"
  source.write_text(pair[0] + "\n", encoding="utf-8")
  capsys.readouterr()
  assert decoder.main([f"--output_dir={model_dir}", f"--decode_from_file={source}",
                       f"--decode_to_file={out}", f"--checkpoint_path={first}", "--keep_timestamp",
                       f"--decode_hparams=beam_size=1,extra_length=2,{FAST}"]) == 0
  assert f"decoding 1 records with {first} " in capsys.readouterr().err
  assert os.path.getmtime(out) == 1_000_000_000


def _read_line(stream, timeout=600):
  ready, _, _ = select.select([stream], [], [], timeout)
  assert ready, "no answer: the decoder did not translate the line before the next was sent"
  return stream.readline().decode("utf-8").rstrip("\n")


def test_interactive_answers_each_line_before_the_next_is_sent(model, tiny_decode_defaults):
  """Each answer is its own line's translation. The 30-step model can write the same text for
  different lines (tests/test_decoder.py), so the answers carry their scores
  (`write_beam_scores`): a decoder answering every line with the first line's translation fails."""
  model_dir, _ = model
  lines = ["A man is riding a bike .", "Two dogs play in the snow ."]
  decode = f"beam_size=2,extra_length=10,write_beam_scores=true,{FAST}"
  process = subprocess.Popen(
      [sys.executable, "-m", "t2t_lite.bin.decoder", f"--output_dir={model_dir}",
       "--decode_interactive", f"--decode_hparams={decode}"],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
  try:
    answers = []
    for line in lines:
      process.stdin.write((line + "\n").encode("utf-8"))
      process.stdin.flush()  # the pipe stays open: only an answer per line lets the test go on
      answers.append(_read_line(process.stdout))
    process.stdin.write(b"q\n")
    process.stdin.flush()
    assert process.wait(timeout=120) == 0
  finally:
    process.kill()
  # The command's decode hparams: the problem's defaults (alpha 1.2), then --decode_hparams.
  translator, _ = load_translator(str(model_dir), tiny_decode_defaults.parse(decode))
  expected = translator.translate(lines)
  assert len(set(expected)) == len(lines), expected
  assert answers == expected


def test_max_input_size_nonpositive_means_no_limit(model, tmp_path, capsys):
  model_dir, _ = model
  _, base, _ = model_dir_lib.restore_model(str(model_dir))
  vocab = model_dir_lib.load_vocab(str(model_dir))
  long_line = " ".join(["A dog runs across the green field ."] * 40)
  length = len(vocab.encode(long_line)) + 1
  assert 256 < length < 1023
  for size in (-1, 0):
    translator = Translator(base, vocab, DecodeHParams(beam_size=1, max_input_size=size))
    assert translator.limit == base.config.max_position - 1
    warnings = []
    assert len(encode_sources(vocab, [long_line], translator.limit, warnings.append)[0]) == length
    assert not warnings
  source = tmp_path / "long.en"
  source.write_text(long_line + "\n", encoding="utf-8")
  out = tmp_path / "out.de"
  assert decoder.main([f"--output_dir={model_dir}", f"--decode_from_file={source}",
                       f"--decode_to_file={out}",
                       f"--decode_hparams=beam_size=1,extra_length=5,max_input_size=-1,{FAST}"]) == 0
  assert "warning" not in capsys.readouterr().err  # (the default, 256, warns: test_decoder.py)
  assert out.read_text(encoding="utf-8").count("\n") == 1


def test_delimiter_num_samples_and_num_decodes(model, tmp_path, tiny_decode_defaults):
  """T2T's decode hparams: records split by `delimiter` (stripped), the first `num_samples`
  decoded, `num_decodes` passes one after another, each record ended by the delimiter. Each
  translation carries its score (`write_beam_scores`), so the two records' outputs differ even
  where the 30-step model writes the same text: a split repeating a record fails."""
  model_dir, _ = model
  source = tmp_path / "in.txt"
  source.write_text("A man .; Two dogs play .;\nA cat .;", encoding="utf-8")
  out = tmp_path / "out.txt"
  decode = f"beam_size=1,extra_length=8,write_beam_scores=true,{FAST}"
  assert decoder.main([f"--output_dir={model_dir}", f"--decode_from_file={source}",
                       f"--decode_to_file={out}",
                       f"--decode_hparams={decode},delimiter=;,num_samples=2,num_decodes=2"]) == 0
  translator, _ = load_translator(str(model_dir), tiny_decode_defaults.parse(decode))
  once = translator.translate(["A man .", "Two dogs play ."])
  assert len(set(once)) == 2, once
  assert out.read_text(encoding="utf-8") == "".join(t + ";" for t in once + once)


def _mean_of(paths, output):
  """Every model variable of checkpoint `output` is the mean of the ones in `paths`."""
  readers = [tf.train.load_checkpoint(p) for p in paths]
  names = [n for n, _ in tf.train.list_variables(output)
           if n.startswith("model/") and n.endswith("VARIABLE_VALUE")]
  assert names
  averaged = tf.train.load_checkpoint(output)
  for name in names:
    np.testing.assert_allclose(averaged.get_tensor(name),
                               np.mean([r.get_tensor(name) for r in readers], axis=0), rtol=1e-6)


def test_averaging_takes_t2ts_flags(model, tmp_path):
  """T2T's avg_checkpoints: --prefix (the model directory, or prepended to --checkpoints) and
  --output_path; T2T's t2t-avg-all: every window of --n checkpoints, from --min_steps on."""
  model_dir, _ = model
  steps = sorted(int(n[5:-6]) for n in os.listdir(model_dir) if n.startswith("ckpt-") and
                 n.endswith(".index"))
  assert len(steps) >= 3
  ckpt = lambda step: str(model_dir / f"ckpt-{step}")
  assert avg_checkpoints.main([f"--prefix={model_dir}/", "--num_last_checkpoints=2",
                               f"--output_path={tmp_path}/avg/averaged.ckpt"]) == 0
  _mean_of([ckpt(s) for s in steps[-2:]], f"{tmp_path}/avg/averaged.ckpt-{steps[-1]}")
  assert os.path.exists(tmp_path / "avg" / "hparams.json")   # a model directory of its own
  assert avg_checkpoints.main([f"--prefix={model_dir}/", f"--checkpoints=ckpt-{steps[0]},ckpt-{steps[1]}",
                               f"--output_path={tmp_path}/avg2/model.ckpt"]) == 0
  _mean_of([ckpt(s) for s in steps[:2]], f"{tmp_path}/avg2/model.ckpt-{steps[1]}")

  assert avg_all.main([f"--model_dir={model_dir}", f"--output_dir={tmp_path}/all", "--n=2"]) == 0
  for first, last in zip(steps, steps[1:]):
    _mean_of([ckpt(first), ckpt(last)], f"{tmp_path}/all/model.ckpt-{last}")
  assert not os.path.exists(tmp_path / "all" / f"model.ckpt-{steps[0]}.index")
  assert tf.train.latest_checkpoint(str(tmp_path / "all")).endswith(f"model.ckpt-{steps[-1]}")
  # --min_steps: checkpoints of fewer steps are left out, one of exactly that many is not.
  assert avg_all.main([f"--model_dir={model_dir}", f"--output_dir={tmp_path}/late", "--n=2",
                       f"--min_steps={steps[1]}"]) == 0
  state = tf.train.get_checkpoint_state(str(tmp_path / "late"))
  assert state, "t2t-lite-avg-all wrote nothing"
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == \
      [f"model.ckpt-{s}" for s in steps[2:]]
  _mean_of([ckpt(s) for s in steps[1:3]], f"{tmp_path}/late/model.ckpt-{steps[2]}")


def test_avg_all_follows_a_training_and_skips_the_windows_it_wrote(model, tmp_path, capsys):
  """T2T's t2t-avg-all beside one pass: with a wait it averages a checkpoint that a training still
  running writes while it waits, and run again into the same directory it writes no window twice.
  (A pass that returned without waiting, or that forgot the windows already in its output, passed
  the test above.)"""
  source, _ = model
  steps = sorted(int(n[5:-6]) for n in os.listdir(source) if n.startswith("ckpt-") and
                 n.endswith(".index"))
  assert len(steps) >= 3
  training = tmp_path / "training"
  shutil.copytree(source, training)
  ckpt = lambda step: str(training / f"ckpt-{step}")

  def publish(count):  # the training's checkpoint index with its first COUNT checkpoints
    tf.compat.v1.train.update_checkpoint_state(str(training), ckpt(steps[count - 1]),
                                               [ckpt(s) for s in steps[:count]])

  publish(2)
  out = tmp_path / "averaged"

  def train_on():  # the next checkpoint arrives once the first window has been averaged
    deadline = time.time() + 120
    while not os.path.exists(out / f"model.ckpt-{steps[1]}.index") and time.time() < deadline:
      time.sleep(0.02)
    publish(3)

  thread = threading.Thread(target=train_on)
  thread.start()
  written = average.average_all(str(training), str(out), 2, wait_minutes=0.05, poll_seconds=0.1)
  thread.join()
  assert [os.path.basename(p) for p in written] == [f"model.ckpt-{s}" for s in steps[1:3]]
  _mean_of([ckpt(s) for s in steps[1:3]], str(out / f"model.ckpt-{steps[2]}"))

  files = {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)}
  capsys.readouterr()
  assert avg_all.main([f"--model_dir={training}", f"--output_dir={out}", "--n=2"]) == 0
  assert "wrote 0 averaged checkpoints" in capsys.readouterr().out
  assert {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)} == files


def test_registry_help_into_head_ends_quietly():
  """T2T's walkthrough pipes `--registry_help` into `head`: the command exits 0, no traceback.

  `head -1` reads one line and leaves; whether the command writes after that is a race (its ~3 KB
  leave in one buffered write at exit). The second run makes the reader's leaving certain: the
  command's stdout is a pipe whose read end is already closed, so its first write breaks the pipe
  every time (the code before commit 003bf28 exited 120 with "Exception ignored ... BrokenPipeError").
  """
  trainer_exe = os.path.join(os.path.dirname(sys.executable), "t2t-lite-trainer")
  result = subprocess.run(["bash", "-o", "pipefail", "-c", f"{trainer_exe} --registry_help | head -1"],
                          capture_output=True, text=True)
  assert result.stdout == "Problems:\n"
  assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
  for unbuffered in ("", "1"):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first byte is written
    try:
      result = subprocess.run([trainer_exe, "--registry_help"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONUNBUFFERED": unbuffered})
    finally:
      os.close(write_end)
    assert result.returncode == 0, (unbuffered, result.returncode, result.stderr)
    assert "BrokenPipeError" not in result.stderr and "Traceback" not in result.stderr, result.stderr
