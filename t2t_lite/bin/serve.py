r"""t2t-lite-serve: a translation server with TF Serving's REST API and a web page.

    t2t-lite-serve --output_dir=runs/base --port=8501 --decode_hparams='beam_size=4'
    t2t-lite-serve --export_dir=runs/base/export/1700000000 --model_name=ende

    curl -d '{"instances": ["A man is riding a bike ."]}' \
        http://localhost:8501/v1/models/ende:predict

Serves a model directory (the decoder's translations, the page's attention heatmap, parsing
trees) or an exported SavedModel (its serving_default and nbest signatures; EXPORT_DIR or
EXPORT_DIR/<version>). Open http://HOST:PORT/ for the page. Concurrent requests are decoded
together (TF Serving's batching options below), padded to a few batch and width buckets whose
search programs are compiled at start (--warmup_max_width; /health answers 503 until then);
SIGTERM finishes the requests in flight, then exits. With --output_dir the compiled programs are
kept in OUTPUT_DIR/xla_cache (--xla_cache_dir), so the next start loads them. See docs/serving.md.
"""

import sys

from t2t_lite.bin import common
from t2t_lite.serving.batching import BatchingOptions

WARMUP_MAX_WIDTH = 64   # subwords: Multi30k's and most news sentences fit; longer ones compile later


def build_parser():
  p = common.parser(__doc__)
  source = p.add_mutually_exclusive_group(required=True)
  source.add_argument("--output_dir", help="a trained model directory (the decoder's)")
  source.add_argument("--export_dir",
                      help="a SavedModel of t2t-lite-exporter: EXPORT_DIR/<version>, or EXPORT_DIR "
                           "(its highest version)")
  p.add_argument("--host", default="127.0.0.1",
                 help="the address to listen on (0.0.0.0: every interface)")
  p.add_argument("--port", type=int, default=8501, help="TF Serving's REST port; 0: a free one")
  p.add_argument("--model_name", default="default",
                 help="the name in /v1/models/<name> (TF Serving's --model_name)")
  p.add_argument("--decode_hparams", default="",
                 help="with --output_dir: name=value,... over the problem's decode defaults (as "
                      "t2t-lite-decoder); a SavedModel decodes as it was exported")
  p.add_argument("--checkpoint_path", default=None,
                 help="with --output_dir: a checkpoint prefix (default: the latest)")
  common.add_usr_dir_flag(p)
  common.add_xla_cache_flag(p, "OUTPUT_DIR/xla_cache with --output_dir, none with --export_dir")
  batching = p.add_argument_group("batching (TF Serving's batching parameters)")
  batching.add_argument("--max_batch_size", type=int, default=BatchingOptions.max_batch_size,
                        help="the most sentences decoded together")
  batching.add_argument("--batch_timeout_micros", type=int,
                        default=BatchingOptions.batch_timeout_micros,
                        help="how long a batch that is not full waits for more sentences")
  batching.add_argument("--max_enqueued_batches", type=int,
                        default=BatchingOptions.max_enqueued_batches,
                        help="queue length in full batches; a request beyond it gets 503")
  batching.add_argument("--allowed_batch_sizes", default="",
                        help="comma-separated sizes batches are padded to, ending with "
                             "max_batch_size (default: 1, 2, 4, ... max_batch_size)")
  batching.add_argument("--warmup_max_width", type=int, default=WARMUP_MAX_WIDTH,
                        help="at start, before taking requests, compile the search for every batch "
                             "size at each source-width bucket (16, 32, 64, ...) up to this many "
                             "subwords; 0: no warm-up (each shape compiles on first use)")
  limits = p.add_argument_group("request limits (over them: 413)")
  limits.add_argument("--max_body_bytes", type=int, default=1 << 20, help="request body size")
  limits.add_argument("--max_sentences_per_request", type=int, default=256,
                      help="sentences in one request")
  limits.add_argument("--max_sentence_chars", type=int, default=2000,
                      help="characters in one sentence")
  p.add_argument("--log_level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                 help="uvicorn's log level")
  return p


def _sizes(text):
  try:
    return tuple(int(size) for size in text.split(",") if size.strip())
  except ValueError:
    raise common.UsageError(f"--allowed_batch_sizes must be comma-separated numbers, got {text!r}") from None


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  common.configure_xla_cache(args, args.output_dir)   # before TensorFlow loads
  from t2t_lite.serving import app as app_lib
  from t2t_lite.serving import backends, batching, rest
  with common.usage_errors():
    if not 0 <= args.port <= 65535:
      raise common.UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.warmup_max_width < 0:
      raise common.UsageError(f"--warmup_max_width must be >= 0 (0: no warm-up), got "
                              f"{args.warmup_max_width}")
    if not args.model_name or "/" in args.model_name or ":" in args.model_name:
      raise common.UsageError(f"--model_name must be non-empty without '/' or ':', got {args.model_name!r}")
    options = batching.BatchingOptions(args.max_batch_size, args.batch_timeout_micros,
                                       args.max_enqueued_batches, _sizes(args.allowed_batch_sizes))
    limits = rest.Limits(args.max_body_bytes, args.max_sentences_per_request, args.max_sentence_chars)
    if args.output_dir:
      from t2t_lite import model_dir
      common.load_usr_dir(args)
      problem = model_dir.find_problem(model_dir.read_record(args.output_dir)["problem"])
      decode_hparams = model_dir.decode_defaults(problem).parse(args.decode_hparams)
    elif args.decode_hparams or args.checkpoint_path:
      raise common.UsageError("--decode_hparams and --checkpoint_path go with --output_dir; a "
                              "SavedModel decodes as it was exported")
    try:
      sock = app_lib.bind(args.host, args.port)  # a taken port is an error before the model loads
    except OSError as e:
      raise common.UsageError(str(e)) from None
  try:
    if args.output_dir:
      backend = backends.ModelDirBackend(args.output_dir, decode_hparams, options.batch_sizes,
                                         args.checkpoint_path, args.warmup_max_width)
    else:
      backend = backends.SavedModelBackend(args.export_dir, options.batch_sizes,
                                           args.warmup_max_width)
  except (ValueError, FileNotFoundError) as e:   # ModelDirError and BackendError are ValueErrors
    print(f"error: {e}", file=sys.stderr)
    sock.close()
    return 2
  app_lib.serve(app_lib.create_app(backend, args.model_name, options, limits), args.host,
                sock.getsockname()[1], args.log_level, sock=sock)
  return 0


if __name__ == "__main__":
  sys.exit(main())
