"""Models, registered in `t2t_lite.registry.models` ("transformer")."""

from t2t_lite.models.transformer import Transformer

__all__ = ["Transformer"]
