"""codespec: a local code-completion daemon with speculative decoding."""

__version__ = "0.1.0"
