"""How the ggml backend lays out llama.cpp's one cache: which sequence holds what, and the
width of a pass (``backend.py`` says why each is so)."""

GROUP = 4  # rows of the repacked GEMM kernel: every decode pass is a whole number of groups
TEXT = 0  # the sequence of the cached text
LEAVES = range(1, 17)  # a token tree's leaves, or the prompts computed ahead (``ahead.py``)
PARKED = 17  # rejected tree nodes and unused look-ahead cells, kept until the cache is compacted
PADDING = 18  # the rows that fill a pass up to a whole group
SEQUENCES = 19
# Compact (give parked cells back) once text and parked cells fill this share of the cache:
# well before the end, where llama.cpp's search for free cells wraps around to lower ones.
COMPACT_AT = 0.75
