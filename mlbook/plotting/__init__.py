"""Figure pieces: the book's matplotlib style (style.py) and the JupyterLab
host of live figures (live.py)."""
