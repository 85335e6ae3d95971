"""Constituency parsing as translation (paper section 6.3): words in, a bracket sequence out.

Modules, one concept each: `trees` (reading Penn Treebank brackets, preprocessing),
`linearization` (trees <-> token sequences as Vinyals et al. 2015, with repair of any decoder
output), `evalb` (EVALB's scoring with COLLINS.prm semantics), `corpus` (treebanks as
parallel text for the trainer, and their vocabulary), `parser` (`Parser`, `parse`: a trained
model, words in, trees out).
"""
