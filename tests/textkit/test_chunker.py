import hashlib
import itertools
import random
import re
import time

import pytest

from textkit.chunker import ChunkPiece, chunk_text
from textkit.text import token_count

WORDS = [
    "index", "search", "vector", "chunk", "document", "version", "publish", "tenant", "query",
    "answer", "model", "embed", "latency", "cache", "worker", "lease", "retry", "outbox",
    "stage", "build", "manifest", "policy",
]  # fmt: skip


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 18))).capitalize() + "."


def paragraph(rng: random.Random, sentences: tuple[int, int]) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(*sentences)))


def document(seed: int, count: int, sentences: tuple[int, int]) -> list[str]:
    rng = random.Random(seed)
    return [paragraph(rng, sentences) for _ in range(count)]


def changed_hashes(before: list[ChunkPiece], after: list[ChunkPiece]) -> int:
    old = {piece.content_hash for piece in before}
    return sum(1 for piece in after if piece.content_hash not in old)


class TestArguments:
    @pytest.mark.parametrize(("size", "overlap"), [(49, 0), (100, -1), (100, 50), (100, 80)])
    def test_rejects_bad_sizes(self, size: int, overlap: int) -> None:
        with pytest.raises(ValueError):
            chunk_text("Some text.", size=size, overlap=overlap)

    def test_accepts_the_limits(self) -> None:
        assert len(chunk_text("Some text.", size=50, overlap=24)) == 1


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_whitespace_only_gives_no_chunks(text: str) -> None:
    assert chunk_text(text, size=100, overlap=10) == []


def test_short_text_is_one_chunk_with_hash_and_tokens() -> None:
    [piece] = chunk_text("  Hello world. 你好。  ", size=100, overlap=10)
    assert piece == ChunkPiece(
        ordinal=0,
        text="Hello world. 你好。",
        content_hash=hashlib.sha256("Hello world. 你好。".encode()).hexdigest(),
        token_count=4,
        char_start=2,  # the text's own leading spaces come before it
        char_end=18,
    )


def test_packs_whole_sentences_within_size() -> None:
    sentences = [f"Sentence number {i} talks about chunking." for i in range(60)]
    pieces = chunk_text(" ".join(sentences), size=200, overlap=0)
    assert [p.ordinal for p in pieces] == list(range(len(pieces)))
    assert len(pieces) > 5
    for piece in pieces:
        assert len(piece.text) <= 200
        assert piece.content_hash == hashlib.sha256(piece.text.encode()).hexdigest()
        assert piece.token_count == token_count(piece.text)
        assert re.fullmatch(r"(Sentence number \d+ talks about chunking\. ?)+", piece.text)
    # Without overlap every sentence appears exactly once, in order.
    assert " ".join(p.text for p in pieces) == " ".join(sentences)


def test_overlap_repeats_trailing_sentences() -> None:
    sentences = [f"Fact {i:02d} is here." for i in range(40)]  # 16 characters each
    pieces = chunk_text(" ".join(sentences), size=100, overlap=40)
    for previous, current in itertools.pairwise(pieces):
        tail = previous.text[-33:]  # the last two sentences: 16 + 1 + 16 characters
        assert current.text.startswith(tail)
    assert pieces[-1].text.endswith("Fact 39 is here.")


def test_chinese_text_is_cut_at_sentence_ends() -> None:
    sentences = [
        "知识库管理系统支持上传文档。",
        "每次检索都只看到一个完整的版本！",
        "发布之后旧版本会被回收吗？",
        "会的；后台任务负责清理。",
    ] * 10
    pieces = chunk_text("".join(sentences), size=60, overlap=0)
    assert len(pieces) > 3
    assert "".join(p.text for p in pieces) == "".join(sentences)
    for piece in pieces:
        assert len(piece.text) <= 60
        assert piece.text[-1] in "。！？；"
        assert piece.text.startswith(("知识", "每次", "发布", "会的"))


def test_long_sentence_without_spaces_is_hard_split_with_overlap() -> None:
    text = "".join(chr(0x4E00 + i % 500) for i in range(1000))
    pieces = chunk_text(text, size=100, overlap=20)
    assert all(len(p.text) <= 100 for p in pieces)
    for previous, current in itertools.pairwise(pieces):
        assert current.text.startswith(previous.text[-20:])
    rebuilt = pieces[0].text + "".join(p.text[20:] for p in pieces[1:])
    assert rebuilt == text


def test_long_sentence_with_spaces_is_split_between_words() -> None:
    words = [f"w{i:04d}" for i in range(400)]
    pieces = chunk_text(" ".join(words), size=100, overlap=0)
    assert all(len(p.text) <= 100 for p in pieces)
    assert [w for p in pieces for w in p.text.split(" ")] == words


def test_chunks_never_span_a_break_after_a_long_paragraph() -> None:
    first = "The first paragraph is long enough to stand alone in its chunk."
    second = "The second one is too."
    pieces = chunk_text(f"{first}\n\n{second}", size=200, overlap=50)
    assert [p.text for p in pieces] == [first, second]


def test_a_short_heading_joins_the_paragraph_after_it() -> None:
    # Holds unless the body paragraph happens to be an anchor; this one is not.
    text = "Installation\n\nRun the installer and follow the prompts on screen."
    assert [p.text for p in chunk_text(text, size=200, overlap=0)] == [text]


def test_is_deterministic() -> None:
    text = "\n\n".join(document(seed=3, count=30, sentences=(1, 6)))
    assert chunk_text(text, size=300, overlap=60) == chunk_text(text, size=300, overlap=60)


@pytest.mark.parametrize("edited", [1, 57, 100, 143, 198])
def test_editing_one_paragraph_keeps_distant_chunks_identical(edited: int) -> None:
    paragraphs = document(seed=7, count=200, sentences=(1, 8))
    before = chunk_text("\n\n".join(paragraphs), size=800, overlap=100)
    paragraphs[edited] = paragraphs[edited].replace(".", ", with a late edit.", 1)
    after = chunk_text("\n\n".join(paragraphs), size=800, overlap=100)
    assert len(before) > 100
    assert changed_hashes(before, after) <= 0.02 * len(before)


def test_edit_reach_is_bounded_among_short_paragraphs() -> None:
    # Every paragraph is short, so only the content-defined anchors separate groups.
    paragraphs = document(seed=11, count=200, sentences=(1, 1))
    before = chunk_text("\n\n".join(paragraphs), size=800, overlap=100)
    for edited in range(0, 200, 9):
        changed = list(paragraphs)
        changed[edited] += " Edited."
        after = chunk_text("\n\n".join(changed), size=800, overlap=100)
        assert changed_hashes(before, after) <= 4


def test_ten_megabyte_single_line_chunks_quickly() -> None:
    text = ("The quick brown fox jumps over the lazy dog near the river bank. " * 160_000)[
        :10_000_000
    ]
    started = time.perf_counter()
    pieces = chunk_text(text, size=800, overlap=100)
    elapsed = time.perf_counter() - started
    assert elapsed < 8, f"chunking 10 MB took {elapsed:.1f}s"
    assert all(len(p.text) <= 800 for p in pieces)
    assert len(pieces) > 10_000_000 // 800
    assert pieces[0].text.startswith("The quick brown fox")
    assert text.rstrip().endswith(pieces[-1].text)
