"""Decoding files with a trained model directory (what `t2t-lite-decoder` runs).

Output has exactly one line per input line, in input order; it is written to a temporary file
and renamed, so a killed decode never leaves a truncated output file behind.
"""

import os
import sys
from collections.abc import Callable

from t2t_lite import model_dir
from t2t_lite.decoding.translator import load_translator
from t2t_lite.hparams import DecodeHParams


def read_lines(path_or_file, warn: Callable[[str], None] = print) -> list[str]:
  """Lines of UTF-8 text; invalid bytes are replaced (U+FFFD) and reported with the line number."""
  if isinstance(path_or_file, (str, os.PathLike)):
    if not os.path.exists(path_or_file):
      raise FileNotFoundError(f"--decode_from_file {path_or_file} does not exist")
    with open(path_or_file, "rb") as f:
      data = f.read()
  else:
    data = path_or_file.read()
    data = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
  raw_lines = data.split(b"\n")
  if raw_lines and raw_lines[-1] == b"":
    raw_lines.pop()
  lines = []
  for number, raw in enumerate(raw_lines, 1):
    raw = raw[:-1] if raw.endswith(b"\r") else raw
    try:
      lines.append(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
      warn(f"warning: line {number} is not valid UTF-8 ({e.reason} at byte {e.start}); "
           "invalid bytes replaced by U+FFFD")
      lines.append(raw.decode("utf-8", errors="replace"))
  return lines


def write_lines(path: str, lines: list[str]) -> None:
  model_dir.atomic_write(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def decode_file(output_dir: str, decode_hparams: DecodeHParams, input_path: str | None = None,
                output_path: str | None = None, checkpoint_path: str | None = None, stdin=None,
                stdout=None) -> list[str]:
  """Translates `input_path` (or stdin) into `output_path` (or stdout); returns the translations."""
  warn = lambda message: print(message, file=sys.stderr, flush=True)
  lines = read_lines(input_path if input_path else (stdin or sys.stdin.buffer), warn)
  translator, path = load_translator(output_dir, decode_hparams, checkpoint_path)
  warn(f"decoding {len(lines)} lines with {path} "
       f"(beam {decode_hparams.beam_size}, alpha {decode_hparams.alpha})")
  translator.warn = warn
  outputs = translator.translate(lines)
  assert len(outputs) == len(lines)
  if output_path:
    write_lines(output_path, outputs)
  else:
    out = stdout or sys.stdout
    out.write("".join(o + "\n" for o in outputs))
    out.flush()
  return outputs
