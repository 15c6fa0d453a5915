"""Next-edit suggestions (issue 53): where the user's recent edits say the next ones are.

Pure parts first, each in a module of its own: a document's edit history (``history.py``),
the prompt in Sweep's open format (``prompt.py``), and from the window the model rewrote to
the edits worth showing (``edits.py``).
"""
