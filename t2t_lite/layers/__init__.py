"""Keras 3 layers of the Transformer (paper section 3), one per file, `keras.ops` only."""

from t2t_lite.layers.decoder_stack import Decoder
from t2t_lite.layers.decoder_layer import DecoderLayer
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.encoder_stack import Encoder
from t2t_lite.layers.encoder_layer import EncoderLayer
from t2t_lite.layers.feed_forward import FeedForward
from t2t_lite.layers.learned_position_embedding import LearnedPositionEmbedding
from t2t_lite.layers.multi_head_attention import MultiHeadAttention
from t2t_lite.layers.shared_embedding import SharedEmbedding
from t2t_lite.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from t2t_lite.layers.symbol_dropout import SymbolDropout

__all__ = [
    "Decoder", "DecoderLayer", "Dropout", "Encoder", "EncoderLayer", "FeedForward",
    "LearnedPositionEmbedding", "MultiHeadAttention", "SharedEmbedding",
    "SinusoidalPositionEncoding", "SymbolDropout",
]
