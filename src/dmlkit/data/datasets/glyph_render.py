"""Fonts, coverage, rendering and super-categories of the embedded ``glyphs`` dataset.

Fonts: the 16 text faces of DejaVu and STIX that matplotlib ships in
``matplotlib.get_data_path()/fonts/ttf`` (``GLYPH_FONTS``): DejaVu Sans, Sans
Mono and Serif in regular / bold / oblique-or-italic / bold-oblique-or-italic,
and STIX General in the same four. Left out, on purpose:

- ``DejaVuSansDisplay`` / ``DejaVuSerifDisplay``: display-size subsets (47 and
  20 glyphs) whose outlines repeat the regular faces, so they would add
  near-copies, not new styles;
- ``STIXNonUni*``: only private-use code points;
- ``STIXSiz*``: the same big operators at larger sizes (near-copies once scaled);
- ``cm*10`` (Computer Modern): TeX encodings whose cmaps put math symbols
  at ASCII letters, and ``LastResortHE``: one placeholder per Unicode block.

Rendering (``render_glyph``): grey, white ink on black, anti-aliased by drawing
at ``supersample`` times the size and box-downsampling. Typographic position is
kept, so a comma and an apostrophe, or two Braille patterns, stay apart: the
em square is scaled to ``(image_size - 2 * margin) / 1.25`` pixels, the
baseline lies ``0.95`` em below the top margin and the glyph's advance box is
centred horizontally (the frame spans 0.95 em above and 0.30 em below the
baseline). A glyph whose ink would cross the margin (1 px at 32 px) is shrunk
about the frame centre until it fits. A rendering whose brightest pixel is
below ``BLANK_LEVEL`` counts as blank (the font maps the character to an empty
or invisible glyph).
"""

from __future__ import annotations

import hashlib
import logging
import math
import unicodedata
from pathlib import Path

import numpy as np

from dmlkit.extras import require

GLYPH_FONTS: tuple[str, ...] = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
)

EM_FRAME = 1.25  # em heights per frame height (inside the margin)
ASCENT = 0.95  # em from the top of the frame to the baseline
BLANK_LEVEL = 64  # uint8; a rendering darker than this everywhere is blank


def font_dir() -> Path:
    matplotlib = require("matplotlib", "plots", "the glyphs dataset (drawn from the fonts inside matplotlib)")

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def font_paths() -> list[Path]:
    """Paths of ``GLYPH_FONTS`` (all must exist)."""
    d = font_dir()
    paths = [d / name for name in GLYPH_FONTS]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"matplotlib's font folder {d} lacks {missing}; the glyphs dataset needs the DejaVu and STIX "
            "fonts that matplotlib >= 3.8 ships"
        )
    return paths


def fonts_fingerprint(paths: list[Path]) -> str:
    """A short hash of the font files (name and size) and the Pillow version that renders them."""
    import PIL

    h = hashlib.sha256(f"pillow {PIL.__version__}".encode())
    for p in paths:
        h.update(f"|{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:16]


def font_coverage(paths: list[Path]) -> list[frozenset[int]]:
    """The code points each font's best cmap maps (read with fontTools)."""
    TTFont = require("fontTools.ttLib", "plots", "the glyphs dataset (fontTools comes with matplotlib)").TTFont

    logger = logging.getLogger("fontTools")
    level = logger.level
    logger.setLevel(logging.ERROR)  # fontTools warns about odd timestamps in STIX
    try:
        out = []
        for p in paths:
            with TTFont(str(p), lazy=True) as font:
                out.append(frozenset((font.getBestCmap() or {}).keys()))
        return out
    finally:
        logger.setLevel(level)


def is_candidate(codepoint: int) -> bool:
    """Whether a character may become a class: not whitespace, control, format, surrogate,
    private-use, unassigned or combining (general categories Z*, C*, M*)."""
    if not 0 <= codepoint <= 0x10FFFF:
        return False
    cat = unicodedata.category(chr(codepoint))
    return cat[0] not in "ZCM"


# ------------------------------------------------------------ categories
SCRIPTS = frozenset(
    "LATIN GREEK COPTIC CYRILLIC GLAGOLITIC ARMENIAN GEORGIAN HEBREW ARABIC SYRIAC THAANA NKO "
    "DEVANAGARI BENGALI GURMUKHI GUJARATI TAMIL TELUGU KANNADA MALAYALAM SINHALA THAI LAO TIBETAN "
    "MYANMAR KHMER MONGOLIAN ETHIOPIC CHEROKEE CANADIAN OGHAM RUNIC TIFINAGH HANGUL HIRAGANA "
    "KATAKANA BOPOMOFO CJK VAI LISU BRAILLE".split()
)
GEOMETRIC_WORDS = frozenset(
    "SQUARE SQUARES CIRCLE CIRCLES TRIANGLE TRIANGLES DIAMOND LOZENGE RECTANGLE PENTAGON HEXAGON "
    "ELLIPSE PARALLELOGRAM BULLSEYE FISHEYE".split()
)


def _script_of_name(words: list[str]) -> str | None:
    for w in words:
        if w in SCRIPTS:
            return w
    return None


def glyph_category(char: str) -> str:
    """The super-category of a character, from its Unicode name and general category.

    The first rule that applies wins:

    1. ``ARROW``: a name word starting with ``ARROW`` or equal to ``HARPOON``;
       ``CURRENCY``: general category Sc (so THAI CURRENCY SYMBOL BAHT is a currency);
    2. a script (``LATIN``, ``GREEK``, ``CYRILLIC``, ``ARMENIAN``, ``GEORGIAN``, ``LAO``,
       ``BRAILLE``, ...): the first name word in ``SCRIPTS``;
    3. ``BOX_DRAWING`` (``BOX DRAWINGS ...``) and ``BLOCK`` (``... BLOCK``, ``QUADRANT``, ``SHADE``);
    4. ``NUMBER``: general category N* (digits, fractions, roman numerals, super/subscript digits);
    5. the script of the first character of its decomposition, when that is a script
       (e.g. MODIFIER LETTER SMALL H -> LATIN, DOUBLE-STRUCK CAPITAL C -> LATIN);
    6. ``MATHEMATICAL``: general category Sm, or a name starting with MATHEMATICAL / N-ARY / INTEGRAL;
    7. ``PUNCTUATION``: general category P*;
    8. ``GEOMETRIC``: other symbols (So) naming a shape (SQUARE, CIRCLE, TRIANGLE, DIAMOND, ...);
    9. ``MODIFIER`` (Lm, Sk), ``LETTERLIKE`` (other letters), else ``SYMBOL``.
    """
    name = unicodedata.name(char, "")
    words = name.split()
    gc = unicodedata.category(char)
    if any(w.startswith("ARROW") or w == "HARPOON" for w in words):
        return "ARROW"
    if gc == "Sc":
        return "CURRENCY"
    script = _script_of_name(words)
    if script:
        return script
    if words[:2] == ["BOX", "DRAWINGS"]:
        return "BOX_DRAWING"
    if "BLOCK" in words or "QUADRANT" in words or "SHADE" in words:
        return "BLOCK"
    if gc[0] == "N":
        return "NUMBER"
    decomposition = [t for t in unicodedata.decomposition(char).split() if not t.startswith("<")]
    if decomposition:
        base = chr(int(decomposition[0], 16))
        if base != char:
            sub = glyph_category(base)
            if sub in SCRIPTS:
                return sub
    if gc == "Sm" or (words and words[0] in ("MATHEMATICAL", "N-ARY", "INTEGRAL")):
        return "MATHEMATICAL"
    if gc[0] == "P":
        return "PUNCTUATION"
    if gc == "So" and any(w in GEOMETRIC_WORDS for w in words):
        return "GEOMETRIC"
    if gc in ("Lm", "Sk"):
        return "MODIFIER"
    if gc[0] == "L":
        return "LETTERLIKE"
    return "SYMBOL"


# ------------------------------------------------------------- rendering
def supersample_factor(image_size: int) -> int:
    """Drawing scale for anti-aliasing: glyphs are drawn at about 128 px, then box-downsampled."""
    return max(1, math.ceil(128 / image_size))


class GlyphRenderer:
    """Renders characters of one font into ``image_size`` x ``image_size`` uint8 arrays."""

    def __init__(self, font_path: Path, image_size: int) -> None:
        from PIL import ImageFont

        if image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {image_size}")
        self.image_size = image_size
        self.s = supersample_factor(image_size)
        margin = image_size / 32.0  # 1 px at 32 px
        frame = self.s * image_size
        inner = self.s * (image_size - 2 * margin)
        self.em = max(1, round(inner / EM_FRAME))
        self.frame = frame
        self.centre = frame / 2.0
        self.half_inner = inner / 2.0
        self.baseline = self.s * margin + ASCENT * self.em
        self.font = ImageFont.truetype(str(font_path), size=self.em, layout_engine=ImageFont.Layout.BASIC)

    def render(self, char: str) -> np.ndarray | None:
        """The glyph of ``char`` as ``(image_size, image_size)`` uint8, or ``None`` if it is blank."""
        from PIL import Image, ImageDraw

        left, top, right, bottom = self.font.getbbox(char, anchor="ls")
        if right <= left or bottom <= top:
            return None
        ink = Image.new("L", (right - left, bottom - top), 0)
        ImageDraw.Draw(ink).text((-left, -top), char, font=self.font, fill=255, anchor="ls")
        box = ink.getbbox()
        if box is None:
            return None
        ink = ink.crop(box)
        origin_x = self.centre - self.font.getlength(char) / 2.0
        x0 = origin_x + left + box[0]
        y0 = self.baseline + top + box[1]
        x1, y1 = x0 + ink.size[0], y0 + ink.size[1]
        c = self.centre
        extent = max(c - x0, x1 - c, c - y0, y1 - c)
        if extent > self.half_inner:  # shrink about the frame centre until the ink fits
            f = self.half_inner / extent
            w, h = ink.size
            ink = ink.resize((max(1, round(w * f)), max(1, round(h * f))), Image.Resampling.LANCZOS)
            x0, y0 = c + (x0 - c) * f, c + (y0 - c) * f
        canvas = Image.new("L", (self.frame, self.frame), 0)
        canvas.paste(ink, (int(round(x0)), int(round(y0))))
        if self.s > 1:
            canvas = canvas.reduce(self.s)
        out = np.asarray(canvas, dtype=np.uint8)
        if int(out.max()) < BLANK_LEVEL:
            return None
        return out


def render_font_table(
    font_path: Path, codepoints: list[int], image_size: int, keep_blank: bool = False
) -> tuple[list[int], list[np.ndarray]]:
    """Render ``codepoints`` in one font; returns the rendered code points and their images.

    Blank renderings are left out unless ``keep_blank`` (then they are all-zero images).
    """
    renderer = GlyphRenderer(font_path, image_size)
    done: list[int] = []
    images: list[np.ndarray] = []
    for cp in codepoints:
        img = renderer.render(chr(cp))
        if img is None:
            if not keep_blank:
                continue
            img = np.zeros((image_size, image_size), np.uint8)
        done.append(cp)
        images.append(img)
    return done, images
