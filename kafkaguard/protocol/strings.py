"""Strings read from the wire as Java reads them: ``new String(bytes, UTF_8)``.

Why not ``bytes.decode("utf-8", "replace")``: malformed input is replaced by U+FFFD in both,
but not always as many times. Python replaces each maximal invalid subpart (Unicode's
recommended practice); Java's decoder (``String.decodeUTF8_UTF16``, the same rules as
``sun.nio.cs.UTF_8``) groups bytes by what the lead byte announces, so ``ED B2 4E`` (a
surrogate's first two bytes, then "N") is one U+FFFD in Java and two in Python. Kafka's
``Readable.readString`` reads every string so, the client id included: the proxy must read
the same string (it names the client to the authorizer and the audit).
"""

from __future__ import annotations

from typing import Final

__all__ = ["read_string"]

_REPLACEMENT: Final = "\ufffd"


def read_string(raw: bytes) -> str:
    """``new String(raw, UTF_8)``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return _java_decode(raw)


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _bad_second_of_three(b1: int, b2: int) -> bool:
    """``isMalformed3_2``: an overlong E0 form, or no continuation byte."""
    return (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _continuation(b2)


def _bad_second_of_four(b1: int, b2: int) -> bool:
    """``isMalformed4_2``: outside U+10000..U+10FFFF, or no continuation byte."""
    return (
        (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF)
        or (b1 == 0xF4 and b2 & 0xF0 != 0x80)
        or not _continuation(b2)
    )


def _java_decode(raw: bytes) -> str:  # noqa: C901 - one branch per case of Java's decoder
    """``String.decodeUTF8_UTF16`` of malformed input, case by case."""
    out: list[str] = []
    size = len(raw)
    pos = 0
    while pos < size:
        b1 = raw[pos]
        pos += 1
        if b1 < 0x80:
            out.append(chr(b1))
        elif 0xC2 <= b1 <= 0xDF:  # two bytes
            if pos < size and _continuation(raw[pos]):
                out.append(chr((b1 & 0x1F) << 6 | raw[pos] & 0x3F))
                pos += 1
            else:
                out.append(_REPLACEMENT)  # the next byte, if any, is read on its own
        elif 0xE0 <= b1 <= 0xEF:  # three bytes
            if pos + 1 < size:
                b2, b3 = raw[pos], raw[pos + 1]
                if _bad_second_of_three(b1, b2) or not _continuation(b3):
                    out.append(_REPLACEMENT)
                    pos += 0 if _bad_second_of_three(b1, b2) else 1  # ``malformed3``
                else:
                    pos += 2
                    char = (b1 & 0x0F) << 12 | (b2 & 0x3F) << 6 | b3 & 0x3F
                    out.append(_REPLACEMENT if 0xD800 <= char <= 0xDFFF else chr(char))
            elif pos < size and _bad_second_of_three(b1, raw[pos]):
                out.append(_REPLACEMENT)
            else:  # the input ends inside the character: one U+FFFD for what is left
                out.append(_REPLACEMENT)
                break
        elif 0xF0 <= b1 <= 0xF7:  # four bytes
            if pos + 2 < size:
                b2, b3, b4 = raw[pos], raw[pos + 1], raw[pos + 2]
                code = (b1 & 0x07) << 18 | (b2 & 0x3F) << 12 | (b3 & 0x3F) << 6 | b4 & 0x3F
                if (
                    not (_continuation(b2) and _continuation(b3) and _continuation(b4))
                    or not 0x10000 <= code <= 0x10FFFF
                ):
                    out.append(_REPLACEMENT)
                    # ``malformed4``: how many bytes the replacement stands for, less one
                    if b1 > 0xF4 or _bad_second_of_four(b1, b2):
                        pass
                    elif not _continuation(b3):
                        pos += 1
                    else:
                        pos += 2
                else:
                    out.append(chr(code))
                    pos += 3
                continue
            if b1 > 0xF4 or (pos < size and _bad_second_of_four(b1, raw[pos])):
                out.append(_REPLACEMENT)
                continue
            pos += 1
            out.append(_REPLACEMENT)
            if pos < size and not _continuation(raw[pos]):
                continue
            break
        else:  # a continuation byte alone, C0, C1, F8..FF
            out.append(_REPLACEMENT)
    return "".join(out)
