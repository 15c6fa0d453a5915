"""Acceptance stats: what the engine did for each request and what the user did with each
suggestion, per language and request kind.

``record``: the row a finished request leaves; ``verdicts``: the rules that judge a suggestion
(shown, accepted, partially accepted, rejected); ``store``: the crash-safe SQLite file and its
one writer thread; ``report``: figures from the store, as a table, JSON or an HTML page.
No source code is ever stored: only lengths, counts, timings, languages, kinds and ids.
"""
