"""Hparams sets, installed as `t2t_lite.hparams` (the folder `hparams/` at the repository top)."""

from t2t_lite.hparams.model_config import ModelConfig  # noqa: F401
from t2t_lite.hparams.base import AUTO, DecodeHParams, HParams, get_hparams  # noqa: F401
from t2t_lite.hparams import transformer  # noqa: F401  (registers the sets)
