"""The CI fuzz run: a seeded, time-bounded run of the wire harness, plus the generator's own
guarantees (its layouts point at the right bytes, it is deterministic and fast).

The seeded run is bounded by frames *and* seconds so it fits a 2-core CI machine: whichever
comes first ends it; ``./dev fuzz`` runs the same harness for as long as asked.
"""

from __future__ import annotations

import struct
import time

import pytest

from kafkaguard.protocol import codec
from tests.support.fuzz.frames import BASE_VARIANTS, FrameGenerator, Slot
from tests.support.fuzz.harness import Options, fuzz

SEED = 20261125
FRAMES = 30_000
SECONDS = 40.0


def read_uvarint(data: bytes, at: int) -> tuple[int, int]:
    """(value, offset after it)."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        shift += 7
        if not byte & 0x80:
            return value, at


def read_slot(data: bytes, slot: Slot) -> int:
    if slot.kind in ("ulen", "tags", "tagsize"):
        value, end = read_uvarint(data, slot.offset)
        assert end == slot.offset + slot.width
        return value
    fmt = {"int8": ">b", "int16": ">h", "len16": ">h", "int64": ">q", "uint16": ">H"}
    return int(struct.unpack_from(fmt.get(slot.kind, ">i"), data, slot.offset)[0])


def test_layouts_match_kio_encoding() -> None:
    """Every slot the mutations aim at is where kio put that integer: the generator's
    re-encoding of every request schema equals codec.encode_request byte for byte (else a
    base has no slots), each slot reads back its value, and each tagged-field section holds
    exactly its fields."""
    generator = FrameGenerator(SEED)
    for api_key in generator.api_keys:
        for version in codec.codec_versions(api_key):
            for variant in range(BASE_VARIANTS):
                base = generator.base(api_key, version, variant)
                where = f"{codec.API_NAMES[api_key]} v{version} variant {variant}"
                assert base.slots, where
                for slot in base.slots:
                    assert read_slot(base.frame, slot) == slot.value, (where, slot)
                    if slot.kind == "tags":
                        at = slot.offset + slot.width
                        for _ in range(slot.value):
                            at = read_uvarint(base.frame, at)[1]  # the tag
                            size, at = read_uvarint(base.frame, at)
                            at += size
                        assert at == slot.end, (where, slot)


def test_generation_is_deterministic_and_fast() -> None:
    first, second = FrameGenerator(SEED), FrameGenerator(SEED)
    frames = [first.frame(i) for i in range(20_000)]  # builds (and caches) the base requests
    assert [second.frame(i) for i in range(0, 20_000, 97)] == frames[::97]
    assert FrameGenerator(SEED + 1).frame(7) != frames[7]
    started = time.perf_counter()
    for i in range(20_000):
        first.frame(i)
    assert 20_000 / (time.perf_counter() - started) >= 5_000


@pytest.mark.integration
@pytest.mark.timeout(150)
async def test_seeded_fuzz_run_holds() -> None:
    report = await fuzz(Options(seed=SEED, frames=FRAMES, seconds=SECONDS))
    print(report.summary())
    details = "\n".join(v.render(SEED) for v in report.violations)
    assert report.ok, f"{report.summary()}\n{details}\nwork directory: {report.workdir}"
    assert report.stats.frames_sent >= 2_000, report.summary()  # not vacuous
    assert report.stats.auth_ok > 0 and report.stats.control_ok > 0, report.summary()
