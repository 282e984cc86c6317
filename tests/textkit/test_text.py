from textkit.text import (
    is_cjk_term,
    lexical_document,
    lexical_query,
    lexical_terms,
    normalize_text,
    token_count,
)


class TestNormalizeText:
    def test_composes_to_nfc(self) -> None:
        assert normalize_text("cafe\u0301") == "caf\u00e9"

    def test_unifies_line_ends(self) -> None:
        assert normalize_text("a\r\nb\rc\nd") == "a\nb\nc\nd"

    def test_drops_control_characters_but_keeps_tabs_and_newlines(self) -> None:
        assert normalize_text("a\x00b\x07c\td\x1be\x7ff\x9fg\nh") == "abc\tdefg\nh"

    def test_page_and_line_separators_become_newlines(self) -> None:
        assert normalize_text("page one\x0cpage two\u2028line") == "page one\npage two\nline"

    def test_strips_trailing_whitespace_on_every_line(self) -> None:
        assert normalize_text("one   \ntwo\t\n  three") == "one\ntwo\n  three"

    def test_collapses_runs_of_blank_lines(self) -> None:
        assert normalize_text("a\n\n\n\n\nb\n\nc\n \n \n \nd") == "a\n\nb\n\nc\n\nd"

    def test_strips_the_whole_text(self) -> None:
        assert normalize_text("\n\n  hello  \n\n") == "hello"

    def test_only_whitespace_and_controls_gives_empty(self) -> None:
        assert normalize_text(" \x00\n\t\r\n ") == ""

    def test_is_idempotent(self) -> None:
        once = normalize_text("  A\r\n\r\n\r\n\r\nB\x00  \n 知识。 ")
        assert normalize_text(once) == once


class TestLexicalTerms:
    def test_lowercases_words_and_drops_punctuation(self) -> None:
        assert lexical_terms("Hello, World! It's v2.0") == ["hello", "world", "it", "s", "v2", "0"]

    def test_chinese_runs_become_overlapping_bigrams(self) -> None:
        assert lexical_terms("知识库管理") == ["知识", "识库", "库管", "管理"]

    def test_single_cjk_character_is_its_own_term(self) -> None:
        assert lexical_terms("我 是") == ["我", "是"]

    def test_mixed_scripts_keep_order(self) -> None:
        assert lexical_terms("RAG系统v2和Canon") == ["rag", "系统", "v2", "和", "canon"]

    def test_japanese_and_korean(self) -> None:
        assert lexical_terms("東京タワー") == ["東京", "京タ", "タワ", "ワー"]
        assert lexical_terms("한국어 검색") == ["한국", "국어", "검색"]

    def test_cyrillic_and_accents_are_words(self) -> None:
        assert lexical_terms("Привет, Мир! Café") == ["привет", "мир", "café"]

    def test_full_width_letters_and_ligatures_fold_to_plain(self) -> None:
        assert lexical_terms("ＡＰＩ ﬁle") == ["api", "file"]  # noqa: RUF001

    def test_underscores_split_words(self) -> None:
        assert lexical_terms("snake_case_name") == ["snake", "case", "name"]

    def test_duplicates_are_kept(self) -> None:
        assert lexical_terms("a b a") == ["a", "b", "a"]

    def test_no_terms(self) -> None:
        assert lexical_terms(" ...!!! ，。 ") == []

    def test_is_cjk_term(self) -> None:
        assert is_cjk_term("知识")
        assert is_cjk_term("タ")
        assert not is_cjk_term("word")


def test_lexical_document_joins_every_term() -> None:
    assert lexical_document("Search the knowledge base: 知识库") == (
        "search the knowledge base 知识 识库"
    )


def test_lexical_query_keeps_distinct_terms_in_order() -> None:
    assert lexical_query("Cat cat DOG 知识 知识") == "cat dog 知识"


class TestTokenCount:
    def test_counts_words(self) -> None:
        assert token_count("Hello, world! It's fine.") == 5

    def test_counts_cjk_characters(self) -> None:
        assert token_count("你好，世界。") == 4

    def test_mixed(self) -> None:
        assert token_count("RAG 检索增强 v2") == 2 + 4

    def test_empty(self) -> None:
        assert token_count("  \n ") == 0
