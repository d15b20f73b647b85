"""Makes the symbol fonts `loopdeck serve`'s page gives the browser console
(`src/loopdeck/cli/serve_page/`): the glyphs of the symbol blocks that Roboto Mono,
the terminal's font in textual-serve's page, lacks.

- `loopdeck-symbols-mono.woff2`: DejaVu Sans Mono's glyphs of those blocks (a monospace font:
  each glyph fits a cell). Bitstream Vera license (`LICENSE-DejaVu.txt`).
- `loopdeck-symbols.woff2`: Noto Sans Symbols 2's glyphs of those blocks that DejaVu Sans Mono
  lacks too (⏱, ⏸, ⟳, braille), each scaled down to a cell's width where wider and centred in
  it, as a terminal font's. SIL Open Font License 1.1 (`LICENSE-Noto.txt`).
- `symbols.css`: their `@font-face` rules, each face's `unicode-range` the code points it has.
  The page names them `Roboto Mono` (a face per range of one family: the browser takes a
  character from the first face that has it), so xterm.js's font list draws them unchanged.

Run once when the blocks change, with Debian's fonts-dejavu-core and fonts-noto-core installed
and fontTools (`pip install fonttools brotli`):

    python tools/serve_fonts.py [DEJAVU_SANS_MONO.ttf NOTO_SANS_SYMBOLS2.ttf]
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from fontTools.pens.recordingPen import DecomposingRecordingPen
from fontTools.pens.transformPen import TransformPen
from fontTools.pens.ttGlyphPen import TTGlyphPen
from fontTools.subset import Options, Subsetter
from fontTools.ttLib import TTFont

OUT = Path(__file__).resolve().parents[1] / "src/loopdeck/cli/serve_page"
DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")
NOTO = Path("/usr/share/fonts/truetype/noto/NotoSansSymbols2-Regular.ttf")
# What a console draws beyond text: punctuation, arrows, operators, technical signs, control
# pictures, box drawing and blocks, shapes, symbols, dingbats, arrows, braille.
BLOCKS = [
    (0x2000, 0x206F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2300, 0x23FF), (0x2400, 0x243F),
    (0x2500, 0x25FF), (0x2600, 0x26FF), (0x2700, 0x27BF), (0x27F0, 0x27FF), (0x2800, 0x28FF),
    (0x2B00, 0x2BFF),
]  # fmt: skip
CELL = 0.6  # a cell's width in em: Roboto Mono's and DejaVu Sans Mono's advance


def roboto_mono() -> Path:
    """The font textual-serve ships (its page's), from the installed package."""
    spec = importlib.util.find_spec("textual_serve")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("textual-serve is not installed: its Roboto Mono is the font to complete")
    folder = Path(spec.submodule_search_locations[0])
    return folder / "static/fonts/RobotoMono-VariableFont_wght.ttf"


def code_points(font: TTFont) -> set[int]:
    return set(font.getBestCmap())


def subset(font: TTFont, wanted: set[int]) -> None:
    options = Options()
    options.layout_features = []
    options.hinting = False
    options.name_IDs = [0, 13, 14]  # copyright and license kept; the names are set after
    options.notdef_outline = True
    subsetter = Subsetter(options)
    subsetter.populate(unicodes=wanted)
    subsetter.subset(font)


def renamed(font: TTFont, family: str) -> None:
    """A subset is a modified font: it goes by a name of its own (Bitstream Vera's license
    asks it; OFL's Reserved Font Names do not arise)."""
    postscript = family.replace(" ", "")
    names = font["name"]
    for name_id, text in ((1, family), (2, "Regular"), (3, f"{postscript}-loopdeck"),
                          (4, family), (5, "Version 1.0"), (6, postscript)):  # fmt: skip
        names.setName(text, name_id, 3, 1, 0x409)


def fit_to_cells(font: TTFont) -> None:
    """Every glyph one cell wide: scaled down about its centre when wider, and centred."""
    upm = font["head"].unitsPerEm
    cell = round(CELL * upm)
    glyphs, metrics = font.getGlyphSet(), font["hmtx"].metrics
    table = font["glyf"]
    for name in font.getGlyphOrder():
        advance, _ = metrics[name]
        recorded = DecomposingRecordingPen(glyphs)
        glyphs[name].draw(recorded)
        scale = min(1.0, cell / advance) if advance else 1.0
        centre_y = (font["OS/2"].sCapHeight or upm * 0.7) / 2  # the middle of a capital
        pen = TTGlyphPen(None)
        recorded.replay(TransformPen(pen, (scale, 0, 0, scale,
                                           cell / 2 - scale * advance / 2,
                                           (1 - scale) * centre_y)))  # fmt: skip
        glyph = pen.glyph()
        glyph.recalcBounds(table)
        table[name] = glyph
        metrics[name] = (cell, getattr(glyph, "xMin", 0))
    font["post"].isFixedPitch = 1
    font["hhea"].advanceWidthMax = cell
    font["OS/2"].xAvgCharWidth = cell


def ranges(points: Iterable[int]) -> str:
    """`unicode-range`'s value: the code points as runs."""
    runs: list[list[int]] = []
    for point in sorted(points):
        if runs and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])
    return ", ".join(f"U+{a:X}" if a == b else f"U+{a:X}-{b:X}" for a, b in runs)


def face(file: str, points: set[int]) -> str:
    return (
        "@font-face {\n"
        '  font-family: "Roboto Mono";\n'
        f'  src: url("{{{{ fonts_url }}}}{file}") format("woff2");\n'
        "  font-weight: 100 700;\n"
        "  font-display: block;\n"
        f"  unicode-range: {ranges(points)};\n"
        "}\n"
    )


def main(dejavu: Path = DEJAVU, noto: Path = NOTO) -> None:
    blocks = {p for first, last in BLOCKS for p in range(first, last + 1)}
    wanted = blocks - code_points(TTFont(roboto_mono()))

    mono = TTFont(dejavu)
    subset(mono, wanted & code_points(mono))
    renamed(mono, "loopdeck symbols mono")
    in_mono = code_points(mono)

    symbols = TTFont(noto)
    subset(symbols, (wanted - in_mono) & code_points(symbols))
    fit_to_cells(symbols)
    renamed(symbols, "loopdeck symbols")
    in_symbols = code_points(symbols)

    OUT.mkdir(parents=True, exist_ok=True)
    css = ["/* Made by tools/serve_fonts.py: the symbols Roboto Mono lacks. */\n"]
    for font, file, points in ((mono, "loopdeck-symbols-mono.woff2", in_mono),
                               (symbols, "loopdeck-symbols.woff2", in_symbols)):  # fmt: skip
        font.flavor = "woff2"
        font.save(OUT / file)
        css.append(face(file, points))
        print(f"{file}: {len(points)} code points, {(OUT / file).stat().st_size} bytes")
    (OUT / "symbols.css").write_text("".join(css))
    missing = wanted - in_mono - in_symbols
    print(f"neither font has {len(missing)} of the blocks' {len(wanted)} code points")


if __name__ == "__main__":
    main(*(Path(arg) for arg in sys.argv[1:3]))
