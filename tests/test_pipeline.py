"""The token-budget pipeline: budgets hold, padding is low, eval keeps all, sharding, datagen."""

import ast
import collections
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.bin import datagen as datagen_cli
from t2t_lite.data import pipeline, token_shards, text_files
from t2t_lite.hparams import HParams
from t2t_lite.problems import get_problem


HP = HParams(batch_size=2048, max_length=64, seed=5)


@pytest.fixture(scope="session")
def multi30k(tmp_path_factory, shared_data):
  """(problem, data_dir, vocab); the data_dir (and its 8000 vocabulary) is shared by test modules."""
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(shared_data / "multi30k"))
  data_dir = str(tmp_path_factory.getbasetemp() / "t2t_data_multi30k")
  return problem, data_dir, problem.get_vocab(data_dir)


def batches_of(dataset, limit=None):
  return list(dataset.take(limit)) if limit else list(dataset)


def pair_count(batches):
  return sum(int((b["inputs"].numpy() != 0).any(1).sum()) for b in batches)


def test_bucket_boundaries_are_geometric_and_batch_sizes_fill_the_budget():
  assert pipeline.bucket_boundaries(20) == list(range(8, 21))
  bounds = pipeline.bucket_boundaries(256)
  assert bounds[0] == 8 and bounds[-1] == 256 and len(bounds) == 42
  ratios = [b / a for a, b in zip(bounds[10:], bounds[11:-1])]
  assert all(1.0 < r <= 1.15 for r in ratios)
  assert pipeline.bucket_batch_sizes([8, 9, 10, 256], 4096) == [512, 455, 409, 16]
  assert pipeline.bucket_batch_sizes([300], 256) == [1]


def test_small_steps_do_what_their_docstrings_say():
  chunks = tf.data.Dataset.from_tensors(
      {"inputs": tf.ragged.constant([[5], [5, 6, 7]]), "targets": tf.ragged.constant([[6, 7], [6]])})
  with_eos = next(iter(pipeline.append_eos(chunks)))
  assert with_eos["inputs"].to_list() == [[5, 1], [5, 6, 7, 1]]
  assert with_eos["targets"].to_list() == [[6, 7, 1], [6, 1]]
  # The longer side counts, either side: a long target is dropped too, a side at the limit is kept.
  mixed = tf.data.Dataset.from_tensors(
      {"inputs": tf.ragged.constant([[5], [5, 6, 7], [5], [5, 6]]),
       "targets": tf.ragged.constant([[6, 7], [6], [6, 7, 8], [6]])})
  kept = next(iter(pipeline.filter_by_length(pipeline.append_eos(mixed), 3)))
  assert kept["inputs"].to_list() == [[5, 1], [5, 6, 1]]
  assert kept["targets"].to_list() == [[6, 7, 1], [6, 1]]
  pairs = list(pipeline.unchunk(pipeline.append_eos(chunks)).as_numpy_iterator())
  assert [p["targets"].tolist() for p in pairs] == [[6, 7, 1], [6, 1]]
  batch = next(iter(pipeline.batch_by_length(pipeline.unchunk(pipeline.append_eos(chunks)), 32, 16)))
  assert batch["inputs"].numpy().tolist() == [[5, 1, 0, 0, 0, 0, 0, 0], [5, 6, 7, 1, 0, 0, 0, 0]]
  assert batch["targets"].shape == (2, 8)
  measured = pipeline.padding_fraction([{"inputs": tf.constant([[5, 1, 0, 0]]),
                                         "targets": tf.constant([[6, 7, 1, 0]])}])
  assert measured["budget"] == pytest.approx(0.25) and measured["tensor"] == pytest.approx(0.375)


def test_a_pair_as_long_as_a_bound_goes_into_that_bounds_bucket():
  """batch_by_length: "the first bucket whose bound U >= l". Pairs exactly as long as a bound
  (8, 9) are padded to it, not to the next bound, and pairs of max_length (16) share a bucket
  of 32 // 16 = 2 pairs rather than the overflow bucket's one pair a batch. The other tests'
  lengths rarely sit on a bound, and a bucket one too far keeps every budget (a longer bound
  holds fewer pairs), so they passed with `searchsorted(..., side="right")`."""
  lengths = [8, 8, 9, 16, 16]
  chunks = tf.data.Dataset.from_tensors(
      {"inputs": tf.ragged.constant([list(range(2, 2 + n)) for n in lengths]),
       "targets": tf.ragged.constant([[5, 1] for _ in lengths])})
  batches = batches_of(pipeline.batch_by_length(pipeline.unchunk(chunks), 32, 16))
  shapes = sorted(tuple(b["inputs"].shape) for b in batches)
  assert shapes == [(1, 9), (2, 8), (2, 16)]
  assert sorted(int(n) for b in batches for n in (b["inputs"].numpy() != 0).sum(1)) == lengths


@pytest.mark.parametrize("static", [False, True])
def test_no_training_batch_exceeds_its_token_budget(multi30k, static):
  problem, data_dir, _ = multi30k
  hparams = HP.replace(static_batch_shapes=static)
  shapes = set()
  for batch in batches_of(problem.dataset("train", data_dir, hparams, training=True), 150):
    batch_size, length = batch["inputs"].shape
    assert batch["targets"].shape[0] == batch_size
    assert batch_size * max(length, batch["targets"].shape[1]) <= hparams.batch_size
    assert length <= hparams.max_length and batch["inputs"].dtype == tf.int32
    shapes.add(tuple(batch["inputs"].shape))
  if static:
    assert shapes == {(2048 // 64, 64)}
  else:
    assert len(shapes) <= len(pipeline.bucket_boundaries(64))  # shapes repeat: one per bucket


def test_every_pair_ends_with_eos_and_padding_is_zero(multi30k):
  problem, data_dir, _ = multi30k
  batch = next(iter(problem.dataset("dev", data_dir, HP, training=False)))
  for key in ("inputs", "targets"):
    ids = batch[key].numpy()
    lengths = (ids != 0).sum(1)
    assert (ids[np.arange(len(ids)), lengths - 1] == 1).all()          # EOS is the last token
    assert all((row[n:] == 0).all() for row, n in zip(ids, lengths))    # then only PAD


def test_padding_fraction_of_multi30k_and_newstest(multi30k, shared_data):
  problem, data_dir, vocab = multi30k
  hparams = HParams(batch_size=4096, max_length=256)
  figures = {
      "multi30k train": pipeline.padding_fraction(
          problem.dataset("train", data_dir, hparams, training=True), max_batches=100),
      "multi30k dev": pipeline.padding_fraction(
          problem.dataset("dev", data_dir, hparams, training=False)),
  }
  wmt = shared_data / "wmt14"
  newstest = text_files.parallel_text_dataset([(str(wmt / "newstest2014.en"),
                                                str(wmt / "newstest2014.de"))])
  figures["newstest2014"] = pipeline.padding_fraction(pipeline.make_batches(
      pipeline.tokenize(newstest, vocab), hparams, training=False))
  for name, measured in figures.items():
    print(f"{name}: padding {measured['budget']:.3f} of the token budget, "
          f"{measured['tensor']:.3f} of the inputs+targets tensors ({measured['batches']} batches)")
    assert measured["budget"] < 0.15
    assert measured["tensor"] < 0.25


def test_evaluation_keeps_every_pair_in_file_order_even_long_ones(multi30k):
  problem, data_dir, vocab = multi30k
  short = HP.replace(max_length=16)                     # many dev pairs are longer than 16 tokens
  batches = batches_of(problem.dataset("dev", data_dir, short, training=False))
  assert pair_count(batches) == 1014
  assert max(b["inputs"].shape[1] for b in batches) > 16     # the long ones are there, unbatched
  pairs = set(problem.text_pairs("dev", data_dir))  # both sides whole, the long ones too
  decoded = {(s.decode("utf-8"), t.decode("utf-8")) for b in batches
             for s, t in zip(vocab.detokenize(b["inputs"]).numpy(),
                             vocab.detokenize(b["targets"]).numpy())}
  assert decoded == pairs
  # Tokenized (unbatched) pairs come in file order.
  first = next(iter(problem.token_dataset("dev", data_dir)))["inputs"][0]
  assert vocab.decode(first.numpy()) == problem.text_pairs("dev", data_dir)[0][0]


def test_training_is_seeded_and_repeats(multi30k):
  problem, data_dir, _ = multi30k
  hparams = HP.replace(batch_size=512)
  one = batches_of(problem.dataset("dev", data_dir, hparams, training=True), 60)
  two = batches_of(problem.dataset("dev", data_dir, hparams, training=True), 60)
  assert all(np.array_equal(a["inputs"], b["inputs"]) for a, b in zip(one, two))
  assert pair_count(one) > 1014                              # went past one epoch
  other = batches_of(problem.dataset("dev", data_dir, hparams.replace(seed=6), training=True), 3)
  assert not np.array_equal(one[0]["inputs"], other[0]["inputs"])


def test_input_context_shards_between_pipelines(multi30k):
  """Two pipelines read halves that together are the split: equal counts alone passed with every
  pipeline reading the first half (`shard(n, 0)`)."""
  problem, data_dir, _ = multi30k

  def rows(batches):
    return collections.Counter(tuple(int(i) for i in row if i) for b in batches
                               for row in b["inputs"].numpy())

  counts, shares = [], []
  for pipeline_id in (0, 1):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=2)
    batches = batches_of(problem.dataset("dev", data_dir, HP, training=False,
                                         input_context=context))
    counts.append(pair_count(batches))
    shares.append(rows(batches))
  assert counts == [507, 507]
  assert shares[0] + shares[1] == rows(batches_of(problem.dataset("dev", data_dir, HP,
                                                                  training=False)))


def test_shuffle_is_seeded_and_draws_a_new_order_each_epoch():
  """shuffle's docstring: a new (still seeded) order every epoch. The training tests compare
  whole runs, which a shuffle repeating one order each epoch passes too."""
  def two_epochs(seed):
    return list(pipeline.shuffle(tf.data.Dataset.range(50), seed).repeat(2).as_numpy_iterator())

  epochs = two_epochs(3)
  first, second = epochs[:50], epochs[50:]
  assert sorted(first) == sorted(second) == list(range(50))
  assert first != list(range(50)) and first != second
  assert two_epochs(3) == epochs and two_epochs(4) != epochs


SHUFFLE_ORDER = """
import sys
import tensorflow as tf
from t2t_lite.data import pipeline
if sys.argv[1] == "global_seed":
  tf.random.set_seed(5)
pairs = tf.data.Dataset.range(300).map(
    lambda x: {"inputs": tf.RaggedTensor.from_tensor(tf.fill([1, x % 7 + 1], x))[0],
               "targets": tf.fill([2], x)})
if sys.argv[1] == "public":
  shuffled = pairs.shuffle(50, seed=3, reshuffle_each_iteration=True)
else:
  shuffled = pipeline.shuffle(pairs, 3, 50)
print([int(e["targets"][0]) for e in shuffled.repeat(2)])
"""


def test_shuffle_order_depends_on_the_seed_alone():
  """A process that set TensorFlow's global seed (keras.utils.set_random_seed does) gets the order
  of one that did not, which is `Dataset.shuffle(seed=...)`'s there (tf.data pairs an op's seed
  with the global one); ragged elements, as `unchunk` yields them. Each order in a process of its
  own: a global seed, once set, stays (and clears TensorFlow's kernel cache)."""
  def order(mode):
    done = subprocess.run([sys.executable, "-c", SHUFFLE_ORDER, mode], capture_output=True,
                          text=True, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return done.stdout.strip().splitlines()[-1]

  unset = order("unset")
  assert sorted(ast.literal_eval(unset)) == sorted(list(range(300)) * 2)
  assert order("global_seed") == unset
  assert order("public") == unset  # the public op's order without a global seed


def test_datagen_shards_give_the_same_batches(multi30k, tmp_path, shared_data):
  problem, data_dir, vocab = multi30k
  prepared = str(tmp_path / "prepared")
  assert datagen_cli.main([f"--problem={problem.name}", f"--data_dir={prepared}",
                           f"--raw_data_dir={shared_data / 'multi30k'}", "--splits=dev,test"]) == 0
  names = sorted(p.name for p in tmp_path.joinpath("prepared").iterdir())
  assert "translate_ende_multi30k-dev-00000-of-00001.tfrecord" in names
  assert "translate_ende_multi30k.datagen.json" in names
  fresh = get_problem(problem.name, raw_data_dir=str(shared_data / "multi30k"))
  assert token_shards.read_token_shards(problem.name, "dev", prepared, vocab,
                                      raw_files=fresh.raw_files("dev")) is not None  # used
  assert token_shards.read_token_shards(problem.name, "train", prepared, vocab) is None    # not written
  from_shards = batches_of(fresh.dataset("dev", prepared, HP, training=False))
  on_the_fly = batches_of(problem.dataset("dev", data_dir, HP, training=False))
  # Same vocabulary (same corpus, deterministic build), so identical batches.
  assert fresh.get_vocab(prepared).model_proto == vocab.model_proto
  assert len(from_shards) == len(on_the_fly)
  assert all(np.array_equal(a["inputs"], b["inputs"]) and np.array_equal(a["targets"], b["targets"])
             for a, b in zip(from_shards, on_the_fly))
  # The reversed problem reads the same shards, swapped.
  rev = get_problem(problem.name + "_rev", raw_data_dir=str(shared_data / "multi30k"))
  first = next(iter(rev.token_dataset("dev", prepared)))["targets"][0]
  assert vocab.decode(first.numpy()) == problem.text_pairs("dev", data_dir)[0][0]


def test_datagen_shards_follow_the_raw_files_and_the_manifest_is_replaced_whole(tmp_path, monkeypatch):
  from made_up_corpus import write_made_up_captions
  raw, data = tmp_path / "raw", str(tmp_path / "data")
  raw.mkdir()
  write_made_up_captions(raw, {"train": 300, "val": 40, "test_2016_flickr": 40})
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(raw))
  vocab = problem.get_vocab(data)
  first = token_shards.generate_data(problem, data, splits=("train", "dev"), train_shards=2)
  assert token_shards.read_token_shards(problem.name, "dev", data, vocab,
                                        raw_files=problem.raw_files("dev")) is not None

  def targets(split):
    chunks = problem.token_dataset(split, data)
    return [vocab.decode(ids) for chunk in chunks for ids in chunk["targets"].numpy()]

  # A raw file edited (same size even): its split's shards are not used, and datagen rebuilds them.
  german = (raw / "val.de").read_text(encoding="utf-8")
  edited = german.replace("Ein Hund", "Ein Huhn", 1)
  assert edited != german and len(edited) == len(german)
  (raw / "val.de").write_text(edited, encoding="utf-8")
  assert token_shards.read_token_shards(problem.name, "dev", data, vocab,
                                        raw_files=problem.raw_files("dev")) is None
  assert targets("dev")[:40] == [t for _, t in problem.text_pairs("dev", data)]  # the edited text
  second = token_shards.generate_data(problem, data, splits=("train", "dev"), train_shards=2)
  assert second["splits"]["train"] == first["splits"]["train"]  # untouched: reused
  assert second["splits"]["dev"]["raw_files"] != first["splits"]["dev"]["raw_files"]
  assert "Ein Huhn" in "\n".join(targets("dev"))
  # Touched without a change, or the same bytes elsewhere: still the same raw data.
  os.utime(raw / "val.en")
  assert token_shards.read_token_shards(problem.name, "dev", data, vocab,
                                        raw_files=problem.raw_files("dev")) is not None
  # A failed manifest write leaves the previous manifest whole.
  manifest_file = pathlib.Path(token_shards.manifest_path(data, problem.name))
  before = manifest_file.read_text(encoding="utf-8")

  def half_then_fail(obj, f, **kwargs):
    f.write(json.dumps(obj)[:20])
    raise OSError("disk full")

  monkeypatch.setattr(token_shards.json, "dump", half_then_fail)
  (raw / "val.de").write_text(german, encoding="utf-8")
  with pytest.raises(OSError, match="disk full"):
    token_shards.generate_data(problem, data, splits=("dev",))
  assert manifest_file.read_text(encoding="utf-8") == before
  assert not [n for n in os.listdir(data) if n.endswith(".tmp")]


def test_subword_sampling_segments_training_text_anew_and_leaves_evaluation_alone(multi30k):
  """hparams subword_sampling_alpha: BPE-dropout on the training split (this BPE model), against
  SentencePiece's own Python sampler; evaluation keeps the best segmentation."""
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  problem, data_dir, vocab = multi30k
  pairs = problem.text_pairs("dev", data_dir)
  # alpha 1 drops every merge: one piece a character, as SentencePiece's sampler gives them.
  reference = spm.SentencePieceProcessor(model_proto=vocab.model_proto)
  texts = [source for source, _ in pairs[:20]]
  every_merge_dropped = vocab.sampling(1.0).tokenize(tf.constant(texts)).to_list()
  assert every_merge_dropped == [reference.encode(t, enable_sampling=True, alpha=1.0, nbest_size=-1)
                                 for t in texts]
  assert all(len(reference.id_to_piece(i)) == 1 for ids in every_merge_dropped for i in ids)
  assert [vocab.decode(ids) for ids in every_merge_dropped] == texts
  # alpha 0.1 in training: every pair is a dev pair, most segmented otherwise than the best, and
  # two passes over the data do not repeat each other's segmentations.
  hparams = HP.replace(batch_size=512, subword_sampling_alpha=0.1)
  batches = batches_of(problem.dataset("dev", data_dir, hparams, training=True), 60)
  assert pair_count(batches) > 1014                                # past one epoch
  best = {source: vocab.encode(source) for source, _ in pairs}
  seen, other = {}, 0
  for batch in batches:
    for ids in batch["inputs"].numpy():
      ids = [int(i) for i in ids if i > 1]                         # without PAD and EOS
      source = vocab.decode(ids)
      assert source in best
      other += ids != best[source]
      seen.setdefault(source, set()).add(tuple(ids))
  assert 0.3 < other / pair_count(batches) < 1.0
  assert sum(len(segmentations) > 1 for segmentations in seen.values()) > 100
  # Evaluation ignores it: the batches of the best segmentation.
  plain = batches_of(problem.dataset("dev", data_dir, HP, training=False))
  sampled = batches_of(problem.dataset("dev", data_dir, HP.replace(subword_sampling_alpha=0.1),
                                       training=False))
  assert all(np.array_equal(a["inputs"], b["inputs"]) and np.array_equal(a["targets"], b["targets"])
             for a, b in zip(plain, sampled)) and len(plain) == len(sampled)


def test_training_tokenizes_the_text_once_and_repeats_the_ids_from_memory(tmp_path):
  """Problem.dataset(training=True) caches the tokenized pairs: epochs after the first read the
  ids from memory (no second pass over the text or the tokenizer), in the same shuffled orders as
  without the cache; evaluation reads the text at each pass."""
  copy = type(get_problem("algorithmic_copy"))

  class CountedReads(copy):
    split_sizes = {"train": 300, "dev": 50, "test": 50}
    reads = 0

    def text_dataset(self, split, data_dir=None):
      pairs = self.text_pairs(split)

      def read():
        CountedReads.reads += 1
        yield from ({"inputs": source, "targets": target} for source, target in pairs)

      spec = tf.TensorSpec([], tf.string)
      return tf.data.Dataset.from_generator(read, output_signature={"inputs": spec,
                                                                    "targets": spec})

  problem, hparams = CountedReads(), HP.replace(batch_size=256, max_length=32)
  batches = batches_of(problem.dataset("train", str(tmp_path), hparams, training=True), 60)
  assert pair_count(batches) > 3 * 300                             # past three epochs
  assert CountedReads.reads == 1
  # The same batches as the uncached chain (tokenize -> make_batches), pass after pass.
  uncached = pipeline.make_batches(problem.token_dataset("train", str(tmp_path)), hparams, True)
  assert all(np.array_equal(a["inputs"], b["inputs"]) and np.array_equal(a["targets"], b["targets"])
             for a, b in zip(batches, batches_of(uncached, 60)))
  assert CountedReads.reads > 3                                    # it read the text every epoch
  CountedReads.reads = 0
  for _ in range(2):
    batches_of(problem.dataset("dev", str(tmp_path), hparams, training=False))
  assert CountedReads.reads == 2


def test_subword_sampling_without_a_sentencepiece_vocabulary_says_so(tmp_path):
  problem = get_problem("algorithmic_copy")
  with pytest.raises(ValueError, match="subword_sampling_alpha=0.1 needs a SentencePiece vocabulary"):
    problem.dataset("train", str(tmp_path), HP.replace(subword_sampling_alpha=0.1), training=True)
