"""`python -m bench.ocr [--pages 12] [--threads 1 2] [--engines ...] [--rapidocr3-python PATH]`:
OCR engines on pages rendered from known text, English and Chinese.

Renders `--pages` A4 pages at 150 dpi (1240 x 1754 pixels) per language, in Noto Sans CJK (the
font of the dev extra's cvttf-NotoSansCJK-Regular) at type sizes from 18 to 36 pixels (8.6 to
17 pt): English from the English questions of bench/quality/natural.jsonl, Chinese from its
Chinese questions (which carry some Latin words and code, as Chinese technical text does).
Then, for every engine and thread count, in a fresh process of its own:

- pages/s: pages over the wall-clock time of their OCR (the engine's loading apart, shown as
  load s);
- peak RSS: the process's peak resident memory (MB), models and one page in flight;
- accuracy: 1 - character error rate (Levenshtein distance over the expected length), spaces
  ignored (Chinese has none; an engine's spaces between Latin words differ), per language.

Engines: `canon` is Canon's own path (`textkit.extract.ocr.recognise`: rapidocr 3.10, reading
order and paragraphs); `rapidocr3` is `rapidocr` 3.x alone (PP-OCRv6 small det + rec in its
wheel, onnxruntime), `rapidocr-onnxruntime` is rapidocr-onnxruntime 1.4.4 alone (PP-OCRv4 det +
rec in its wheel); each runs with the interpreter given (--rapidocr3-python, --rapidocr1-python;
default this one), as the two cannot share an environment (1.4.4 needs opencv-python, 3.x
opencv-python-headless: both install the module cv2); `tesseract` is Debian's tesseract-ocr 5
with eng+chi_sim (`apt-get install tesseract-ocr tesseract-ocr-chi-sim`), OMP_THREAD_LIMIT =
threads. Engines that are not installed are skipped. Nothing is written outside a temporary
directory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = (18, 22, 26, 30, 36)
PAGE = (1240, 1754)
MARGIN = 100


def _texts(lang: str) -> list[str]:
    texts = []
    with (ROOT / "bench" / "quality" / "natural.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            item = json.loads(line)
            if item["lang"] == lang:
                texts.append(" ".join(item["question"].split()))
    return texts


def _wrap(text: str, font: object, width: int, lang: str) -> list[str]:
    """Greedy wrapping by words (English) or characters (Chinese)."""
    units = text.split(" ") if lang == "en" else list(text)
    glue = " " if lang == "en" else ""
    lines: list[str] = []
    current = ""
    for unit in units:
        candidate = current + glue + unit if current else unit
        if current and font.getlength(candidate) > width:  # type: ignore[attr-defined]
            lines.append(current)
            current = unit
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


def render(directory: Path, pages: int) -> list[dict[str, str]]:
    """Pages of both languages as PNG files; returns [{"path", "lang", "text"}]."""
    import cvttf_NotoSansCJK_Regular
    from PIL import Image, ImageDraw, ImageFont

    fontfile = cvttf_NotoSansCJK_Regular.get_TTF_path()
    rendered = []
    for lang in ("en", "zh"):
        texts = iter(_texts(lang))
        for number in range(pages):
            size = SIZES[number % len(SIZES)]
            font = ImageFont.truetype(fontfile, size)
            image = Image.new("L", PAGE, 255)
            draw = ImageDraw.Draw(image)
            y = MARGIN
            written: list[str] = []
            while True:
                text = next(texts, None)
                if text is None:
                    break
                lines = _wrap(text, font, PAGE[0] - 2 * MARGIN, lang)
                if y + len(lines) * size * 1.5 > PAGE[1] - MARGIN:
                    break
                for line in lines:
                    draw.text((MARGIN, y), line, font=font, fill=0)
                    y += int(size * 1.5)
                y += int(size * 0.8)
                written.append(" ".join(lines) if lang == "en" else "".join(lines))
            path = directory / f"{lang}-{number:02d}-{size}px.png"
            image.save(path)
            rendered.append({"path": str(path), "lang": lang, "text": "\n".join(written)})
    return rendered


def accuracy(expected: str, found: str) -> float:
    a = "".join(expected.split())
    b = "".join(found.split())
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return max(0.0, 1 - previous[-1] / max(1, len(a)))


# --- one engine in its own process (`--worker`) ----------------------------------------------


def _worker(engine: str, threads: int, paths: list[str]) -> dict[str, object]:
    started = time.perf_counter()
    if engine == "canon":
        sys.path.insert(0, str(ROOT))
        from PIL import Image

        from textkit.extract import ocr

        options = ocr.OcrOptions(threads=threads)

        def read(path: str) -> str:
            with ocr.configured(options):
                return "\n".join(p.text for p in ocr.recognise(Image.open(path)))

        with ocr.configured(options), ocr._ENGINE_LOCK:
            ocr._engine(threads)
    elif engine == "rapidocr-onnxruntime":
        import numpy as np
        from PIL import Image
        from rapidocr_onnxruntime import RapidOCR as RapidOCR1

        model1 = RapidOCR1(intra_op_num_threads=threads, inter_op_num_threads=1)

        def read(path: str) -> str:
            pixels = np.asarray(Image.open(path).convert("RGB"))[:, :, ::-1].copy()
            result, _ = model1(pixels)
            return "\n".join(line[1] for line in sorted(result or [], key=lambda r: r[0][0][1]))

        model1(np.full((64, 64, 3), 255, dtype=np.uint8))
    elif engine == "rapidocr3":
        import numpy as np
        from PIL import Image
        from rapidocr import RapidOCR

        model = RapidOCR(
            params={
                "Global.log_level": "critical",
                "EngineConfig.onnxruntime.intra_op_num_threads": threads,
                "EngineConfig.onnxruntime.inter_op_num_threads": 1,
            }
        )

        def read(path: str) -> str:
            pixels = np.asarray(Image.open(path).convert("RGB"))[:, :, ::-1].copy()
            result: Any = model(pixels)
            if result.boxes is None:
                return ""
            order = sorted(range(len(result.txts)), key=lambda i: result.boxes[i][0][1])
            return "\n".join(result.txts[i] for i in order)

        model(np.full((64, 64, 3), 255, dtype=np.uint8))  # load the models
    elif engine == "tesseract":
        environment = {**os.environ, "OMP_THREAD_LIMIT": str(threads)}

        def read(path: str) -> str:
            out = subprocess.run(
                ["tesseract", path, "-", "-l", "eng+chi_sim", "--psm", "3"],
                capture_output=True,
                text=True,
                env=environment,
                check=True,
            )
            return out.stdout

    else:
        raise SystemExit(f"unknown engine {engine}")
    loaded = time.perf_counter()
    cpu_before = _cpu()
    texts, seconds = [], []
    for path in paths:
        start = time.perf_counter()
        texts.append(read(path))
        seconds.append(time.perf_counter() - start)
    rss = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    return {
        "cpu_s": _cpu() - cpu_before,
        "load_s": loaded - started,
        "seconds": seconds,
        "texts": texts,
        "peak_rss_mb": rss / 1024,
    }


def _cpu() -> float:
    """CPU seconds of this process and its finished children (tesseract): what a page costs
    whatever else the machine runs."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _available(engine: str, pythons: dict[str, str]) -> str | None:
    """The interpreter that runs `engine`, or None when it is not installed."""
    if engine == "canon":
        return sys.executable
    if engine in ("rapidocr3", "rapidocr-onnxruntime"):
        module = "rapidocr" if engine == "rapidocr3" else "rapidocr_onnxruntime"
        python = pythons.get(engine) or sys.executable
        found = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, check=False
        )  # fmt: skip
        return python if found.returncode == 0 else None
    if engine == "tesseract":
        return sys.executable if shutil.which("tesseract") else None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=12, help="pages per language")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["canon", "rapidocr-onnxruntime", "rapidocr3", "tesseract"],
    )
    parser.add_argument("--rapidocr3-python", default="", help="python of a rapidocr 3.x venv")
    parser.add_argument(
        "--rapidocr1-python", default="", help="python of a rapidocr-onnxruntime 1.4.4 venv"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        paths = json.loads(Path(args.paths).read_text())
        print(json.dumps(_worker(args.worker, args.threads[0], paths)))
        return
    with tempfile.TemporaryDirectory() as directory:
        pages = render(Path(directory), args.pages)
        paths_file = Path(directory) / "paths.json"
        paths_file.write_text(json.dumps([page["path"] for page in pages]))
        print(
            f"{len(pages)} pages ({args.pages} English, {args.pages} Chinese), "
            f"cores {os.cpu_count()}"
        )
        print(
            f"{'engine':<20} {'threads':>7} {'load s':>7} {'pages/s':>8} {'s/page':>7} "
            f"{'CPU s/page':>10} {'peak RSS MB':>11} {'acc en':>7} {'acc zh':>7}"
        )
        for engine in args.engines:
            pythons = {
                "rapidocr3": args.rapidocr3_python,
                "rapidocr-onnxruntime": args.rapidocr1_python,
            }
            python = _available(engine, pythons)
            if python is None:
                print(f"{engine:<20} not installed: skipped")
                continue
            for threads in args.threads:
                out = subprocess.run(
                    [python, str(Path(__file__).resolve()), "--worker", engine,
                     "--threads", str(threads), "--paths", str(paths_file)],
                    capture_output=True, text=True, check=True, cwd=ROOT,
                )  # fmt: skip
                result = json.loads(out.stdout.strip().splitlines()[-1])
                seconds = sum(result["seconds"])
                by_lang: dict[str, list[float]] = {"en": [], "zh": []}
                for page, text in zip(pages, result["texts"], strict=True):
                    by_lang[page["lang"]].append(accuracy(page["text"], text))
                en = sum(by_lang["en"]) / len(by_lang["en"])
                zh = sum(by_lang["zh"]) / len(by_lang["zh"])
                print(
                    f"{engine:<20} {threads:>7} {result['load_s']:>7.2f} "
                    f"{len(pages) / seconds:>8.2f} {seconds / len(pages):>7.2f} "
                    f"{result['cpu_s'] / len(pages):>10.2f} "
                    f"{result['peak_rss_mb']:>11.0f} {en:>7.3f} {zh:>7.3f}"
                )
                if os.environ.get("BENCH_OCR_VERBOSE"):
                    for page, acc_text in zip(pages, result["texts"], strict=True):
                        print(
                            "  ", Path(page["path"]).name, f"{accuracy(page['text'], acc_text):.3f}"
                        )


if __name__ == "__main__":
    main()
