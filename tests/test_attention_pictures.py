"""Attention pictures from synthetic weights: files, valid PNGs, what the figures draw, exact npz
round trip, errors."""

import os

import numpy as np
import pytest
from PIL import Image

from t2t_lite.decoding.attention_pictures import load_attention, save_attention

SOURCE = ["▁The", "▁cat", "▁sat", "<EOS>"]
TARGET = ["▁Die", "▁Katze", "<EOS>"]


def softmax_weights(rng, *shape):
  x = np.exp(rng.normal(size=shape) * 2)
  return (x / x.sum(-1, keepdims=True)).astype("float32")


@pytest.fixture
def weights():
  rng = np.random.default_rng(0)
  return {"encoder_self": [softmax_weights(rng, 1, 2, 4, 4), softmax_weights(rng, 2, 4, 4)],
          "decoder_self": [np.tril(softmax_weights(rng, 2, 3, 3)) for _ in range(2)],
          "encoder_decoder": [softmax_weights(rng, 2, 3, 4) for _ in range(2)]}


def test_writes_npz_heatmaps_and_word_view(weights, tmp_path):
  paths = save_attention(weights, SOURCE, TARGET, str(tmp_path / "pictures"), word="▁cat")
  names = sorted(os.path.basename(p) for p in paths)
  assert names == sorted(["attention.npz"] + [f"{kind}_layer{n}.png" for n in (1, 2) for kind in
                                               ("encoder_self", "decoder_self", "encoder_decoder")]
                         + ["encoder_self_layer1_word1.png"])  # default layer: second-to-last
  for path in paths:
    assert os.path.getsize(path) > 0
    if path.endswith(".png"):
      with Image.open(path) as image:
        image.verify()
      with Image.open(path) as image:
        assert image.format == "PNG" and 200 <= image.width <= 4000 and 200 <= image.height <= 4000


def test_npz_round_trips_exactly(weights, tmp_path):
  save_attention(weights, SOURCE, TARGET, str(tmp_path), word_kind="encoder_decoder",
                 word_layer=2, word=0)
  loaded, source, target = load_attention(str(tmp_path / "attention.npz"))
  assert source == SOURCE and target == TARGET
  assert sorted(loaded) == sorted(weights)
  for kind, layers in weights.items():
    assert len(loaded[kind]) == len(layers)
    for original, back in zip(layers, loaded[kind]):
      original = original[0] if original.ndim == 4 else original  # batch axis of 1 dropped
      assert back.dtype == original.dtype and np.array_equal(back, original)
  assert os.path.exists(tmp_path / "encoder_decoder_layer2_word0.png")


def test_wrong_shapes_and_arguments_are_explained(weights, tmp_path):
  bad = dict(weights, decoder_self=[weights["decoder_self"][0], np.zeros((2, 3, 4))])
  with pytest.raises(ValueError, match=r"weights\['decoder_self'\]\[1\] has shape \(2, 3, 4\); "
                                       r"expected \[heads, 3, 3\] \(target x target tokens\)"):
    save_attention(bad, SOURCE, TARGET, str(tmp_path))
  with pytest.raises(ValueError, match="has 3 heads, layer 0 has 2"):
    save_attention({"encoder_decoder": [np.zeros((2, 3, 4)), np.zeros((3, 3, 4))]}, SOURCE, TARGET,
                   str(tmp_path), word_kind="encoder_decoder")
  with pytest.raises(ValueError, match="unknown attention kinds"):
    save_attention({"self": [np.zeros((2, 4, 4))]}, SOURCE, TARGET, str(tmp_path))
  with pytest.raises(ValueError, match="not among the query tokens"):
    save_attention(weights, SOURCE, TARGET, str(tmp_path), word="▁dog")
  with pytest.raises(ValueError, match="word_layer must be in 1..2"):
    save_attention(weights, SOURCE, TARGET, str(tmp_path), word_layer=3)
  assert not os.listdir(tmp_path), "nothing is written when the input is wrong"


def test_attention_command_on_a_trained_model(tiny_model_dir, tmp_path, capsys):
  """Every layer and head of all three kinds, for a real model and sentence pair: the source's
  pieces label the encoder side and the target's the decoder side (a source and a target of
  different lengths, so swapping them cannot pass), and the weights saved are
  `attention_for_pair`'s for the pair in that order. (Only shapes were checked before, so the
  command passing the target as the source and the source as the target passed.)"""
  from t2t_lite.bin import attention
  from t2t_lite.decoding.attention_pictures import attention_for_pair, load_attention
  from t2t_lite import model_dir as model_dir_lib
  model_dir, _ = tiny_model_dir
  out = tmp_path / "pictures"
  source, target = "A man in a red shirt rides a horse down the street .", "Ein Hund ."
  assert attention.main([f"--output_dir={model_dir}", f"--source={source}", f"--target={target}",
                         f"--out_dir={out}", "--word=1"]) == 0
  assert f"target: {target}" in capsys.readouterr().out
  hparams = model_dir_lib.read_model_dir(str(model_dir))[1]
  weights, source_tokens, target_tokens = load_attention(str(out / "attention.npz"))
  vocab = model_dir_lib.load_vocab(str(model_dir))
  assert source_tokens == list(vocab.id_to_piece(vocab.encode(source))) + ["</s>"]
  assert target_tokens == list(vocab.id_to_piece(vocab.encode_targets(target))) + ["</s>"]
  assert len(source_tokens) > len(target_tokens) + 5
  for kind, (rows, cols) in {"encoder_self": (source_tokens, source_tokens),
                             "decoder_self": (target_tokens, target_tokens),
                             "encoder_decoder": (target_tokens, source_tokens)}.items():
    assert len(weights[kind]) == hparams.num_encoder_layers
    for layer in weights[kind]:
      assert layer.shape == (hparams.num_heads, len(rows), len(cols))
      assert abs(layer.sum(-1) - 1).max() < 1e-4  # each query's weights are a distribution
    for n in range(1, hparams.num_encoder_layers + 1):
      assert (out / f"{kind}_layer{n}.png").stat().st_size > 1000
  decoder_self = weights["decoder_self"][0]
  assert abs(np.triu(decoder_self, k=1)).max() == 0  # causal: no weight on future targets
  assert list(out.glob("encoder_self_layer*_word1.png"))
  model = model_dir_lib.restore_model(str(model_dir))[1]
  expected, *labels, _ = attention_for_pair(model, vocab, source, target)
  assert labels == [source_tokens, target_tokens] and sorted(expected) == sorted(weights)
  for kind, layers in expected.items():
    for want, saved in zip(layers, weights[kind], strict=True):
      np.testing.assert_allclose(saved, want, rtol=1e-5, atol=1e-6)


def test_figures_draw_the_given_weights_of_the_right_query_on_the_right_axes():
  """What is drawn, not only that a PNG is written: each heatmap's image is its head's
  [queries, keys] weights as given (rows queries, columns keys: not transposed, not another
  head), and the word view draws, for each head, one line from the chosen query to each key it
  gives more than 0.02, ending at that key's row, with that weight as opacity: its row of the
  weights, not its column (on square encoder self-attention a swapped index draws silently)."""
  from t2t_lite.decoding.attention_pictures import plot_heads, plot_word
  rng = np.random.default_rng(1)
  layer = softmax_weights(rng, 3, 4, 4)                      # 3 heads, source x source
  figure = plot_heads(layer, SOURCE, SOURCE, "encoder self-attention")
  images = [ax.images[0].get_array() for ax in figure.axes if ax.images]
  assert len(images) == 3
  for head, image in enumerate(images):
    np.testing.assert_array_equal(np.asarray(image), layer[head])
  ax = figure.axes[0]
  assert [t.get_text() for t in ax.get_xticklabels()] == SOURCE  # columns: the keys
  cross = softmax_weights(rng, 2, 3, 4)                      # target queries x source keys
  figure = plot_heads(cross, TARGET, SOURCE, "encoder-decoder attention")
  ax = figure.axes[0]
  assert np.asarray(ax.images[0].get_array()).shape == (3, 4)
  assert [t.get_text() for t in ax.get_yticklabels()] == TARGET
  assert [t.get_text() for t in ax.get_xticklabels()] == SOURCE
  for query in range(4):
    ax = plot_word(layer, SOURCE, SOURCE, query, "encoder self-attention").axes[0]
    drawn = sorted((round(-float(line.get_ydata()[1])), round(line.get_alpha(), 5))
                   for line in ax.lines if len(line.get_xdata()))
    assert all(float(line.get_ydata()[0]) == -query for line in ax.lines if len(line.get_xdata()))
    want = sorted((k, round(float(min(1.0, layer[h, query, k])), 5))
                  for h in range(3) for k in range(4) if layer[h, query, k] > 0.02)
    assert drawn == want and len(want) > 4
