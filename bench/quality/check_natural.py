"""Check the natural-language retrieval questions in `natural.jsonl` against the corpus manifest.

    python -m bench.quality.check_natural                   # default manifest under .data/
    python -m bench.quality.check_natural --manifest PATH   # another manifest.json

Every line is one question: {"id", "kind", "lang", "question", "answers", "where"}. The kind fixes
the question's language and the language of the pages that answer it:

    en-paraphrase, en-fact   English question, English pages (en/...)
    zh-paraphrase            Chinese question, Chinese pages (zh/...)
    zh-to-en                 Chinese question answered only by English pages
    en-to-zh                 English question answered only by Chinese pages

Exit status 0 when every check passes; the counts per kind are printed either way. Standard
library only, so it runs before the project's environment is installed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
QUESTIONS = HERE / "natural.jsonl"
MANIFEST = ROOT / ".data" / "quality" / "corpus" / "manifest.json"

FIELDS = {"id", "kind", "lang", "question", "answers", "where"}
# kind -> (language of the question, language prefix of every answer key)
KINDS: dict[str, tuple[str, str]] = {
    "en-paraphrase": ("en", "en/"),
    "en-fact": ("en", "en/"),
    "zh-paraphrase": ("zh", "zh/"),
    "zh-to-en": ("zh", "en/"),
    "en-to-zh": ("en", "zh/"),
}
# The least number of questions of each kind the set was written to hold.
MINIMUM: dict[str, int] = {
    "en-paraphrase": 70,
    "en-fact": 40,
    "zh-paraphrase": 45,
    "zh-to-en": 60,
    "en-to-zh": 45,
}
ID = re.compile(r"nat-(\d{3,})")
CJK = re.compile(r"[\u3400-\u9fff]")


def load_manifest(path: Path) -> set[str]:
    """The document keys of the corpus."""
    return {str(entry["key"]) for entry in json.loads(path.read_text(encoding="utf-8"))}


def check_question(q: dict[str, object], keys: set[str]) -> list[str]:
    """Problems with one question, as short messages (empty when it is well formed)."""
    problems: list[str] = []
    if set(q) != FIELDS:
        problems.append(f"fields {sorted(q)}")
    kind, lang = q.get("kind"), q.get("lang")
    question, where, answers = q.get("question"), q.get("where"), q.get("answers")
    if not isinstance(question, str) or not question.strip():
        problems.append("empty question")
        question = ""
    if not isinstance(where, str) or not where.strip():
        problems.append("empty where")
    if not isinstance(answers, list) or not answers:
        problems.append("no answers")
        answers = []
    if len(set(map(str, answers))) != len(answers):
        problems.append("duplicate answer keys")
    for key in answers:
        if not isinstance(key, str) or key not in keys:
            problems.append(f"answer {key!r} is not in the manifest")
    if not isinstance(kind, str) or kind not in KINDS:
        problems.append(f"kind {kind!r}")
        return problems
    want_lang, prefix = KINDS[kind]
    if lang != want_lang:
        problems.append(f"lang {lang!r}, but {kind} questions are {want_lang}")
    wrong = [str(key) for key in answers if not str(key).startswith(prefix)]
    if wrong:
        problems.append(f"{kind} answers must be under {prefix}: {wrong}")
    has_cjk = bool(CJK.search(question))
    if want_lang == "zh" and not has_cjk:
        problems.append("a zh question without Chinese characters")
    if want_lang == "en" and has_cjk:
        problems.append("an en question with Chinese characters")
    return problems


def check(questions: Path, manifest: Path, *, minimum: dict[str, int] | None = None) -> int:
    """Print counts per kind and every problem; 0 when there is none. `minimum`: the least
    number of questions per kind (this set's MINIMUM unless another set's is given)."""
    minimum = MINIMUM if minimum is None else minimum
    if not manifest.exists():
        print(f"no manifest at {manifest}: build its corpus first")
        return 1
    keys = load_manifest(manifest)
    problems: list[str] = []
    counts: Counter[str] = Counter()
    docs: Counter[str] = Counter()
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    expected = 1
    for n, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"line {n}: not JSON ({err})")
            continue
        if not isinstance(q, dict):
            problems.append(f"line {n}: not an object")
            continue
        qid = str(q.get("id", f"line {n}"))
        match = ID.fullmatch(qid)
        if match is None or int(match.group(1)) != expected:
            problems.append(f"{qid}: ids should run nat-001, nat-002, ... (expected {expected})")
        expected += 1
        if qid in seen_ids:
            problems.append(f"{qid}: duplicate id")
        seen_ids.add(qid)
        text = str(q.get("question", "")).strip().lower()
        if text in seen_text:
            problems.append(f"{qid}: duplicate question text")
        seen_text.add(text)
        problems.extend(f"{qid}: {p}" for p in check_question(q, keys))
        counts[str(q.get("kind"))] += 1
        for key in q.get("answers") or []:
            docs[str(key)] += 1
    for kind in KINDS:
        print(f"{kind:<14} {counts[kind]:4}  (at least {minimum[kind]})")
        if counts[kind] < minimum[kind]:
            problems.append(f"{kind}: {counts[kind]} questions, fewer than {minimum[kind]}")
    print(f"{'total':<14} {sum(counts.values()):4}  over {len(docs)} distinct documents")
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="the JSONL file")
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help="the corpus manifest")
    a = parser.parse_args()
    return check(a.questions, a.manifest)


if __name__ == "__main__":
    sys.exit(main())
