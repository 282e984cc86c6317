"""Test search's hits in words: what a hit's score is, which lists found it, why it ranks where
it does, and where in its file it stands.

The API's `explain` names the learned fusion's features as the model does (`bm25_share`,
`cross_x_cos`: `retrieval.search.fusion.FEATURES`); a person reads them here as what they
measure, with the value the hit had ("keyword rank 1", "similarity 0.31", "in another language
than the query"). Features that say the same thing of a hit (not in the keyword list: its rank,
its score and its share are all zero) are told once, their contributions summed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext, gettext_lazy

from console.formats import location_words
from retrieval.search.fusion import ZH_SHARE
from retrieval.search.hits import Hit, Ranking
from textkit.extract import Location
from textkit.text import cjk_share

NOT_IN_VECTOR = gettext_lazy("not in the vector list")
NOT_IN_KEYWORD = gettext_lazy("not in the keyword list")
NOT_IN_ENGLISH = gettext_lazy("not in the English list")
SAME_LANGUAGE = gettext_lazy("in the query's language")
OTHER_LANGUAGE = gettext_lazy("in another language than the query")
NOT_ZH_QUERY = gettext_lazy("a query not in Chinese")


def _rank(reciprocal: float) -> int:
    """The 1-based rank a feature `1 / (1 + rank)` was made of."""
    return round(1 / reciprocal - 1)


def _share(value: float) -> str:
    return f"{value:.0%}"


# Each feature of the learned fusion as words about the hit, from the hit's value of it (a list
# that did not find the hit, or an interaction that is off, `_phrase` says first).
Words = Callable[[float], str]


def _w(text: str, **values: Any) -> str:
    """A translated phrase (`gettext` at the call, where extraction sees it) with its values."""
    return text % values if values else text


FEATURE_WORDS: dict[str, Words] = {
    "cos": lambda v: _w(gettext("similarity %(v)s"), v=f"{v:.2f}"),
    "cos_below_best": lambda v: (
        _w(gettext("the best similarity of the list"))
        if v <= 0
        else _w(gettext("similarity %(v)s below the best"), v=f"{v:.2f}")
    ),
    "in_vector": lambda v: _w(gettext("in the vector list")),
    "vector_reciprocal_rank": lambda v: (
        _w(gettext("vector rank %(n)s"), n=_rank(v)) if v > 0 else str(NOT_IN_VECTOR)
    ),
    "bm25_share": lambda v: _w(
        gettext("matches %(share)s of what the query's words could score"), share=_share(v)
    ),
    "bm25_of_best": lambda v: _w(gettext("keyword score %(share)s of the best"), share=_share(v)),
    "in_keyword": lambda v: _w(gettext("in the keyword list")),
    "keyword_reciprocal_rank": lambda v: (
        _w(gettext("keyword rank %(n)s"), n=_rank(v)) if v > 0 else str(NOT_IN_KEYWORD)
    ),
    "keyword_best_share": lambda v: _w(
        gettext("this query's best keyword match scoring %(share)s"), share=_share(v)
    ),
    "vector_best": lambda v: _w(gettext("this query's best similarity being %(v)s"), v=f"{v:.2f}"),
    "vector_spread": lambda v: _w(
        gettext("this query's top ten similarities spreading over %(v)s"), v=f"{v:.2f}"
    ),
    "query_zh": lambda v: _w(gettext("a Chinese query")) if v else str(NOT_ZH_QUERY),
    "chunk_zh": lambda v: (
        _w(gettext("a Chinese passage")) if v else _w(gettext("a passage not in Chinese"))
    ),
    "cross": lambda v: str(OTHER_LANGUAGE if v else SAME_LANGUAGE),
    "cross_x_bm25_share": lambda v: _w(
        gettext("a keyword match across languages (%(share)s)"), share=_share(v)
    ),
    "cross_x_bm25_of_best": lambda v: _w(
        gettext("a keyword score across languages (%(share)s of best)"), share=_share(v)
    ),
    "cross_x_cos": lambda v: _w(gettext("similarity %(v)s across languages"), v=f"{v:.2f}"),
    "cross_x_keyword_reciprocal_rank": lambda v: (
        _w(gettext("keyword rank %(n)s across languages"), n=_rank(v))
        if v > 0
        else str(NOT_IN_KEYWORD)
    ),
    "query_zh_x_bm25_share": lambda v: _w(
        gettext("a Chinese query's keyword match (%(share)s)"), share=_share(v)
    ),
    "query_zh_x_cos": lambda v: _w(gettext("a Chinese query's similarity %(v)s"), v=f"{v:.2f}"),
    # the English list's (a version with one, a query not in Chinese)
    "en_cos": lambda v: _w(gettext("English similarity %(v)s"), v=f"{v:.2f}"),
    "en_cos_below_best": lambda v: (
        _w(gettext("the best English similarity of the list"))
        if v <= 0
        else _w(gettext("English similarity %(v)s below the best"), v=f"{v:.2f}")
    ),
    "in_english": lambda v: _w(gettext("in the English list")),
    "english_reciprocal_rank": lambda v: (
        _w(gettext("English rank %(n)s"), n=_rank(v)) if v > 0 else str(NOT_IN_ENGLISH)
    ),
    "english_best": lambda v: _w(
        gettext("this query's best English similarity being %(v)s"), v=f"{v:.2f}"
    ),
}
# The features a list's absence zeroes (a hit it did not find has its floor there).
_VECTOR = {"cos", "cos_below_best", "in_vector", "vector_reciprocal_rank", "cross_x_cos"}
_VECTOR |= {"query_zh_x_cos"}
_KEYWORD = {"bm25_share", "bm25_of_best", "in_keyword", "keyword_reciprocal_rank"}
_KEYWORD |= {"cross_x_bm25_share", "cross_x_bm25_of_best", "cross_x_keyword_reciprocal_rank"}
_KEYWORD |= {"query_zh_x_bm25_share"}
_ENGLISH = {"in_english", "english_reciprocal_rank"}
_CROSS = {f for f in FEATURE_WORDS if f.startswith("cross_x_")}
_ZH_QUERY = {f for f in FEATURE_WORDS if f.startswith("query_zh_x_")}


def _phrase(name: str, value: float, values: dict[str, float]) -> str:
    """One feature of one hit in words. An interaction that is off (the same language, a query
    not in Chinese) is said as that, so its share of the score is not read as a match; then a
    hit a list did not find is said to be absent from it, whatever that list's features hold
    (its floor)."""
    if name in _CROSS and not values.get("cross"):
        return str(SAME_LANGUAGE)
    if name in _ZH_QUERY and not values.get("query_zh"):
        return str(NOT_ZH_QUERY)
    if name in _VECTOR and not values.get("in_vector"):
        return str(NOT_IN_VECTOR)
    if name in _KEYWORD and not values.get("in_keyword"):
        return str(NOT_IN_KEYWORD)
    if name in _ENGLISH and not values.get("in_english"):
        return str(NOT_IN_ENGLISH)
    return FEATURE_WORDS[name](value)


def _signed(value: float) -> str:
    return f"{value:+.2f}".replace("-", "\u2212")


def fused_words(fused: dict[str, Any], *, most: int = 4) -> str:
    """What moved a hit's fused score most, in words: for the learned fusion, each feature as
    the hit's value of it ("keyword rank 1 +0.90"), raised first then lowered (contributions to
    the model's logit, against the average candidate it was fitted on); for convex and rrf,
    what each list gave."""
    contributions = fused.get("contributions") or []
    if contributions and "value" not in contributions[0]:  # convex / rrf: the legs' parts
        return gettext(", ").join(
            gettext("%(list)s list gave %(part)s")
            % {
                "list": LIST_WORDS.get(c["feature"], c["feature"]),
                "part": f"{c['contribution']:.3g}",
            }
            for c in contributions
        )
    values = {c["feature"]: float(c["value"]) for c in contributions}
    summed: dict[str, float] = {}
    for c in contributions:
        words = _phrase(c["feature"], float(c["value"]), values)
        summed[words] = summed.get(words, 0.0) + float(c["contribution"])
    top = sorted(summed.items(), key=lambda item: -abs(item[1]))[:most]
    raised = [f"{words} ({_signed(part)})" for words, part in top if part > 0]
    lowered = [f"{words} ({_signed(part)})" for words, part in top if part <= 0]
    said = []
    if raised:
        said.append(gettext("raised by %(what)s") % {"what": gettext(", ").join(raised)})
    if lowered:
        said.append(gettext("lowered by %(what)s") % {"what": gettext(", ").join(lowered)})
    return gettext("; ").join(said)


# The two lists as a person names them.
LIST_WORDS = {
    "vector": gettext_lazy("vector"),
    "keyword": gettext_lazy("keyword"),
    "english": gettext_lazy("English"),
}


def _leg_words(leg: str, place: dict[str, Any] | None) -> str:
    if place is None:
        return gettext("%(list)s: not in its list") % {"list": LIST_WORDS.get(leg, leg)}
    if leg == "vector":
        return gettext("vector #%(rank)s (similarity %(score)s)") % {
            "rank": place["rank"],
            "score": f"{place['score']:.3f}",
        }
    if leg == "english":
        return gettext("English #%(rank)s (similarity %(score)s)") % {
            "rank": place["rank"],
            "score": f"{place['score']:.3f}",
        }
    words = {"rank": place["rank"], "score": f"{place['score']:.3g}"}
    if "share_of_bound" in place:
        return gettext(
            "keyword #%(rank)s (BM25 %(score)s, %(share)s of the most the query's words could "
            "score)"
        ) % {**words, "share": f"{place['share_of_bound']:.0%}"}
    return gettext("keyword #%(rank)s (BM25 %(score)s)") % words


def rank_words(ranking: dict[str, Any] | None) -> str:
    """One line on why a hit ranks where it does: its place in each list and, for hybrid,
    what moved its fused score."""
    if not ranking:
        return ""
    lists = ("vector", "keyword", "english")
    parts = [_leg_words(leg, ranking[leg]) for leg in lists if leg in ranking]
    fused = ranking.get("fused")
    if fused:
        parts.append(
            gettext("fused %(score)s: %(why)s")
            % {"score": f"{fused['score']:.3f}", "why": fused_words(fused)}
        )
        if fused.get("kept"):
            parts.append(kept_words(fused["kept"]))
    return " · ".join(parts)


def kept_words(kept: dict[str, Any]) -> str:
    """Why the keyword gate (`fusion.KeywordGate`) kept a hit where it is, in the page's
    language (the API's `why` says it in English)."""
    if kept["at_rank"]:
        return gettext(
            "kept at rank %(n)s or better by the keyword gate, a strong keyword match"
        ) % {"n": kept["keyword_rank"]}
    return gettext(
        "kept in the answer by the keyword gate, a near-best keyword match (keyword rank %(n)s)"
    ) % {"n": kept["keyword_rank"]}


@dataclass(frozen=True)
class ScoreWords:
    """A hit's number as what it is: `label` beside the number, `meaning` once per column."""

    label: str
    meaning: str


def score_words(ranking: Ranking | None, mode: str) -> ScoreWords:
    """What the scores of one result list mean, by mode and fusion method."""
    method = ranking.method if ranking else None
    if mode == "vector":
        return ScoreWords(
            gettext("similarity"),
            gettext(
                "Similarity is the cosine between the query's vector and the passage's (1: the "
                "same direction); its scale depends on the embedding model."
            ),
        )
    if mode == "keyword":
        return ScoreWords(
            "BM25",
            gettext(
                "BM25 grows with the query's rarer words found in the passage; it has no fixed "
                "top, so each hit also says its share of the most the query's words could score."
            ),
        )
    if method == "rrf":
        return ScoreWords(
            gettext("rank fusion"),
            gettext(
                "Rank fusion adds 1/(60 + rank) from each list, weighted: only the order means "
                "something, not the size of the number."
            ),
        )
    if method == "convex":
        return ScoreWords(
            gettext("fused"),
            gettext(
                "The fused score adds each list's score as a share of that list's best hit, "
                "weighted: 1 is the best of both lists, whatever the query."
            ),
        )
    return ScoreWords(
        gettext("fusion estimate"),
        gettext(
            "The fusion estimate (0 to 1) is the learned fusion's estimate that the hit's "
            "document answers the query, from how its lists (and the English list, where it was "
            "read) rank it against this query's other candidates. It is relative, not a "
            "certainty: when nothing answers well, the best of the rest still scores high. Read "
            "it with what found the hit: found by meaning only, "
            "in another language than the query, is weak evidence."
        ),
    )


def _chinese(text: str) -> bool:
    return cjk_share(text) >= ZH_SHARE


def found_by(hit: Hit, ranking: dict[str, Any] | None, query: str, mode: str) -> str:
    """Which lists found a hybrid hit, and whether it is in the query's language (Chinese or
    not, as the fusion tells languages apart); empty for a one-list search."""
    if mode != "hybrid" or not ranking:
        return ""
    vector, keyword = ranking.get("vector"), ranking.get("keyword")
    if vector and keyword:
        words = gettext(
            "found by meaning (vector #%(vector)s) and by its words (keyword #%(keyword)s)"
        ) % {"vector": vector["rank"], "keyword": keyword["rank"]}
    elif vector:
        words = gettext("found by meaning only (vector #%(vector)s); not in the keyword list") % {
            "vector": vector["rank"]
        }
    elif keyword:
        words = gettext(
            "found by its words only (keyword #%(keyword)s); not in the vector list"
        ) % {"keyword": keyword["rank"]}
    elif ranking.get("english"):
        words = gettext("found by the English list only (English #%(english)s)") % {
            "english": ranking["english"]["rank"]
        }
    else:
        words = gettext("in neither list")
    if ranking.get("english") and (vector or keyword):
        words += gettext("; English #%(english)s") % {"english": ranking["english"]["rank"]}
    if _chinese(query) != _chinese(hit.text):
        words += gettext("; ") + str(OTHER_LANGUAGE)
    return words


def where_words(location: Any) -> str:
    """The pages, slides or rows a hit's chunk stands on, as the chunk's page says them
    ("page 3", "sheet Q3, rows 2-41"); empty when its file has none."""
    if not isinstance(location, dict):
        return ""
    try:
        return location_words(Location.from_json(location))
    except (KeyError, TypeError, ValueError):
        return ""
