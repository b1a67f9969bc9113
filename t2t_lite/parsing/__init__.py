"""Constituency parsing with the Transformer (paper section 6.3), in pure Python.

Files follow the data flow:

| module | what |
|---|---|
| `trees` | `Tree`, the `.mrg` reader (errors say file:line:column), cleanup of raw PTB trees |
| `treebank` | which files are train / dev / test (full WSJ sections, or a flat sample folder) |
| `linearize` | tree -> (words, `(S (NP XX ) ... )`) and a decoded sequence -> repaired tree |
| `evalb` | labeled bracket P/R/F1 with EVALB's COLLINS.prm conventions |
| `baseline` | right-branching trees over the gold tags, the floor to beat |

The problem is `parsing_english_ptb16k` (`problems/parsing.py`); the command scoring a decoded
file is `t2t-lite-parse-eval` (`t2t_lite/bin/parse_eval.py`); the recipe is
`scripts/parsing_recipe.sh`.
"""
