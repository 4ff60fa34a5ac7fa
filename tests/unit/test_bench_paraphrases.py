"""The paraphrase benchmark's overlap split (content words) and its stratified draw of STS-B."""

from __future__ import annotations

import pytest

from bench import paraphrases
from bench.paraphrases import LOW_OVERLAP, content_words, jaccard, jaccard_old, pairs


def test_content_words_are_lower_cased_without_punctuation_or_stop_words() -> None:
    assert content_words("A woman is putting on MAKEUP.") == {"woman", "putting", "makeup"}
    assert content_words("U.N. observers reach the site, don't they?") == {
        "u",
        "n",
        "observers",
        "reach",
        "site",
    }
    assert content_words("Como posso pagar a taxa de IVA?", "pt") == {"posso", "pagar", "taxa", "iva"}


def test_the_split_counts_shared_nouns_and_verbs_only() -> None:
    first, second = "A woman is applying cosmetics to her face.", "A woman is putting on makeup."
    assert jaccard(first, second) == pytest.approx(
        1 / 6
    )  # woman shared; applying cosmetics face putting makeup
    assert jaccard(first, second) < LOW_OVERLAP
    assert jaccard("A man is playing a guitar.", "The man plays the guitar!") == pytest.approx(2 / 4)
    assert jaccard("", "") == 0.0
    # the earlier split kept "a" out only as a one-letter word, and kept Snowball's function words in
    assert jaccard_old("Why should we go there?", "Should we go there now?") < 1.0
    assert jaccard("Why should we go there?", "Should we go there now?") == pytest.approx(1.0)


def test_the_stratified_draw_takes_every_low_overlap_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    low = [(f"A cat named {n} sleeps.", f"Kitten {n}x dozes.") for n in range(5)]
    high = [(f"A dog named {n} runs fast.", f"A dog named {n} runs.") for n in range(50)]
    monkeypatch.setattr(paraphrases, "stsb_pairs", lambda score=4.0: high[:25] + low + high[25:])
    drawn = pairs(20, "STSB", seed=3)
    assert len(drawn) == 20
    assert sum(p.overlap < LOW_OVERLAP for p in drawn) == 5
    assert [p.faq for p in drawn] == sorted(p.faq for p in drawn)
    assert all(p.lesson == f"[{p.faq}] {p.first}" for p in drawn)
    other = pairs(20, "STSB", seed=4)
    assert {p.faq for p in other if p.overlap >= LOW_OVERLAP} != {
        p.faq for p in drawn if p.overlap >= LOW_OVERLAP
    }
    plain = pairs(55, "STSB", draw="random")
    assert len(plain) == 55
    with pytest.raises(ValueError, match="draw"):
        pairs(20, "STSB", draw="every")
