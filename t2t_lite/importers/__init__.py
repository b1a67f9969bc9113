"""Importers: another toolkit's trained model -> an ordinary t2t_lite model directory."""
