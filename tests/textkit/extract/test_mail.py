"""E-mail (.eml, .msg): the headers as the first paragraph, the Subject as the title, the plain
body preferred over HTML, quoted replies kept, attachments Canon reads inlined under "Attachment:
<name>" (an attached e-mail one level deep), the others named; damaged files are refused."""

from __future__ import annotations

import base64
import io
import os
import quopri
from email.header import Header
from email.message import EmailMessage
from pathlib import Path

import docx
import pytest

from tests.textkit.extract.files import write
from tests.textkit.extract.msg_fixtures import embedded_message, outlook_message
from textkit.extract import (
    HEADING,
    PARAGRAPH,
    ParseError,
    UnsupportedMediaType,
    detect_media_type,
    extract,
)
from textkit.extract import mail as mail_format

EML = "message/rfc822"
MSG = "application/vnd.ms-outlook"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


def docx_bytes() -> bytes:
    document = docx.Document()
    document.add_heading("Budget", level=1)
    document.add_paragraph("Marketing gets 40 percent.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def base_message(subject: str = "Quarterly figures 季度报告") -> EmailMessage:
    message = EmailMessage()
    message["From"] = "Alice Example <alice@example.com>"
    message["To"] = "Bob Example <bob@example.com>, 王小明 <wang@example.cn>"
    message["Cc"] = "dan@example.com"
    message["Date"] = "Mon, 02 Mar 2026 09:30:00 +0100"
    message["Subject"] = subject
    return message


def make_eml(path: Path) -> Path:
    """A reply with a plain and an HTML body, a Word file, a text file, a picture, a zip and a
    forwarded e-mail that has an attachment of its own."""
    message = base_message()
    message.set_content(
        "Hello Bob,\n\nThe figures are attached. 知识库将在下个季度上线。\n\n"
        "> On Friday you wrote:\n> Can you send the figures?\n"
    )
    message.add_alternative("<p>Hello Bob, <b>HTML</b> version.</p>", subtype="html")
    message.add_attachment(
        docx_bytes(),
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="budget.docx",
    )
    message.add_attachment("Notes line one.\n\nNotes line two.", filename="notes.txt")
    message.add_attachment(PNG, maintype="image", subtype="png", filename="logo.png")
    message.add_attachment(
        b"PK\x03\x04zip", maintype="application", subtype="zip", filename="a.zip"
    )
    forwarded = base_message("Earlier thread")
    forwarded.set_content("The earlier message body.")
    forwarded.add_attachment("inner", filename="inner.txt")
    message.add_attachment(forwarded)
    return write(path.parent, path.name, bytes(message))


def test_eml_headers_body_and_attachments(tmp_path: Path) -> None:
    path = make_eml(tmp_path / "reply.eml")
    assert detect_media_type("reply.eml", path.read_bytes()[:4096]) == EML
    extracted = extract(path, EML)
    assert extracted.title == "Quarterly figures 季度报告"
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (
            PARAGRAPH,
            0,
            "From: Alice Example <alice@example.com>\n"
            "To: Bob Example <bob@example.com>, 王小明 <wang@example.cn>\n"
            "Cc: dan@example.com\n"
            "Date: Mon, 02 Mar 2026 09:30:00 +0100\n"
            "Subject: Quarterly figures 季度报告",
        ),
        (PARAGRAPH, 0, "Hello Bob,"),
        (PARAGRAPH, 0, "The figures are attached. 知识库将在下个季度上线。"),
        (PARAGRAPH, 0, "> On Friday you wrote:\n> Can you send the figures?"),
        (HEADING, 1, "Attachment: budget.docx"),
        (HEADING, 2, "Budget"),
        (PARAGRAPH, 0, "Marketing gets 40 percent."),
        (HEADING, 1, "Attachment: notes.txt"),
        (PARAGRAPH, 0, "Notes line one."),
        (PARAGRAPH, 0, "Notes line two."),
        (HEADING, 1, "Attachment: Earlier thread.eml"),
        (
            PARAGRAPH,
            0,
            "From: Alice Example <alice@example.com>\n"
            "To: Bob Example <bob@example.com>, 王小明 <wang@example.cn>\n"
            "Cc: dan@example.com\n"
            "Date: Mon, 02 Mar 2026 09:30:00 +0100\n"
            "Subject: Earlier thread",
        ),
        (PARAGRAPH, 0, "The earlier message body."),
        (PARAGRAPH, 0, "Attachments not read: inner.txt."),
        (PARAGRAPH, 0, "Attachments not read: logo.png (picture); a.zip."),
    ]


def test_eml_html_body_when_there_is_no_plain_one(tmp_path: Path) -> None:
    message = base_message("Newsletter")
    message.set_content(
        "<html><body><nav>Home | About</nav><h1>March news</h1><p>Caf\u00e9 opens.</p>"
        "</body></html>",
        subtype="html",
        charset="iso-8859-1",
        cte="quoted-printable",
    )
    extracted = extract(write(tmp_path, "news.eml", bytes(message)), EML)
    assert [(b.kind, b.text) for b in extracted.blocks[1:]] == [
        (HEADING, "March news"),
        (PARAGRAPH, "Café opens."),
    ]


def test_attached_eml_file_is_read_once_and_its_attachments_named(tmp_path: Path) -> None:
    inner = base_message("Inner mail")
    inner.set_content("Inner text.")
    inner.add_attachment(b"x", maintype="application", subtype="octet-stream", filename="in.eml")
    outer = base_message("Outer")
    outer.set_content("Outer text.")
    outer.add_attachment(
        bytes(inner), maintype="application", subtype="octet-stream", filename="saved.eml"
    )
    text = extract(write(tmp_path, "outer.eml", bytes(outer)), EML).text()
    assert "Attachment: saved.eml" in text
    assert "Inner text." in text
    assert text.endswith("Attachments not read: in.eml.")


def test_attachment_over_the_length_budget_is_named(tmp_path: Path) -> None:
    message = base_message("Big")
    message.set_content("Short body.")
    message.add_attachment("word " * 5000, filename="long.txt")
    extracted = extract(write(tmp_path, "big.eml", bytes(message)), EML, max_chars=2000)
    assert extracted.blocks[-1].text == (
        "Attachments not read: long.txt (longer than what is left of the length limit)."
    )


def test_attachment_names_never_reach_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    original = Path.write_bytes

    def spy(self: Path, data: bytes) -> int:
        written.append(self.name)
        return original(self, data)

    monkeypatch.setattr(Path, "write_bytes", spy)
    message = base_message("Traversal")
    message.set_content("Body.")
    message.add_attachment("evil", filename="../../../../tmp/evil.txt")
    path = tmp_path / "evil.eml"
    path.write_text(message.as_string())
    text = extract(path, EML).text()
    assert "Attachment: ../../../../tmp/evil.txt\n\nevil" in text
    assert written == ["0.txt"]


def test_too_many_parts_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mail_format, "MAX_PARTS", 5)
    message = base_message("Parts")
    message.set_content("Body.")
    for index in range(10):
        message.add_attachment("x", filename=f"{index}.txt")
    with pytest.raises(ParseError, match="more than 5 parts"):
        extract(write(tmp_path, "parts.eml", bytes(message)), EML)


def test_deeply_nested_mime_is_refused(tmp_path: Path) -> None:
    depth = 3000
    lines = ["Subject: deep", "MIME-Version: 1.0"]
    for level in range(depth):
        lines += [f'Content-Type: multipart/mixed; boundary="b{level}"', "", f"--b{level}"]
    lines += ["Content-Type: text/plain", "", "bottom"]
    lines += [f"--b{level}--" for level in reversed(range(depth))]
    path = write(tmp_path, "deep.eml", "\n".join(lines))
    with pytest.raises(ParseError, match="nests its parts too deeply"):
        extract(path, EML)


def test_huge_recipient_list_is_cut_not_parsed(tmp_path: Path) -> None:
    to = ", ".join(f'"Person {i}" <p{i}@example.com>' for i in range(20_000))
    path = write(tmp_path, "many.eml", f"From: a@b.c\nTo: {to}\nSubject: Hi\n\nBody.\n")
    header = extract(path, EML).blocks[0].text
    assert header.startswith('From: a@b.c\nTo: "Person 0" <p0@example.com>, ')
    assert header.split("\n")[1].endswith(" …")


def test_binary_named_eml_is_refused() -> None:
    with pytest.raises(UnsupportedMediaType, match=r"named like an e-mail \(\.eml\)"):
        detect_media_type("mail.eml", b"\x00\x01binary")


# MSG


def make_msg(path: Path) -> Path:
    data = outlook_message(
        subject="Quarterly figures 季度报告",
        cc=[("Dan Example", "dan@example.com")],
        body="Hello Bob,\r\n\r\n知识库将在下个季度上线。\r\n\r\n> Can you send the figures?\r\n",
        attachments=[
            ("budget.docx", docx_bytes()),
            ("logo.png", PNG),
            (
                "earlier.msg",
                embedded_message(subject="Earlier", body="Inner body", attachment_names=("x.pdf",)),
            ),
        ],
    )
    return write(path.parent, path.name, data)


def test_msg_headers_body_and_attachments(tmp_path: Path) -> None:
    path = make_msg(tmp_path / "reply.msg")
    assert detect_media_type("reply.msg", path.read_bytes()[:4096]) == MSG
    extracted = extract(path, MSG)
    assert extracted.title == "Quarterly figures 季度报告"
    assert [(b.kind, b.level, b.text) for b in extracted.blocks] == [
        (
            PARAGRAPH,
            0,
            "From: Alice Example\n"
            "To: Bob Example <bob@example.com>\n"
            "Cc: Dan Example <dan@example.com>\n"
            "Date: Sat, 18 Jun 2022 04:26:40 +0000\n"
            "Subject: Quarterly figures 季度报告",
        ),
        (PARAGRAPH, 0, "Hello Bob,"),
        (PARAGRAPH, 0, "知识库将在下个季度上线。"),
        (PARAGRAPH, 0, "> Can you send the figures?"),
        (HEADING, 1, "Attachment: budget.docx"),
        (HEADING, 2, "Budget"),
        (PARAGRAPH, 0, "Marketing gets 40 percent."),
        (HEADING, 1, "Attachment: earlier.msg"),
        (
            PARAGRAPH,
            0,
            "From: Carol Example\nTo: Alice Example <alice@example.com>\n"
            "Date: Sat, 18 Jun 2022 04:26:40 +0000\nSubject: Earlier",
        ),
        (PARAGRAPH, 0, "Inner body"),
        (PARAGRAPH, 0, "Attachments not read: x.pdf."),
        (PARAGRAPH, 0, "Attachments not read: logo.png (picture)."),
    ]


def test_msg_html_body_when_there_is_no_plain_one(tmp_path: Path) -> None:
    data = outlook_message(
        subject="HTML only", html=b"<html><body><h2>Agenda</h2><p>Item one.</p></body></html>"
    )
    extracted = extract(write(tmp_path, "html.msg", data), MSG)
    assert [(b.kind, b.text) for b in extracted.blocks[1:]] == [
        (HEADING, "Agenda"),
        (PARAGRAPH, "Item one."),
    ]


def test_msg_named_file_that_is_not_ole_is_refused() -> None:
    with pytest.raises(UnsupportedMediaType, match=r"named like an Outlook message \(\.msg\)"):
        detect_media_type("mail.msg", b"From: a@b.c\n")


def test_corrupt_msg_is_refused(tmp_path: Path) -> None:
    data = make_msg(tmp_path / "whole.msg").read_bytes()
    truncated = write(tmp_path, "cut.msg", data[:1024])
    with pytest.raises(ParseError, match=r"Outlook message"):
        extract(truncated, MSG)
    noise = write(tmp_path, "noise.msg", data[:8] + os.urandom(4000))
    with pytest.raises(ParseError, match=r"not a valid Outlook message \(\.msg\)"):
        extract(noise, MSG)


def test_ole_file_that_is_not_a_message_is_refused(tmp_path: Path) -> None:
    from tests.textkit.extract.msg_fixtures import compound_file

    path = write(tmp_path, "doc.msg", compound_file({"WordDocument": b"x" * 100}))
    with pytest.raises(ParseError, match=r"not a valid Outlook message \(\.msg\)"):
        extract(path, MSG)


# Bodies: every inline text part, the richer alternative; charsets verified, not trusted


def mime(subject: str, content_type: str, body: bytes, *, cte: str = "8bit") -> bytes:
    """A one-part message as a mail client writes it, its body bytes exactly `body`."""
    head = (
        "From: Li Example <li@example.cn>\r\nTo: team@example.com\r\n"
        f"Subject: {Header(subject, 'utf-8').encode()}\r\nMIME-Version: 1.0\r\n"
        f"Content-Type: {content_type}\r\nContent-Transfer-Encoding: {cte}\r\n\r\n"
    )
    if cte == "base64":
        body = base64.encodebytes(body)
    return head.encode("ascii") + body


def multipart(subject: str, subtype: str, parts: list[tuple[str, bytes]]) -> bytes:
    """A multipart message of (headers, body) parts, base64 bodies."""
    lines = [
        f"From: a@example.com\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\n"
        f'Content-Type: multipart/{subtype}; boundary="b1"\r\n\r\n'.encode()
    ]
    for headers, body in parts:
        lines.append(
            f"--b1\r\n{headers}\r\nContent-Transfer-Encoding: base64\r\n\r\n".encode()
            + base64.encodebytes(body)
        )
    lines.append(b"--b1--\r\n")
    return b"".join(lines)


NEWSLETTER_HTML = (
    "<html><body><h1>March news</h1>"
    + "".join(
        f"<p>Story {n}: the reading room opens at {n} o'clock with new shelves.</p>"
        for n in range(600)
    )
    + "</body></html>"
)


@pytest.mark.parametrize(
    "plain", ["", "\r\n  \r\n", "This message is HTML; open it in a mail program that shows HTML."]
)
def test_an_empty_or_token_plain_part_gives_way_to_the_html(tmp_path: Path, plain: str) -> None:
    # Given an alternative whose plain part is empty (or a stub) and whose HTML is 37 KB
    data = multipart(
        "Newsletter",
        "alternative",
        [
            ('Content-Type: text/plain; charset="utf-8"', plain.encode()),
            ('Content-Type: text/html; charset="utf-8"', NEWSLETTER_HTML.encode()),
        ],
    )
    assert len(NEWSLETTER_HTML) > 37_000
    # When it is read
    extracted = extract(write(tmp_path, "news.eml", data), EML)
    # Then the body is the HTML's text, not the headers alone
    text = extracted.text()
    assert "March news" in text and "Story 599: the reading room opens" in text
    assert "open it in a mail program" not in text


def test_every_inline_text_part_is_read_in_order(tmp_path: Path) -> None:
    # Given a mixed message whose text is split around an inline picture (Apple Mail writes
    # this), then a second alternative block and a named text attachment
    data = multipart(
        "Site visit",
        "mixed",
        [
            ("Content-Type: text/plain; charset=utf-8", b"Photos from the site visit."),
            ("Content-Type: image/png\r\nContent-Disposition: inline", PNG),
            ("Content-Type: text/plain; charset=utf-8", b"The east wall needs repair."),
            ("Content-Type: text/html; charset=utf-8", b"<p>Budget approved by <b>Dana</b>.</p>"),
            (
                'Content-Type: text/plain\r\nContent-Disposition: attachment; filename="n.txt"',
                b"Attached notes.",
            ),
        ],
    )
    # When it is read
    blocks = extract(write(tmp_path, "visit.eml", data), EML).blocks
    # Then every inline text part is the body, in order; the named one is an attachment
    assert [(b.kind, b.text) for b in blocks[1:]] == [
        (PARAGRAPH, "Photos from the site visit."),
        (PARAGRAPH, "The east wall needs repair."),
        (PARAGRAPH, "Budget approved by Dana."),
        (HEADING, "Attachment: n.txt"),
        (PARAGRAPH, "Attached notes."),
    ]


def test_a_substantial_plain_part_is_preferred_over_its_html(tmp_path: Path) -> None:
    plain = "Hello Bob,\n\nThe figures are attached, with the regional breakdown.\n"
    html_body = "<p>Hello Bob,</p><p>The figures are attached, with the regional breakdown.</p>"
    data = multipart(
        "Figures",
        "alternative",
        [
            ("Content-Type: text/plain; charset=utf-8", plain.encode()),
            ("Content-Type: text/html; charset=utf-8", html_body.encode()),
        ],
    )
    blocks = extract(write(tmp_path, "figures.eml", data), EML).blocks
    assert [b.text for b in blocks[1:]] == [
        "Hello Bob,",
        "The figures are attached, with the regional breakdown.",
    ]


CHINESE = (
    "各位同事：\n\n附件是第三季度的销售报告，请在周五之前查收并反馈意见。"
    "总理朱镕基曾视察过我们的工厂，李堃和张喆将负责接待。\n\n谢谢！\n王经理\n"
)


@pytest.mark.parametrize(
    ("label", "encoding", "cte"),
    [
        ("gb2312", "utf-8", "base64"),  # a UTF-8 body labelled GB2312
        ("gb2312", "gbk", "base64"),  # GBK text (镕, 堃, 喆 are not in GB2312) labelled gb2312
        ("GB2312", "gbk", "8bit"),
        ("iso-8859-1", "gbk", "8bit"),  # a GBK body labelled ISO-8859-1
        ("iso-8859-1", "gbk", "quoted-printable"),
        ("us-ascii", "gb18030", "base64"),
    ],
)
def test_a_wrongly_labelled_chinese_body_is_read_right(
    tmp_path: Path, label: str, encoding: str, cte: str
) -> None:
    body = CHINESE.encode(encoding)
    if cte == "quoted-printable":
        body = quopri.encodestring(body)
    data = mime("季度报告", f"text/plain; charset={label}", body, cte=cte)
    text = extract(write(tmp_path, "cn.eml", data), EML).text()
    assert "附件是第三季度的销售报告" in text and "朱镕基" in text and "李堃和张喆" in text
    assert "\ufffd" not in text


@pytest.mark.parametrize(
    ("label", "text", "encoding"),
    [
        ("iso-8859-1", "Café crème, déjà vu — naïve façade.", "cp1252"),
        ("utf-8", "Grüße aus München, schöne Straße.", "cp1252"),  # not UTF-8 after all
        ("gb2312", "会议改到周四下午三点，地点在三楼会议室。", "gb2312"),
        ("big5", "會議改到週四下午三點，地點在三樓會議室。", "big5"),
        ("shift_jis", "会議は木曜日の午後三時に変更になりました。", "shift_jis"),
        ("euc-kr", "회의는 목요일 오후 세 시로 변경되었습니다.", "euc-kr"),
    ],
)
def test_a_body_labelled_right_stays_right(
    tmp_path: Path, label: str, text: str, encoding: str
) -> None:
    data = mime("Note", f"text/plain; charset={label}", text.encode(encoding), cte="base64")
    assert extract(write(tmp_path, "note.eml", data), EML).blocks[1].text == text


def test_a_short_gbk_body_labelled_latin_1_is_read_as_chinese(tmp_path: Path) -> None:
    # Short text is where a detector wavers (GBK bytes are Korean to it as well)
    body = "Hi team,\n\n附件是第三季度报告，请查收。\n\nBest,\nLi\n".encode("gbk")
    data = mime("Report", "text/plain; charset=iso-8859-1", body)
    assert "附件是第三季度报告，请查收。" in extract(write(tmp_path, "s.eml", data), EML).text()


def test_a_mislabelled_html_body_is_read_right(tmp_path: Path) -> None:
    html_body = f"<html><body><p>{CHINESE}</p></body></html>".encode("gbk")
    data = mime("季度报告", "text/html; charset=iso-8859-1", html_body, cte="base64")
    assert "附件是第三季度的销售报告" in extract(write(tmp_path, "h.eml", data), EML).text()


@pytest.mark.parametrize("utf16", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_eml_is_read_as_mail_not_raw_mime(tmp_path: Path, utf16: str) -> None:
    # Given a mail saved as UTF-16 (with its BOM, or without one), as Windows tools write it
    message = base_message()
    message.set_content("Hello Bob,\n\n知识库将在下个季度上线。\n")
    data = bytes(message).decode("utf-8").encode(utf16)
    path = write(tmp_path, "saved.eml", data)
    # When it is checked and read
    assert detect_media_type("saved.eml", data[:4096]) == EML
    extracted = extract(path, EML)
    # Then it is a mail: its Subject the title, its body the text, no MIME in sight
    assert extracted.title == "Quarterly figures 季度报告"
    assert [b.text for b in extracted.blocks[1:]] == ["Hello Bob,", "知识库将在下个季度上线。"]
    assert "Content-Type" not in extracted.text() and "MIME-Version" not in extracted.text()
