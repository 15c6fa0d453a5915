"""The torch target backend: a transformers model behind the engine's backend seam
(``engine/backend.py``), beside ``ggml/`` (llama.cpp's CPU kernels).

``kvcache.CachedModel`` is the backend (its K/V cache, slots, look-ahead trees); ``decoder.py``
runs a pass layer by layer so a stop signal is asked between layers; ``attention.py`` computes
each row's attention on its own where rows must not depend on the pass's width;
``buffers.py`` sizes and copies the cache's tensors. The engine (``engine/``) imports no torch.
"""
