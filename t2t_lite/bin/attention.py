r"""t2t-lite-attention: attention pictures of one sentence pair (paper figures 3-5).

    t2t-lite-attention --output_dir=runs/base --source="The law will never be perfect ." \
        --out_dir=pictures [--target="..."] [--word=5 --word_kind=encoder_self --word_layer=5]

Writes attention.npz (every layer and head: encoder self, decoder self, encoder-decoder), one PNG
of heatmaps per kind and layer, and the single-word view of Figure 3.
"""

import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--output_dir", required=True, help="the trainer's model directory")
  p.add_argument("--source", required=True, help="the source sentence")
  p.add_argument("--target", default=None, help="the target sentence (default: the model's translation)")
  p.add_argument("--out_dir", required=True, help="where the pictures go")
  p.add_argument("--checkpoint_path", default=None, help="a checkpoint prefix (default: the latest)")
  p.add_argument("--word", type=int, default=None, help="query token index for the single-word view")
  p.add_argument("--word_kind", default="encoder_self",
                 choices=["encoder_self", "decoder_self", "encoder_decoder"],
                 help="which attention the single-word view shows")
  p.add_argument("--word_layer", type=int, default=None, help="1-based layer (default: next to last)")
  return p


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  from t2t_lite import model_dir
  from t2t_lite.decoding import attention_pictures
  try:
    _, model, _ = model_dir.restore_model(args.output_dir, args.checkpoint_path)
  except model_dir.ModelDirError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  vocab = model_dir.load_vocab(args.output_dir)
  weights, source_tokens, target_tokens, target = attention_pictures.attention_for_pair(
      model, vocab, args.source, args.target)
  paths = attention_pictures.save_attention(weights, source_tokens, target_tokens, args.out_dir,
                                            word=args.word, word_kind=args.word_kind,
                                            word_layer=args.word_layer)
  print(f"target: {target}")
  print("\n".join(paths))
  return 0


if __name__ == "__main__":
  sys.exit(main())
