"""t2t_lite: the Transformer of "Attention Is All You Need" as Keras 3 layers, with T2T's conventions.

`problems/` and `hparams/` live at the repository top but install as `t2t_lite.problems` and
`t2t_lite.hparams`, so they never collide with other top-level packages of those names.
"""

from setuptools import find_packages, setup

ENTRY_POINTS = [
    # name = module:function; each module is a thin argument parser over a library function.
    "t2t-lite-trainer = t2t_lite.bin.trainer:main",
    "t2t-lite-decoder = t2t_lite.bin.decoder:main",
    "t2t-lite-datagen = t2t_lite.bin.datagen:main",
    "t2t-lite-exporter = t2t_lite.bin.exporter:main",
    "t2t-lite-avg-checkpoints = t2t_lite.bin.avg_checkpoints:main",
    "t2t-lite-bleu = t2t_lite.bin.bleu:main",
    "t2t-lite-attention = t2t_lite.bin.attention:main",
    "t2t-lite-parse-eval = t2t_lite.bin.parse_eval:main",
]

setup(
    name="t2t_lite",
    version="0.1.0",
    description="The Transformer (Vaswani et al., 2017) on Keras 3 / TensorFlow with tensor2tensor's conventions",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["t2t_lite", "t2t_lite.*"]) + ["t2t_lite.problems", "t2t_lite.hparams"],
    package_dir={"t2t_lite.problems": "problems", "t2t_lite.hparams": "hparams"},
    install_requires=[
        "tensorflow>=2.18,<2.22",
        # tensorflow-text must match TensorFlow's minor version; pip picks the matching one.
        "tensorflow-text>=2.18,<2.22",
        "keras>=3.8,<4",
        "keras-hub>=0.20",
        "tensorflow-datasets>=4.9.7,<5",
        "importlib_resources",      # TFDS builders need it in a fresh environment
        "sacrebleu>=2.4,<3",
        "sacremoses>=0.1",          # Moses tokenizer for the paper's tokenized BLEU, in Python
        "sentencepiece>=0.2",       # trains the subword vocabulary (tensorflow-text runs it in-graph)
        "matplotlib>=3.7",          # attention pictures (paper figures 3-5)
    ],
    extras_require={
        "test": ["pytest>=7", "jax[cpu]>=0.4.30"],
    },
    entry_points={"console_scripts": ENTRY_POINTS},
)
