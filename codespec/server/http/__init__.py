"""``codespec serve --http``: llama-server's and OpenAI's completion endpoints on the daemon's
own worker, so llama.vscode, llama.vim, Zed and other HTTP clients get codespec's engine.

``wire.py`` reads what the clients send and writes what they read (pure functions);
``front.py`` turns one request into a job for the worker and its result into an answer;
``app.py`` is the Starlette application (admission, routes, streaming); ``listen.py`` runs it
with uvicorn inside the daemon's event loop. What is honoured and what is not: docs/http.md.
"""
