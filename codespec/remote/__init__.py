"""Decoding on a serving engine elsewhere (vLLM, SGLang, llama.cpp's server) behind the
generator seam (``generator.py``): the settings (``config.py``), the server's stream
(``sse.py``, ``stream.py``), which URL to try (``health.py``), the generator itself
(``engine.py``) and what the server says of its speculation (``metrics.py``)."""
