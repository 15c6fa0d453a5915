"""The daemon side: settings, the engine worker, LSP sessions, the socket server and the relay."""
