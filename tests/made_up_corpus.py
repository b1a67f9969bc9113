"""Made-up parallel text for tests that need a corpus but not a real one's sentences."""

import random

# (English, German) parts of the made-up captions: subject (singular?), verb, place.
_SUBJECTS = [("A man", "Ein Mann", True), ("A woman", "Eine Frau", True), ("A dog", "Ein Hund", True),
             ("A little girl", "Ein kleines Mädchen", True), ("A young boy", "Ein junger Junge", True),
             ("Two children", "Zwei Kinder", False), ("Two women", "Zwei Frauen", False),
             ("A group of people", "Eine Gruppe von Menschen", True), ("Three men", "Drei Männer", False)]
_VERBS = [("is riding a bike", "are riding bikes", "fährt Fahrrad", "fahren Fahrrad"),
          ("rides a horse", "ride horses", "reitet ein Pferd", "reiten Pferde"),
          ("is playing", "are playing", "spielt", "spielen"), ("sings", "sing", "singt", "singen"),
          ("runs", "run", "läuft", "laufen"), ("is sitting", "are sitting", "sitzt", "sitzen"),
          ("eats an apple", "eat apples", "isst einen Apfel", "essen Äpfel")]
_PLACES = [("", ""), ("on the beach", "am Strand"), ("in the park", "im Park"),
           ("across the green field", "über die grüne Wiese"), ("in the street", "auf der Straße"),
           ("near the water", "am Wasser"), ("in front of a café", "vor einem Café")]
MULTI30K_FILES = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}


def write_made_up_captions(folder, counts, seed=0):
  """`<prefix>.en` / `<prefix>.de` with `counts[prefix]` made-up caption pairs each (a seeded
  grammar over a small lexicon, with umlauts and ß), for tests that need a parallel corpus but
  not Multi30k's own sentences."""
  rng = random.Random(seed)
  for prefix, count in counts.items():
    pairs = []
    for _ in range(count):
      subject, verb, place = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_PLACES)
      singular = subject[2]
      english = " ".join(w for w in (subject[0], verb[0 if singular else 1], place[0]) if w)
      german = " ".join(w for w in (subject[1], verb[2 if singular else 3], place[1]) if w)
      pairs.append((english + " .", german + " ."))
    for lang, index in (("en", 0), ("de", 1)):
      (folder / f"{prefix}.{lang}").write_text("".join(p[index] + "\n" for p in pairs),
                                               encoding="utf-8")
