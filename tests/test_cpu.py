"""/proc/cpuinfo read once for everything (t2t_lite/cpu.py): the first processor's fields, flags and
description from texts of real CPU kinds, an empty or missing file; the XLA cache's key built from
them unchanged (an existing cache folder still hits); no TensorFlow imported to read them."""

import hashlib
import platform
import subprocess
import sys

import pytest

from t2t_lite import cpu
from t2t_lite.decoding import xla_cache

EPYC_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
              "sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl "
              "xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid "
              "sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor "
              "lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs "
              "ibpb stibp vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap "
              "clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero xsaveerptr wbnoinvd arat umip "
              "pku ospke vaes vpclmulqdq rdpid fsrm")


def cpuinfo(vendor, family, model_number, model, flags, processors=2):
  """A /proc/cpuinfo text as Linux writes it on x86: `processors` blocks, a blank line after each."""
  return "".join(
      f"processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model_number}\n"
      f"model name\t: {model}\nstepping\t: 1\ncpu MHz\t\t: {2445.412 + i}\nfpu\t\t: yes\n"
      f"flags\t\t: {flags}\nbugs\t\t: sysret_ss_attrs spectre_v1\nbogomips\t: 4890.82\n"
      f"power management:\n\n" for i in range(processors))


EPYC = cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC", EPYC_FLAGS)
COOPER_LAKE = cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz",
                      "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512cd "
                      "avx512bw avx512vl avx512_vnni avx512_bf16")
GRAVITON = ("processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes pmull sve bf16\n"
            "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\n"
            "CPU revision\t: 1\n\nprocessor\t: 1\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd\n\n")


def test_first_processors_fields_flags_and_description():
  fields = cpu.first_processor(EPYC)
  assert fields["model name"] == "AMD EPYC" and fields["model"] == "1" and fields["cpu family"] == "25"
  assert fields["cpu mhz"] == "2445.412"                 # the first block's, not the second's
  assert fields["power management"] == "" and "processor" in fields
  assert cpu.first_processor(EPYC, ("model name", "vendor_id")) == {"model name": "AMD EPYC",
                                                                   "vendor_id": "AuthenticAMD"}
  flags = cpu.flags(EPYC)
  assert flags == frozenset(EPYC_FLAGS.split()) and "avx2" in flags and "avx512f" not in flags
  assert cpu.describe(EPYC) == (
      "CPU: AMD EPYC (Zen 3: family 25, model 1); ISA: avx avx2 f16c fma sse4_1 sse4_2 sse4a")
  assert {"avx512_bf16", "avx512f"} <= cpu.flags(COOPER_LAKE)
  assert cpu.describe(COOPER_LAKE) == (
      "CPU: Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz (family 6, model 85); ISA: avx avx2 "
      "avx512_bf16 avx512_vnni "
      "avx512bw avx512cd avx512dq avx512f avx512vl f16c fma sse4_1 sse4_2")
  # Arm names them Features; only the first processor's count.
  assert cpu.flags(GRAVITON) == {"fp", "asimd", "evtstrm", "aes", "pmull", "sve", "bf16"}
  assert cpu.describe(GRAVITON) == "CPU: unknown CPU; ISA: unknown"
  # Nothing to read: no flags, not an empty set.
  assert cpu.first_processor("") == {} and cpu.flags("") is None
  assert cpu.describe("") == "CPU: unknown CPU; ISA: unknown"
  assert cpu.flags("processor\t: 0\nmodel name\t: x\n") is None


def test_the_summary_the_recipes_record():
  """What scripts/multi30k_tune.sh and finetune_recipe.sh record (they read /proc/cpuinfo through
  `python -m t2t_lite.cpu`): as the tuning script's own shell reader wrote it."""
  assert cpu.summary(EPYC, cores=2) == "AMD EPYC (Zen 3), 2 cores, AVX2"
  assert cpu.summary(COOPER_LAKE, cores=8) == (
      "Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz (family 6, model 85), 8 cores, AVX-512, "
      "AVX512_BF16")
  # Two Intel VMs of one model name are told apart by their numbers, as AMD's are.
  model_207 = cpuinfo("GenuineIntel", 6, 207, "Intel(R) Xeon(R) Processor", EPYC_FLAGS + " avx512f")
  assert cpu.summary(model_207, cores=2) == (
      "Intel(R) Xeon(R) Processor (family 6, model 207), 2 cores, AVX-512")
  model_167 = cpuinfo("GenuineIntel", 6, 167, "Intel(R) Xeon(R) Processor", EPYC_FLAGS + " avx512f")
  assert cpu.summary(model_167, cores=2) == (
      "Intel(R) Xeon(R) Processor (family 6, model 167), 2 cores, AVX-512")
  # AMX (Sapphire Rapids) is told apart from AVX512_BF16 alone (Cooper Lake), also where a
  # hypervisor hides avx512_bf16: the rates of the two differ.
  sapphire_rapids = cpuinfo("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+",
                            "fpu sse sse2 fma avx f16c avx2 avx512f avx512bw avx512_bf16 amx_bf16 "
                            "amx_tile amx_int8")
  assert cpu.summary(sapphire_rapids, cores=4) == (
      "Intel(R) Xeon(R) Platinum 8480+ (family 6, model 143), 4 cores, AVX-512, AVX512_BF16, AMX")
  assert cpu.summary(sapphire_rapids.replace(" avx512_bf16", ""), cores=4).endswith(
      "4 cores, AVX-512, AMX")
  assert cpu.describe(sapphire_rapids).endswith(
      "; ISA: amx_bf16 amx_int8 amx_tile avx avx2 avx512_bf16 avx512bw avx512f f16c fma")
  assert cpu.summary(GRAVITON, cores=4) == "unknown CPU, 4 cores, no AVX2"
  assert cpu.summary("", cores=1) == "unknown CPU, 1 cores, ISA unknown"
  nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
  assert cpu.available_cores() == int(nproc.stdout)
  printed = subprocess.run([sys.executable, "-m", "t2t_lite.cpu"], capture_output=True, text=True, check=True)
  assert printed.stdout == cpu.summary() + "\n"


@pytest.mark.parametrize("family, model, name", [
    (23, 1, "Zen"), (23, 0x31, "Zen 2"), (23, 0x71, "Zen 2"), (25, 1, "Zen 3"), (25, 0x21, "Zen 3"),
    (25, 0x11, "Zen 4"), (25, 0x61, "Zen 4"), (25, 0xa0, "Zen 4"), (26, 2, "Zen 5"), (26, 0x44, "Zen 5"),
    (26, 0x50, None), (21, 2, None)])
def test_amd_generations_tell_one_model_name_apart(family, model, name):
  """A VM's "AMD EPYC" is a Zen 3 (family 25, model 1: Milan), a Zen 4 (25, 17: Genoa) or a Zen 5
  (26, 2: Turin): the summary the recipes record names the generation, or the numbers outside the
  table, so that rates measured on one are never matched to another."""
  text = cpuinfo("AuthenticAMD", family, model, "AMD EPYC", EPYC_FLAGS + " avx512f avx512_bf16")
  assert cpu.generation(text) == name and cpu.family_and_model(text) == (family, model)
  assert cpu.summary(text, cores=2) == (
      f"AMD EPYC ({name or f'family {family}, model {model}'}), 2 cores, AVX-512, AVX512_BF16")
  assert cpu.describe(text).startswith(
      f"CPU: AMD EPYC ({name + ': ' if name else ''}family {family}, model {model}); ISA: avx ")
  # The numbers alone are not AMD's: another vendor's family 25 is no Zen.
  assert cpu.generation(text.replace("AuthenticAMD", "HygonGenuine")) is None
  assert cpu.family_and_model(GRAVITON) is None and cpu.generation(GRAVITON) is None


def test_read_this_machines_file_or_nothing(tmp_path, monkeypatch):
  path = tmp_path / "cpuinfo"
  path.write_text(COOPER_LAKE, encoding="utf-8")
  assert cpu.read(str(path)) == COOPER_LAKE
  monkeypatch.setattr(cpu, "CPUINFO", str(path))
  assert cpu.read() == COOPER_LAKE and "avx512_bf16" in cpu.flags(cpu.read())
  assert cpu.describe().startswith("CPU: Intel(R) Xeon(R) Platinum 8380H")
  path.unlink()                                          # missing (not Linux): ""
  assert cpu.read() == "" and cpu.describe() == "CPU: unknown CPU; ISA: unknown"


# The XLA cache's CPU description and folder hash, as the cache computed them before t2t_lite.cpu
# existed (the reader then was xla_cache's own): the same text must give the same folder.
EPYC_KEY = ("[('cpu family', '25'), ('flags', '" + " ".join(sorted(EPYC_FLAGS.split())) + "'), "
            "('model', '1'), ('model name', 'AMD EPYC'), ('vendor_id', 'AuthenticAMD')]")
FOLDER_HASHES = {"EPYC": "b925a1a1e410", "COOPER_LAKE": "f30a83ad334e", "GRAVITON": "70c3a94eebba"}


@pytest.mark.parametrize("name", sorted(FOLDER_HASHES))
def test_the_xla_cache_key_is_unchanged(name, tmp_path, monkeypatch):
  text = globals()[name]
  if name == "EPYC":
    assert xla_cache._cpu_description(text) == EPYC_KEY  # pylint: disable=protected-access
  path = tmp_path / "cpuinfo"
  path.write_text(text, encoding="utf-8")
  monkeypatch.setattr(cpu, "CPUINFO", str(path))
  key = xla_cache.environment_key({})
  assert key == f"tf{xla_cache._tensorflow_version()}-{platform.machine()}-{FOLDER_HASHES[name]}"  # pylint: disable=protected-access
  assert xla_cache.environment_key({"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}) != key
  path.unlink()   # no /proc/cpuinfo: the platform's description
  fallback = f"{platform.processor()} {platform.platform()}\n\n"
  assert xla_cache.environment_key({}).endswith(hashlib.sha256(fallback.encode()).hexdigest()[:12])


def test_read_without_tensorflow():
  """The XLA cache's flags are set before TensorFlow is imported: reading the CPU must not import it."""
  code = ("import sys; from t2t_lite import cpu; from t2t_lite.decoding import xla_cache; "
          "cpu.describe(); xla_cache.environment_key({}); "
          "assert 'tensorflow' not in sys.modules, sorted(sys.modules)")
  subprocess.run([sys.executable, "-c", code], check=True)
