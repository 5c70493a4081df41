"""mlbook: the tested code behind the chapters of the book.

Calculators (config, hardware, flops, mfu, ...) are pure Python and import no
torch, so they load instantly. Torch demos live in their own modules
(model, ...) and import torch when they are imported.
"""

__version__ = "0.1.0"
