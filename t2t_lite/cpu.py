"""This machine's CPU as Linux describes it (/proc/cpuinfo): the first processor's fields, its
instruction-set flags and a one-line description. Read here and nowhere else.

Imports nothing but the standard library: the XLA cache (`t2t_lite.decoding.xla_cache`) keys its
folder by these fields before TensorFlow is imported, and the training path (`t2t_lite.fast_path`)
and the benchmarks read the same ones.

    >>> first_processor(read())["model name"], "avx2" in flags(read())   # on this project's machine
    ('AMD EPYC', True)
    >>> describe()
    'CPU: AMD EPYC (Zen 3: family 25, model 1); ISA: avx avx2 f16c fma sse4_1 sse4_2 sse4a'
    >>> summary()
    'AMD EPYC (Zen 3), 2 cores, AVX2'

A virtual machine's model name is often only "AMD EPYC", whatever the generation under it: the
descriptions add the family and model numbers (`cpu family`, `model`), and for AMD the Zen
generation they belong to, so that figures from a Zen 3, a Zen 4 and a Zen 5 never read alike.

`python -m t2t_lite.cpu` prints `summary()`: the recipes' shell scripts record it with their
figures (scripts/multi30k_tune.sh, scripts/finetune_recipe.sh).
"""

import os
from collections.abc import Iterable

CPUINFO = "/proc/cpuinfo"
ISA_PREFIXES = ("avx", "fma", "sse4", "amx", "f16c")  # the vector extensions `describe` lists
# AMD's Zen generations by `cpu family` and `model` ranges, as Linux sorts them
# (arch/x86/kernel/cpu/amd.c, X86_FEATURE_ZEN*); a model outside these ranges is left unnamed.
AMD_GENERATIONS = {
    0x17: (((0x00, 0x2f), "Zen"), ((0x50, 0x5f), "Zen"), ((0x30, 0x4f), "Zen 2"),
           ((0x60, 0x7f), "Zen 2"), ((0x90, 0x91), "Zen 2"), ((0xa0, 0xaf), "Zen 2")),
    0x19: (((0x00, 0x0f), "Zen 3"), ((0x20, 0x5f), "Zen 3"), ((0x10, 0x1f), "Zen 4"),
           ((0x60, 0xaf), "Zen 4")),
    0x1a: (((0x00, 0x2f), "Zen 5"), ((0x40, 0x4f), "Zen 5"), ((0x60, 0x7f), "Zen 5")),
}


def read(path: str | None = None) -> str:
  """The text of /proc/cpuinfo (or `path`); "" when it cannot be read (not Linux)."""
  try:
    with open(path or CPUINFO, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return ""


def first_processor(text: str, names: Iterable[str] | None = None) -> dict[str, str]:
  """{field name, lowercased: value, stripped} of the first processor's block (up to the first
  blank line) of a /proc/cpuinfo text; {} when it has none.

  With `names` (lowercased), only those fields, from the first block that has any of them
  (PowerPC, for one, lists its `model` in a block after the processors'). A field repeated in a
  block keeps its last value."""
  wanted = None if names is None else frozenset(names)
  fields = {}
  for line in text.split("\n"):
    if not line.strip():
      if fields:
        break
      continue
    name, _, value = line.partition(":")
    name = name.strip().lower()
    if wanted is None or name in wanted:
      fields[name] = value.strip()
  return fields


def flags(text: str) -> frozenset[str] | None:
  """The first processor's feature flags (x86 `flags`, Arm and s390 `Features`); None when the
  text names none (unreadable, or another architecture)."""
  fields = first_processor(text, ("flags", "features"))
  value = fields.get("flags", fields.get("features"))
  return None if value is None else frozenset(value.split())


def model_name(text: str) -> str:
  """The first processor's model name, or "unknown CPU"."""
  return first_processor(text, ("model name",)).get("model name") or "unknown CPU"


def family_and_model(text: str) -> tuple[int, int] | None:
  """The first processor's x86 `cpu family` and `model` numbers; None where either is missing
  (not x86, or unreadable)."""
  fields = first_processor(text, ("cpu family", "model"))
  try:
    return int(fields["cpu family"]), int(fields["model"])
  except (KeyError, ValueError):
    return None


def _amd_family_and_model(text: str) -> tuple[int, int] | None:
  """`family_and_model` of an AMD CPU; None for other vendors."""
  if first_processor(text, ("vendor_id",)).get("vendor_id") != "AuthenticAMD":
    return None
  return family_and_model(text)


def generation(text: str) -> str | None:
  """The Zen generation of an AMD CPU (e.g. "Zen 4" for family 25, model 17: Genoa), from
  AMD_GENERATIONS; None for other vendors and for numbers the table does not hold."""
  numbers = _amd_family_and_model(text)
  if numbers is None:
    return None
  family, model = numbers
  return next((name for (low, high), name in AMD_GENERATIONS.get(family, ())
               if low <= model <= high), None)


def describe(text: str | None = None) -> str:
  """The model, its family and model numbers (and Zen generation), and its vector extensions
  (ISA_PREFIXES), for a benchmark's header. `text`: default, this machine's."""
  text = read() if text is None else text
  model = model_name(text)
  numbers = family_and_model(text)
  if numbers is not None:
    name = generation(text)
    model += f" ({name + ': ' if name else ''}family {numbers[0]}, model {numbers[1]})"
  isa = sorted(flag for flag in flags(text) or () if flag.startswith(ISA_PREFIXES))
  return f"CPU: {model}; ISA: {' '.join(isa) or 'unknown'}"


def available_cores() -> int:
  """The cores this process may run on (its CPU affinity, as `nproc` counts them)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def summary(text: str | None = None, cores: int | None = None) -> str:
  """The model, the cores and the widest x86 vector extension (AVX-512, AVX2, or "no AVX2"), with
  AVX512_BF16 / AMX where the CPU has native bfloat16 matmuls, for a recipe's table, e.g. "AMD
  EPYC (Zen 3), 2 cores, AVX2" or "Intel(R) Xeon(R) Processor (family 6, model 167), 2 cores,
  AVX-512, AVX512_BF16, AMX". An AMD CPU gets its Zen generation, any other x86 CPU (and an AMD
  one outside the table) its family and model numbers: CPUs of one model name train at different
  rates (a VM's "Intel(R) Xeon(R) Processor" was a model 207 and a model 167 on two days), and the
  tuning script matches rates by this line. `text`: default, this machine's; `cores`: default,
  `available_cores()`."""
  text = read() if text is None else text
  model = model_name(text)
  numbers = family_and_model(text)
  if numbers is not None:
    model += f" ({generation(text) or f'family {numbers[0]}, model {numbers[1]}'})"
  found = flags(text)
  isa = ("ISA unknown" if found is None else "AVX-512" if "avx512f" in found
         else "AVX2" if "avx2" in found else "no AVX2")
  isa += "".join(f", {name}" for flag, name in (("avx512_bf16", "AVX512_BF16"), ("amx_bf16", "AMX"))
                 if found is not None and flag in found)
  return f"{model}, {available_cores() if cores is None else cores} cores, {isa}"


if __name__ == "__main__":
  print(summary())
