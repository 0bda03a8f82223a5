"""Fuzz the codec in-process: guard + kio decode of one API key and version.

Why in-process: the proxy-level harness (:mod:`tests.support.fuzz.harness`) finds what a whole
process does with hostile frames; this target explores the decoder alone, millions of frames
a minute, with coverage guidance from atheris (libFuzzer). The only exceptions a frame may
raise are the protocol errors the connection turns into a closed connection:
:class:`MalformedFrame`, :class:`UnsupportedVersion`, :class:`UnknownApiKey`. Anything else
is a finding, and so is an abort: kio preallocates claimed array sizes in native code.

The fuzz input is a frame without its size prefix; for requests the api key and version in it
are forced to the chosen ones, so the fuzzer spends its time inside that schema. Seeds are
valid frames encoded by the codec.

    .venv/bin/python tests/fuzz/atheris_codec.py --api-key 3 --version 12 -- -max_total_time=60
    .venv/bin/python tests/fuzz/atheris_codec.py --api-key 65 --version 0 --response --plain

``--plain`` (or atheris missing) runs a seeded random-mutation loop instead, under
``RLIMIT_AS`` so an over-allocation fails as a crash rather than swapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import resource
import struct
import sys
import typing
from collections.abc import Callable, Iterator
from types import NoneType, UnionType
from typing import Any

from kafkaguard.protocol import codec
from kafkaguard.protocol.errors import MalformedFrame, UnknownApiKey, UnsupportedVersion

EXPECTED = (MalformedFrame, UnsupportedVersion, UnknownApiKey)
ADDRESS_SPACE_LIMIT = 2 << 30

_HUGE = (
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\xff\xfe",
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x07",
)


def target(api_key: int, version: int, response: bool) -> Callable[[bytes], None]:
    """One fuzz iteration: decode ``data`` (a frame without its size prefix)."""
    pin = struct.pack(">hh", api_key, version)

    def test_one_input(data: bytes) -> None:
        if not response and len(data) >= 4:
            data = pin + data[4:]
        frame = struct.pack(">i", len(data)) + data
        try:
            if response:
                codec.decode_response(frame, api_key, version)
            else:
                codec.decode_request(frame, api_key, version)
        except EXPECTED:
            pass

    return test_one_input


def seeds(api_key: int, version: int, response: bool) -> list[bytes]:
    """Valid frames (without size prefix): the schema's empty body, and one with a single
    zero-valued element in each top-level array of entities."""
    schema: type[Any] = (codec.response_schema if response else codec.request_schema)(
        api_key, version
    )
    filled: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(schema).items():
        if typing.get_origin(hint) in (UnionType, typing.Union):
            hint = next(a for a in typing.get_args(hint) if a is not NoneType)
        if typing.get_origin(hint) is not tuple:
            continue
        element = typing.get_args(hint)[0]
        if isinstance(element, type) and dataclasses.is_dataclass(element):
            filled[name] = (codec.make_entity(element),)
    frames = []
    for body in (codec.make_entity(schema), codec.make_entity(schema, **filled)):
        if response:
            frames.append(codec.encode_response(body, 7)[4:])
        else:
            frames.append(codec.encode_request(body, 7, "fuzz")[4:])
    return frames


def mutants(seed_frames: list[bytes], rng: random.Random) -> Iterator[bytes]:
    """Random truncations, byte flips, and huge lengths/counts written or inserted anywhere."""
    while True:
        data = bytearray(rng.choice(seed_frames))
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            at = rng.randrange(len(data))
            match rng.randrange(4):
                case 0:
                    del data[at:]
                case 1:
                    data[at] = rng.randrange(256)
                case 2:
                    value = rng.choice(_HUGE)
                    data[at : at + len(value)] = value
                case _:
                    data[at:at] = rng.choice(_HUGE)
        yield bytes(data)


def run_plain(one: Callable[[bytes], None], seed_frames: list[bytes], iterations: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    rng = random.Random(0)
    for index, data in zip(range(iterations), mutants(seed_frames, rng), strict=False):
        try:
            one(data)
        except Exception:
            print(f"finding at iteration {index}: {data.hex()}", file=sys.stderr)
            raise
    print(f"{iterations} frames, no finding")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-key", type=int, required=True)
    parser.add_argument("--version", type=int, required=True)
    parser.add_argument("--response", action="store_true", help="decode responses")
    parser.add_argument("--plain", action="store_true", help="random mutation, no atheris")
    parser.add_argument("--iterations", type=int, default=200_000, help="for --plain")
    args, rest = parser.parse_known_args(argv)
    one = target(args.api_key, args.version, args.response)
    seed_frames = seeds(args.api_key, args.version, args.response)
    try:
        import atheris  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        atheris = None
    if args.plain or atheris is None:
        run_plain(one, seed_frames, args.iterations)
        return

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        if not data:  # libFuzzer starts from an empty input: begin from a valid frame
            return random.Random(seed).choice(seed_frames)[:max_size]
        mutated: bytes = atheris.Mutate(data, max_size)
        return mutated

    atheris.Setup(
        [sys.argv[0], *[a for a in rest if a != "--"]], one, custom_mutator=custom_mutator
    )
    atheris.instrument_all()  # coverage of the guard and codec (kio is native)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1:])
