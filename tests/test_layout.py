"""The house stays small: the limits docs/design.md ("Where each job lives")
sets on the source's rooms, measured on the files as they are."""
import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "uringloop"

if not (SRC / "core.pyx").exists():
    pytest.skip("the sources are not beside the tests (an installed copy)",
                allow_module_level=True)

SOURCE_SUFFIXES = {".pyx", ".pxd", ".py", ".h", ".c"}


def sources():
    for path in sorted(SRC.rglob("*")):
        if path.suffix in SOURCE_SUFFIXES and path.name != "core.c":
            yield path


def lines(path):
    return path.read_text().splitlines()


def class_body(path, header):
    """The lines of a class's body: from its header to the next line that
    starts at the left margin with code."""
    text = lines(path)
    start = next(i for i, line in enumerate(text) if line.startswith(header))
    end = start + 1
    while end < len(text) and not re.match(r"(cdef |cpdef |def |class |@|include )", text[end]):
        end += 1
    while text[end - 1].strip() == "":
        end -= 1
    return end - start


def test_no_source_file_is_over_1500_lines():
    big = {str(p.relative_to(SRC)): len(lines(p)) for p in sources() if len(lines(p)) > 1500}
    assert not big


def test_core_pyx_is_at_most_1500_lines():
    assert len(lines(SRC / "core.pyx")) <= 1500


def test_the_ring_loop_class_body_is_at_most_850_lines():
    assert class_body(SRC / "core.pyx", "cdef class RingLoop") <= 850


def test_the_stream_transport_class_body_is_at_most_600_lines():
    assert class_body(SRC / "transports" / "stream.pyx", "cdef class StreamTransport") <= 600


def test_c_longer_than_a_helper_lives_in_a_header():
    """C embedded in a .pyx (cdef extern from * with a docstring of code)
    is a small helper at most; more goes to a header of its own."""
    long_blocks = []
    for path in SRC.rglob("*.pyx"):
        text = lines(path)
        for i, line in enumerate(text):
            if line.strip() == 'cdef extern from *:' and text[i + 1].strip() == '"""':
                end = next(j for j in range(i + 2, len(text)) if text[j].strip() == '"""')
                if end - i - 2 > 20:
                    long_blocks.append(f"{path.relative_to(SRC)}:{i + 1} ({end - i - 2} lines)")
    assert not long_blocks


def test_every_shortcut_has_its_file_in_the_shortcuts_folder():
    switch = (SRC / "shortcuts" / "switch.pyx").read_text()
    names = re.search(r"SHORTCUT_NAMES = \(([^)]*)\)", switch).group(1)
    for name in re.findall(r"'(\w+)'", names):
        where = {"spare_bytes": SRC / "read_bytes.h",       # the reads' own header
                 "run_once_tag": SRC / "shortcuts" / "loop_methods.pyx"}.get(
                     name, SRC / "shortcuts" / f"{name}.pyx")
        assert where.exists(), name
        assert f"SC_{name.upper()}" in where.read_text() or name in where.read_text(), name
