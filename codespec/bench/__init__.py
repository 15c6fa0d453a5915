"""`codespec bench`: speed, speculation and quality of completions on real code.

``corpus`` cuts fill-in-the-middle holes from source packages, ``runner`` completes each hole
with plain and speculative decoding side by side, ``report`` aggregates, prints and writes the
JSON, the docs and the plots, ``peer`` runs the same holes through llama.cpp.
"""
