"""Figure pieces: the book's matplotlib style, matplotlib slider figures
(widgets.py), and the JupyterLab host of live figures (live.py)."""
