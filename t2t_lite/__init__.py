"""t2t_lite: the Transformer of "Attention Is All You Need" on Keras 3, with tensor2tensor's conventions.

Layout follows the data flow: problems -> data -> layers/models -> training -> decoding -> export -> bin.
"""

import os

# On AVX2 CPUs TensorFlow leaves oneDNN off unless asked before it is imported, and oneDNN's
# kernels are much faster for training on CPU (docs/performance.md). Respect an explicit choice.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"
