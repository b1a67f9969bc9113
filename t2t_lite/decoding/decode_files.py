"""Decoding files with a trained model directory (what `t2t-lite-decoder` runs).

Output has exactly one record per input record (a line, or what T2T's `delimiter` separates), in
input order, times `num_decodes`; it is written to a temporary file and renamed, so a killed
decode never leaves a truncated output file behind. `decode_interactively` answers one line at a
time; `score_file` scores given pairs (`t2t_lite.decoding.scoring`).
"""

import os
import sys
from collections.abc import Callable

from t2t_lite import model_dir
from t2t_lite.decoding import scoring
from t2t_lite.decoding.translator import load_translator
from t2t_lite.hparams import DecodeHParams


def _decode_utf8(raw: bytes, number: int, warn, what: str = "line") -> str:
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    warn(f"warning: {what} {number} is not valid UTF-8 ({e.reason} at byte {e.start}); "
         "invalid bytes replaced by U+FFFD")
    return raw.decode("utf-8", errors="replace")


def read_lines(path_or_file, warn: Callable[[str], None] = print, delimiter: str = "\n",
               what: str = "--decode_from_file") -> list[str]:
  """Lines of UTF-8 text; invalid bytes are replaced (U+FFFD) and reported with the line number.

  Another `delimiter` (T2T's decode hparam) splits the text into records instead, each stripped
  of surrounding whitespace as T2T does; a last empty record is dropped.
  """
  if isinstance(path_or_file, (str, os.PathLike)):
    if not os.path.exists(path_or_file):
      raise FileNotFoundError(f"{what} {path_or_file} does not exist")
    with open(path_or_file, "rb") as f:
      data = f.read()
  else:
    data = path_or_file.read()
    data = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
  newline = delimiter == "\n"
  raw_records = data.split(delimiter.encode("utf-8"))
  if not newline:
    raw_records = [raw.strip() for raw in raw_records]
  if raw_records and raw_records[-1] == b"":
    raw_records.pop()
  if newline:
    raw_records = [raw[:-1] if raw.endswith(b"\r") else raw for raw in raw_records]
  return [_decode_utf8(raw, number, warn, "line" if newline else "record")
          for number, raw in enumerate(raw_records, 1)]


def write_lines(path: str, lines: list[str], delimiter: str = "\n") -> None:
  model_dir.atomic_write(path, "".join(line.replace(delimiter, " ") + delimiter for line in lines))


def _write(outputs, output_path, stdout, delimiter="\n"):
  if output_path:
    write_lines(output_path, outputs, delimiter)
  else:
    out = stdout or sys.stdout
    out.write("".join(o + delimiter for o in outputs))
    out.flush()


def _stderr(message):
  print(message, file=sys.stderr, flush=True)


def decode_file(output_dir: str, decode_hparams: DecodeHParams, input_path: str | None = None,
                output_path: str | None = None, checkpoint_path: str | None = None, stdin=None,
                stdout=None, ensemble: tuple[str, ...] = ()) -> list[str]:
  """Translates `input_path` (or stdin) into `output_path` (or stdout); returns the translations.
  `ensemble`: more model directories decoded together with this one (`load_translator`).

  T2T's decode hparams: `num_samples` > 0 decodes only the first records; `num_decodes` > 1
  decodes the whole input that many times, one pass after another (sampling draws new samples
  in each pass, seeds `seed`, `seed + 1`, ...; a deterministic search repeats its outputs).
  """
  dh = decode_hparams
  records = read_lines(input_path if input_path else (stdin or sys.stdin.buffer), _stderr,
                       dh.delimiter)
  if dh.num_samples > 0:
    records = records[:dh.num_samples]
  translator, path = load_translator(output_dir, dh, checkpoint_path, ensemble=ensemble)
  _stderr(f"decoding {len(records)} records with {path} (beam {dh.beam_size}, alpha {dh.alpha}"
          + (f", {dh.num_decodes} passes" if dh.num_decodes > 1 else "") + ")")
  translator.warn = _stderr
  outputs = translator.translate(records)
  assert len(outputs) == len(records)
  for number in range(1, dh.num_decodes):
    if dh.sampling_temperature > 0:  # the same programs, another seed (no new trace or compile)
      again = translator.reseeded(dh.seed + number)
      again.warn = lambda message: None  # the first pass warned
      outputs += again.translate(records)
    else:
      outputs += outputs[:len(records)]
  _write(outputs, output_path, stdout, dh.delimiter)
  return outputs


def decode_interactively(output_dir: str, decode_hparams: DecodeHParams,
                         checkpoint_path: str | None = None, stdin=None, stdout=None,
                         ensemble: tuple[str, ...] = ()) -> int:
  """T2T's `--decode_interactive`: the model is loaded once, then each input line is translated
  and written (and flushed) before the next line is read. A line `q` quits, as in T2T; so does
  the end of the input. At a terminal a prompt goes to stderr. Returns the lines translated.
  `ensemble`: as `decode_file`'s."""
  translator, path = load_translator(output_dir, decode_hparams, checkpoint_path, ensemble=ensemble)
  translator.warn = _stderr
  stdin = stdin or sys.stdin.buffer
  stdout = stdout or sys.stdout
  tty = getattr(stdin, "isatty", lambda: False)()
  _stderr(f"interactive decoding with {path}: one sentence a line, q to quit")
  count = 0
  while True:
    if tty:
      print("> ", end="", file=sys.stderr, flush=True)
    raw = stdin.readline()
    if not raw:
      break
    raw = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    line = _decode_utf8(raw.rstrip(b"\r\n"), count + 1, _stderr)
    if line.strip() == "q":
      break
    stdout.write(translator.translate([line])[0] + "\n")
    stdout.flush()
    count += 1
  return count


def score_file(output_dir: str, decode_hparams: DecodeHParams, input_path: str,
               output_path: str | None = None, checkpoint_path: str | None = None,
               stdout=None) -> list[float]:
  """T2T's `--score_file`: writes the score of each `source<TAB>target` line of `input_path`
  (`t2t_lite.decoding.scoring`), one per line as %.6f, to `output_path` (or stdout)."""
  lines = read_lines(input_path, _stderr, what="--score_file")
  _, model, path = model_dir.restore_model(output_dir, checkpoint_path)
  _stderr(f"scoring {len(lines)} pairs with {path} (alpha {decode_hparams.alpha})")
  scores = scoring.score_lines(model, model_dir.load_vocab(output_dir), decode_hparams, lines,
                               _stderr)
  _write([f"{score:.6f}" for score in scores], output_path, stdout)
  return scores
