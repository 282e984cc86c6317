"""Lexical analysis: the terms a chunk is indexed with and a query is matched by."""

from __future__ import annotations

from textkit.analysis import document_terms, impact, query_terms, term_frequencies


def test_english_words_are_stemmed_and_stop_words_dropped() -> None:
    assert query_terms("The types of indexes") == ["type", "index"]
    # Lucene's short list: words that carry a technical question stay
    assert query_terms("should it run only once") == ["should", "run", "onli", "onc"]
    assert query_terms("Indexing a type") == ["index", "type"]


def test_an_identifier_is_a_term_whole_and_by_its_parts() -> None:
    assert query_terms("work_mem") == ["work_mem", "work", "mem"]
    assert query_terms("pg_stat_activity") == ["pg_stat_activity", "pg", "stat", "activ"]
    assert query_terms("os.path.join()") == ["os.path.join", "os", "path", "join"]
    # a stop word inside an identifier matches only through the whole identifier
    assert query_terms("mic_to_windows_866") == ["mic_to_windows_866", "mic", "window", "866"]


def test_a_sentence_end_is_not_an_identifier() -> None:
    assert query_terms("Use it. Then stop") == ["use", "stop"]


def test_full_width_and_case_fold() -> None:
    full_width = "".join(chr(ord(c) + 0xFEE0) for c in "POSTGRES")  # full-width forms
    assert query_terms(f"{full_width} Vacuum") == query_terms("postgres vacuum")


def test_chinese_is_cut_into_words_and_documents_also_index_characters() -> None:
    assert query_terms("统计每一行重复出现了多少次")[:2] == ["统计", "每"]
    assert "件大" not in query_terms("显示文件大小")  # no bigram across a word boundary
    assert query_terms("文件大小") == ["文件大小"]
    # a document also has the words inside a compound, and every character
    assert document_terms("文件大小") == ["文件", "大小", "文件大小", "文", "件", "大", "小"]
    # the characters are there for one-character queries; the length counts the words
    assert term_frequencies("文件大小")[1] == 3
    assert query_terms("表") == ["表"] and document_terms("表格")[-2:] == ["表", "格"]


def test_kana_and_hangul_give_bigrams() -> None:
    assert query_terms("ひらがな 한국어") == ["ひら", "らが", "がな", "한국", "국어"]


def test_mixed_text_keeps_both_scripts() -> None:
    assert query_terms("配置 shared_buffers 参数") == [
        "配置",
        "shared_buffers",
        "share",
        "buffer",
        "参数",
    ]


def test_over_long_tokens_are_not_indexed() -> None:
    assert document_terms("x" * 65 + " word") == ["word"]


def test_term_frequencies_count_repeats_and_length() -> None:
    frequencies, length = term_frequencies("apple banana apple")
    assert frequencies == {"appl": 2, "banana": 1}
    assert length == 3


def test_impact_saturates_with_tf_and_falls_with_length() -> None:
    assert impact(1, 100) < impact(2, 100) < impact(50, 100) < 2.2
    assert impact(2, 50) > impact(2, 100) > impact(2, 400)
