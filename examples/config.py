"""Tiny config helpers: a file to try completions on."""


def parse_config(path):
    """Read a simple KEY=VALUE config file into a dict."""
    result = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            result[key.strip()] = value.strip()
    return result


def parse_env(path):
    """Read a simple KEY=VALUE env file (lines may start with 'export ') into a dict."""
    result = {}
    
