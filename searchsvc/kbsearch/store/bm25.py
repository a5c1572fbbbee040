"""BM25 sparse vectors for the keyword lane: tokenizer, stemmer and weights pinned here.

Tokens: the text is NFKC-normalised and casefolded, then split into Unicode word tokens (`\\w+`:
letters, digits and underscore; "IL-6" gives "il" and "6"). English stopwords (the NLTK list,
the same as Qdrant's built-in English list) and tokens over MAX_TOKEN_CHARS (hashes, base64) are
dropped; each remaining token is stemmed with the Snowball English stemmer (PyStemmer).
Identifiers stay whole as `\\w+` keeps them ("load_config"); other scripts' words (Greek, Cyrillic...)
are whole-word tokens the English stemmer leaves as they are.

Chinese, Japanese and Korean: a word token holding Han, kana or Hangul is cut where the script
changes; its other parts take the English path above, its CJK runs are segmented by
kbsearch.store.cjk (jieba-rs for Chinese, SudachiPy for Japanese, MeCab-ko for Korean; the
language of Han runs is read per chunk and per query from script ranges, Hangul is Korean),
function words dropped, and their terms kept unstemmed up to MAX_TOKEN_CHARS. A text without Han,
kana or Hangul takes exactly the path of kb-bm25-en-v2, so its terms are unchanged.

Term ids: the absolute value of the signed 32-bit MurmurHash3 (seed 0, UTF-8 bytes) of the stem,
`abs(mmh3.hash(stem))`: the scheme of fastembed's `Qdrant/bm25`, Qdrant's server-side bm25 and
`qdrant_edge.Bm25`, so the engine's IDF modifier sees the same term as the same id everywhere.

Weights: a chunk term gets the BM25 term-frequency part tf*(k1+1) / (tf + k1*(1-b+b*len/avg_len))
with k1=1.2, b=0.75, avg_len=120; a query term gets 1.0 per distinct stem. IDF is left to the store
(Qdrant's IDF modifier), so it stays right as documents come and go.

Bounds on untrusted text (tests/searchsvc/store/test_sparse_properties.py): one pass of a linear regex
over the normalised text, and CJK runs segmented in pieces of at most cjk.PIECE_CHARS characters, so
time is linear in it, and the token count is at most three per character (a Chinese word of n
characters gives at most n+1 terms with its sub-words, and n >= 2 for each sub-word); NFKC and casefolding grow
a text by at most a constant factor (18 for U+FDFA). A query vector has at most one entry per token;
a chunk's at most its own and its two neighbours' tokens, each weight in (0, K1 + 1).

Neighbour context: a chunk's term counts also include its previous and next chunk's tokens at
NEIGHBOUR_WEIGHT (0.25) each, and so does its length. A question whose words straddle a chunk
boundary then still finds the chunk that answers it; on SciFact train this lifts keyword nDCG@10
from 0.695 to 0.711 (bench/LOG.md). Chunks are therefore encoded per document, in order.

Any change here changes the vectors: bump `Bm25Encoder.name`, which is part of the collection
signature, so an existing collection built with another encoder is refused with the re-index hint.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence

import mmh3
import Stemmer

from kbsearch.models import SparseVector
from kbsearch.store import cjk

K1 = 1.2
B = 0.75
# The mean chunk length in tokens (own tokens plus the neighbours' share) at the default chunk
# range, 500-800 characters: ~55 own tokens + 0.25 * 2 neighbours. 120 measured best on SciFact.
AVG_LEN = 120.0
NEIGHBOUR_WEIGHT = 0.25
MAX_TOKEN_CHARS = 40

_WORD = re.compile(r"\w+")

# NLTK's English stopword list (179 words), which is also qdrant's English list.
STOPWORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren aren't as at be because been before being
    below between both but by can couldn couldn't d did didn didn't do does doesn doesn't doing don don't down
    during each few for from further had hadn hadn't has hasn hasn't have haven haven't having he her here hers
    herself him himself his how i if in into is isn isn't it it's its itself just ll m ma me mightn mightn't more
    most mustn mustn't my myself needn needn't no nor not now o of off on once only or other our ours ourselves
    out over own re s same shan shan't she she's should should've shouldn shouldn't so some such t than that
    that'll the their theirs them themselves then there these they this those through to too under until up ve
    very was wasn wasn't we were weren weren't what when where which while who whom why will with won won't
    wouldn wouldn't y you you'd you'll you're you've your yours yourself yourselves
    """.split()  # noqa: SIM905 - 179 words read better as text than as a list literal
)


class Bm25Encoder:
    """Encodes a document's chunks and queries as BM25 sparse vectors (indices sorted ascending)."""

    name = "kb-bm25-cjk-v4"

    def __init__(self) -> None:
        # A PyStemmer object is not thread-safe; encoding runs in worker threads.
        self._local = threading.local()

    def tokens(self, text: str) -> list[str]:
        """The stems of `text`, in order, stopwords and over-long tokens dropped."""
        normal = unicodedata.normalize("NFKC", text).casefold()
        if not cjk.has_cjk(normal):
            return list(self._stemmer().stemWords([w for w in _WORD.findall(normal) if _english(w)]))
        lang = cjk.language(normal)
        korean = cjk.korean_runs(normal) if cjk.has_hangul(normal) else {}  # by offset: read in context
        out: list[str] = []
        english: list[int] = []  # where out holds a word still to stem, stemmed in one call below
        for match in _WORD.finditer(normal):
            word, at = match.group(), match.start()
            for run in cjk.runs(word) if cjk.has_cjk(word) else (word,):
                if cjk.is_hangul(run):
                    terms = [t for piece in korean.get(at) or cjk.pieces(run, "ko") for t in piece.terms]
                    out.extend(t for t in terms if 0 < len(t) <= MAX_TOKEN_CHARS)
                elif cjk.has_cjk(run):
                    out.extend(t for t in cjk.terms(run, lang) if 0 < len(t) <= MAX_TOKEN_CHARS)
                elif _english(run):
                    english.append(len(out))
                    out.append(run)
                at += len(run)
        for i, stem in zip(english, self._stemmer().stemWords([out[i] for i in english]), strict=True):
            out[i] = stem
        return out

    def encode_chunks(self, texts: Sequence[str]) -> list[SparseVector]:
        """The vectors of ONE document's chunks, given in document order (neighbours add context)."""
        counts = [Counter(self.tokens(text)) for text in texts]
        lengths = [sum(c.values()) for c in counts]
        vectors = []
        for i, own in enumerate(counts):
            tf: dict[str, float] = dict(own)
            length = float(lengths[i])
            for j in (i - 1, i + 1):
                if 0 <= j < len(counts):
                    for term, n in counts[j].items():
                        tf[term] = tf.get(term, 0.0) + NEIGHBOUR_WEIGHT * n
                    length += NEIGHBOUR_WEIGHT * lengths[j]
            norm = K1 * (1 - B + B * length / AVG_LEN)
            vectors.append(_vector({term_id(t): f * (K1 + 1) / (f + norm) for t, f in tf.items()}))
        return vectors

    def encode_query(self, text: str) -> SparseVector:
        """One weight-1.0 term per distinct stem; empty when the query has only stopwords."""
        return _vector(dict.fromkeys((term_id(t) for t in self.tokens(text)), 1.0))

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer: Stemmer.Stemmer | None = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = Stemmer.Stemmer("english")
        return stemmer


def _english(word: str) -> bool:
    return word not in STOPWORDS and len(word) <= MAX_TOKEN_CHARS


def term_id(stem: str) -> int:
    """abs() of the signed 32-bit MurmurHash3 of the stem's UTF-8 bytes (fastembed's scheme)."""
    return abs(mmh3.hash(stem))


def _vector(weights: dict[int, float]) -> SparseVector:
    indices = sorted(weights)
    return SparseVector(indices=indices, values=[weights[i] for i in indices])
