"""Reports: the only layer (with the CLI) that formats results as text, JSON or files."""
