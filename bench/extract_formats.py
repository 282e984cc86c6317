"""`python -m bench.extract_formats [--scale F] [--repeat N]`: extraction throughput per format.

For every format in `CASES` it generates a realistic document in a temporary directory (a
50-slide deck, a 20,000-row workbook, ...), runs the whole extraction (`textkit.extract.extract`:
the format's extractor, then normalisation and cleanup) `--repeat` times, and prints the best
run as units per second (slides, rows, pages) and MB/s of file. `--scale` multiplies every
document's size. Another format joins by appending a `Case` to `CASES`.
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from textkit.extract import extract

_WORDS = [
    "revenue",
    "region",
    "quarter",
    "growth",
    "customer",
    "contract",
    "renewal",
    "pipeline",
    "forecast",
    "margin",
    "budget",
    "hiring",
    "onboarding",
    "churn",
    "support",
    "latency",
    "release",
    "roadmap",
    "partner",
    "market",
    "pricing",
]


def _sentence(rng: random.Random, words: int = 12) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


@dataclass(frozen=True)
class Case:
    """A format to measure: `make(directory, scale)` writes the document and returns its path
    and how many `unit`s it has."""

    name: str
    media_type: str
    unit: str
    make: Callable[[Path, float], tuple[Path, int]]


def _pptx(directory: Path, scale: float) -> tuple[Path, int]:
    import pptx
    from pptx.util import Inches

    rng = random.Random(1)
    slides = int(50 * scale)
    deck = pptx.Presentation()
    for n in range(slides):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Topic {n}: {_sentence(rng, 4)}"
        slide.placeholders[1].text = "\n".join(_sentence(rng) for _ in range(5))
        if n % 5 == 0:
            table = slide.shapes.add_table(6, 4, Inches(1), Inches(5), Inches(8), Inches(2)).table
            for r in range(6):
                for c in range(4):
                    table.cell(r, c).text = f"{rng.choice(_WORDS)} {r * c}"
        slide.notes_slide.notes_text_frame.text = _sentence(rng, 30)
    path = directory / "deck.pptx"
    deck.save(str(path))
    return path, slides


def _xlsx(directory: Path, scale: float) -> tuple[Path, int]:
    import openpyxl

    rng = random.Random(2)
    count = int(20_000 * scale)
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("Orders")
    sheet.append(["Order", "Date", "Customer", "Region", "Amount", "Discount", "Note"])
    start = datetime.date(2025, 1, 1)
    for n in range(count):
        sheet.append(
            [
                n + 1,
                start + datetime.timedelta(days=n % 365),
                f"Customer {rng.randrange(5000)}",
                rng.choice(["North", "South", "East", "West", "华东"]),
                round(rng.uniform(10, 50_000), 2),
                rng.choice([0, 0.05, 0.1]),
                _sentence(rng, 5),
            ]
        )
    path = directory / "orders.xlsx"
    workbook.save(path)
    return path, count + 1


def _csv(directory: Path, scale: float) -> tuple[Path, int]:
    rng = random.Random(3)
    count = int(20_000 * scale)
    lines = ["order,date,customer,region,amount,note"]
    for n in range(count):
        lines.append(
            f"{n + 1},2025-{n % 12 + 1:02d}-{n % 28 + 1:02d},Customer {rng.randrange(5000)},"
            f"{rng.choice(['North', 'South', '华东'])},{rng.uniform(10, 50_000):.2f},"
            f'"{_sentence(rng, 5)}"'
        )
    path = directory / "orders.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, count + 1


def _odt(directory: Path, scale: float) -> tuple[Path, int]:
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    rng = random.Random(4)
    pages = int(100 * scale)
    document = OpenDocumentText()
    for n in range(pages):
        # About a page: a heading and six paragraphs of some 80 words.
        document.text.addElement(H(outlinelevel=2, text=f"Section {n}"))
        for _ in range(6):
            document.text.addElement(P(text=" ".join(_sentence(rng) for _ in range(7))))
    path = directory / "handbook.odt"
    document.save(str(path))
    return path, pages


def _ods(directory: Path, scale: float) -> tuple[Path, int]:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    rng = random.Random(5)
    count = int(20_000 * scale)
    document = OpenDocumentSpreadsheet()
    table = Table(name="Orders")
    for values in [
        ["Order", "Customer", "Region", "Amount", "Note"],
        *(
            [
                str(n + 1),
                f"Customer {rng.randrange(5000)}",
                "North",
                f"{rng.uniform(10, 50000.0):,.2f}",
                _sentence(rng, 5),
            ]
            for n in range(count)
        ),
    ]:
        row = TableRow()
        for value in values:
            cell = TableCell(valuetype="string")
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.spreadsheet.addElement(table)
    path = directory / "orders.ods"
    document.save(str(path))
    return path, count + 1


def _odp(directory: Path, scale: float) -> tuple[Path, int]:
    from odf.draw import Frame, Page, TextBox
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import MasterPage, PageLayout, PageLayoutProperties
    from odf.text import P

    rng = random.Random(6)
    slides = int(50 * scale)
    document = OpenDocumentPresentation()
    layout = PageLayout(name="layout")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm"))
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    for n in range(slides):
        page = Page(masterpagename=master)
        for y, text, role in (
            ("1cm", f"Topic {n}", "title"),
            ("5cm", "\n".join(_sentence(rng) for _ in range(5)), ""),
        ):
            frame = Frame(x="2cm", y=y, width="24cm", height="4cm")
            if role:
                frame.setAttrNS(PRESENTATIONNS, "class", role)
            box = TextBox()
            for line in text.split("\n"):
                box.addElement(P(text=line))
            frame.addElement(box)
            page.addElement(frame)
        document.presentation.addElement(page)
    path = directory / "deck.odp"
    document.save(str(path))
    return path, slides


def _epub(directory: Path, scale: float) -> tuple[Path, int]:
    import zipfile

    rng = random.Random(7)
    chapters = int(100 * scale)
    items = "".join(
        f'<item id="c{n}" href="c{n}.xhtml" media-type="application/xhtml+xml"/>'
        for n in range(chapters)
    )
    spine = "".join(f'<itemref idref="c{n}"/>' for n in range(chapters))
    path = directory / "book.epub"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr(
            "META-INF/container.xml",
            '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" version="1.0">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf"/></rootfiles></container>',
        )
        book.writestr(
            "OEBPS/content.opf",
            '<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata '
            'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Bench</dc:title></metadata>'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for n in range(chapters):
            # About a page: a heading and six paragraphs of some 80 words.
            paragraphs = "".join(
                f"<p>{' '.join(_sentence(rng) for _ in range(7))}</p>" for _ in range(6)
            )
            book.writestr(
                f"OEBPS/c{n}.xhtml",
                '<?xml version="1.0" encoding="utf-8"?><!DOCTYPE html><html '
                'xmlns="http://www.w3.org/1999/xhtml"><head><title>Bench</title></head>'
                f"<body><h2>Chapter {n}</h2>{paragraphs}</body></html>",
            )
    return path, chapters


def _rtf(directory: Path, scale: float) -> tuple[Path, int]:
    rng = random.Random(8)
    pages = int(100 * scale)
    parts = [r"{\rtf1\ansi\ansicpg936\deff0{\fonttbl{\f0\fnil\fcharset134 SimSun;}}"]
    for n in range(pages):
        parts.append(rf"{{\b Section {n}}}\par" + "\n")
        for _ in range(6):
            chinese = "".join(f"\\'{b:02x}" for b in "知识库管理系统".encode("gbk"))
            parts.append(" ".join(_sentence(rng) for _ in range(7)) + chinese + r"\par" + "\n")
    path = directory / "report.rtf"
    path.write_text("".join(parts) + "}", encoding="ascii")
    return path, pages


def _mail_body(rng: random.Random) -> str:
    return "\n\n".join(" ".join(_sentence(rng) for _ in range(7)) for _ in range(6))


def _eml(directory: Path, scale: float) -> tuple[Path, int]:
    """A thread saved as one message: a page of body and a page-long text attachment per reply,
    `50 * scale` replies as attached messages (read one level deep)."""
    from email.message import EmailMessage

    rng = random.Random(9)
    count = int(50 * scale)
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "a@example.com", "b@example.com", "Bench"
    message.set_content(_mail_body(rng))
    for n in range(count):
        reply = EmailMessage()
        reply["From"], reply["Subject"] = "c@example.com", f"Reply {n}"
        reply.set_content(_mail_body(rng))
        message.add_attachment(reply)
    message.add_attachment(_mail_body(rng), filename="notes.txt")
    path = directory / "thread.eml"
    path.write_bytes(bytes(message))
    return path, count + 2


def _msg(directory: Path, scale: float) -> tuple[Path, int]:
    """As `_eml`, in Outlook's format (written by the tests' writer: no package writes .msg)."""
    from tests.textkit.extract.msg_fixtures import embedded_message, outlook_message

    rng = random.Random(10)
    count = int(50 * scale)
    attachments: list[tuple[str, bytes | dict[str, bytes]]] = [
        (f"reply{n}.msg", embedded_message(subject=f"Reply {n}", body=_mail_body(rng)))
        for n in range(count)
    ]
    attachments.append(("notes.txt", _mail_body(rng).encode()))
    path = directory / "thread.msg"
    path.write_bytes(
        outlook_message(subject="Bench", body=_mail_body(rng), attachments=attachments)
    )
    return path, count + 2


CASES: list[Case] = [
    Case(
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "slides",
        _pptx,
    ),
    Case(
        "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "rows", _xlsx
    ),
    Case("csv", "text/csv", "rows", _csv),
    Case("odt", "application/vnd.oasis.opendocument.text", "pages", _odt),
    Case("ods", "application/vnd.oasis.opendocument.spreadsheet", "rows", _ods),
    Case("odp", "application/vnd.oasis.opendocument.presentation", "slides", _odp),
    Case("epub", "application/epub+zip", "pages", _epub),
    Case("rtf", "application/rtf", "pages", _rtf),
    Case("eml", "message/rfc822", "pages", _eml),
    Case("msg", "application/vnd.ms-outlook", "pages", _msg),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args()
    chosen = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    print(f"{'format':<7} {'size':>12} {'file MB':>8} {'best s':>7} {'units/s':>10} {'MB/s':>6}")
    with tempfile.TemporaryDirectory() as directory:
        for case in chosen:
            path, units = case.make(Path(directory), args.scale)
            megabytes = path.stat().st_size / 1e6
            best = min(_timed(path, case.media_type) for _ in range(args.repeat))
            print(
                f"{case.name:<7} {f'{units:,} {case.unit}':>12} {megabytes:>8.2f} {best:>7.2f} "
                f"{f'{units / best:,.0f} {case.unit}':>10} {megabytes / best:>6.2f}",
                flush=True,
            )
    return 0


def _timed(path: Path, media_type: str) -> float:
    started = time.perf_counter()
    extract(path, media_type)
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
