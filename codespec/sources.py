"""The names of where things come from, shared by the engine that produces them, the servers
that label requests with them and the stats that count them (the stats cannot import the
engine: they stand beside it, ``docs/architecture.md``).

* Proposal sources: who proposed a token the target verified (``engine/proposers.py``), and a
  remote engine's own drafts (``SERVER``).
* Context sources: what a prompt held beyond its own file (the stats' ``context`` column).
"""

# -- proposal sources ---------------------------------------------------------------------------
NGRAM = "ngram"  # the prompt's own n-grams (``engine/ngram.py``)
WORKSPACE = "workspace"  # the workspace's and the accepted completions' ids (``engine/corpus.py``)
DRAFT = "draft"  # the small model (``engine/draft.py``)
REWRITE = (
    "rewrite"  # the text a rewrite copies from, aligned with the output (``engine/rewrite.py``)
)
SERVER = "server"  # a remote engine's own speculation, as its server reports it (``remote/``)
LOOKUP_SOURCES = (NGRAM, WORKSPACE, REWRITE)
SOURCES = (*LOOKUP_SOURCES, DRAFT)
# those the stats keep a proposed/accepted pair of columns for (``stats/record.py``)
RECORDED_SOURCES = (NGRAM, DRAFT, WORKSPACE, SERVER)

# -- context sources ----------------------------------------------------------------------------
WORKSPACE_CONTEXT = "workspace"  # definitions from the workspace index (``workspace/context.py``)
NEIGHBOUR_CONTEXT = "neighbours"  # other open documents' snippets (``workspace/snippets.py``)
CLIENT_CONTEXT = "client"  # files an HTTP client sent (``input_extra``)
