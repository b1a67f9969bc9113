"""The reserved token ids, T2T's convention, defined here and nowhere else.

- `PAD_ID` fills batches to a common length; padded positions are never attended to and never
  counted in the loss.
- `EOS_ID` ends every source and target (the input pipeline appends it) and stops decoding.
- `UNK_ID` is sentencepiece's unknown piece (byte fallback makes it rare).
- `START_ID` begins the shifted-right decoder input and every search. T2T starts from PAD, so it
  equals `PAD_ID`, and the shared embedding gives it a zero vector (T2T's `shift_right_3d`).

Every vocabulary (`t2t_lite.data.vocab`) is built with these ids; there is no BOS.
"""

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
START_ID = PAD_ID
