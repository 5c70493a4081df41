"""The chapter's tokenizer: a byte-level BPE trained at run time on the
Python sources that ship with the interpreter. It lives below the chapters,
in ``mlbook.common.tokenizer``, because the reference training loop
(``mlbook.common_torch.reference_loop``) trains on it too; the chapter names
it here as before."""

from mlbook.common.tokenizer import BYTE_ALPHABET as BYTE_ALPHABET
from mlbook.common.tokenizer import EOS as EOS
from mlbook.common.tokenizer import SKIP_DIRS as SKIP_DIRS
from mlbook.common.tokenizer import Corpus as Corpus
from mlbook.common.tokenizer import Throughput as Throughput
from mlbook.common.tokenizer import encode_documents as encode_documents
from mlbook.common.tokenizer import measure_throughput as measure_throughput
from mlbook.common.tokenizer import python_sources as python_sources
from mlbook.common.tokenizer import tokenizer_sha256 as tokenizer_sha256
from mlbook.common.tokenizer import train_bpe as train_bpe
