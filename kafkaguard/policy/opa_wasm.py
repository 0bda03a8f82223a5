"""OPA's WebAssembly build evaluated in process: the OPA authorizer's ``options.mode: wasm``.

``opa build -t wasm -e kafka/authz/allow policy.rego`` compiles a policy into a bundle holding
``/policy.wasm`` (the policy as a WebAssembly module), ``/data.json`` and ``/.manifest`` (the
entrypoints). :class:`WasmPolicy` instantiates the module with the ``wasmtime`` runtime (the
``kafkaguard[opa-wasm]`` extra) and evaluates a decision over the same input document the REST
mode POSTs (:func:`kafkaguard.policy.opa.input_document`), as Kroxylicious's OPA authorizer
does in the JVM. The REST mode stays the reference: this one is measured against it in
bench/RESULTS.md ("Issue 37: OPA as the authorizer") and tested against its decisions.

The OPA WebAssembly ABI (OPA's docs, "WebAssembly"; version 1.2 and later):

* The module imports its linear memory (``env.memory``), ``opa_abort`` and the host builtins
  ``opa_builtin0`` .. ``opa_builtin4``; its ``builtins()`` export names the builtins it needs
  from the host. A policy needing any is refused here (this mode provides none: those the
  policies in OPA's Kafka style use, such as ``startswith``, ``split``, ``concat`` and
  ``count``, are compiled into the module).
* ``data.json`` is parsed into the module's heap once (``opa_malloc``, ``opa_json_parse``);
  the heap pointer after it is where every evaluation starts.
* A decision is one ``opa_eval`` call (the ABI 1.2 fast path): the input's JSON written at the
  heap pointer, evaluated against the entrypoint, and the result set returned as JSON,
  ``[{"result": true}]``; the next call reuses the same heap from the same pointer, so memory
  does not grow with the number of decisions. It is bounded (:data:`MAX_MEMORY_BYTES`): the
  input carries names a client sent, and an input or evaluation needing more is an error. So is
  its time, with a timeout (the OPA authorizer's ``timeout_ms``): the engine interrupts an
  evaluation past its epoch deadline (:class:`_Ticker`), as the REST mode's call times out.

A :class:`WasmPolicy` is one module instance (a wasmtime ``Store``): used from one thread at
a time (the proxy's event loop, or a tool's thread).
"""

from __future__ import annotations

import json
import math
import tarfile
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

EXTRA: Final = "opa-wasm"
"""The optional dependency set that brings wasmtime (``pip install kafkaguard[opa-wasm]``)."""
_PAGE: Final = 65536
_INPUT_MARGIN: Final = 64 * 1024
"""Room left above the input for the evaluation's first allocations (it grows memory itself
for more: OPA's ``opa_malloc``)."""
MAX_MEMORY_BYTES: Final = 256 * 1024 * 1024
"""The most linear memory an instance may have (wasmtime's ``Store.set_limits``). The input
holds client-sent names, and a frame may be up to ``max_frame_bytes`` (100 MiB) long: without
a bound, one request could grow the module's memory, which never shrinks, to several times
that. An input or evaluation needing more is an error that denies (``wasm_trap``)."""


TICK_S: Final = 0.01
"""How often the engines' epoch advances (wasmtime's epoch interruption): the resolution of
an evaluation's deadline."""
_NO_DEADLINE: Final = 1 << 62
"""The epoch deadline outside an evaluation (instantiation, loading ``data.json``)."""


class _Ticker:
    """One daemon thread advancing the epoch of every live engine with a deadline each
    :data:`TICK_S` (``Engine.increment_epoch`` is safe from any thread); started with the
    first such engine, holding none alive, and ending when none is left."""

    def __init__(self) -> None:
        self._engines: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, engine: Any) -> None:
        with self._lock:
            self._engines.add(engine)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kafkaguard-wasm-epoch", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(TICK_S)
            with self._lock:
                engines = list(self._engines)
                if not engines:  # none left: the next add() starts a thread again
                    self._thread = None
                    return
            for engine in engines:
                engine.increment_epoch()


_TICKER: Final = _Ticker()


class WasmPolicyError(ValueError):
    """The bundle cannot be used: not a wasm bundle, no such entrypoint, builtins needed."""


@dataclass(frozen=True, slots=True)
class WasmBundle:
    """What ``opa build -t wasm`` wrote: the module and its data (the module itself lists its
    entrypoints, :attr:`WasmPolicy.entrypoints`)."""

    path: Path
    module: bytes
    """``/policy.wasm`` (or the module the manifest names)."""
    data: bytes
    """``/data.json``; ``{}`` when the bundle has none."""

    @classmethod
    def read(cls, path: Path) -> WasmBundle:
        """Read a bundle (``.tar.gz``); raises :class:`WasmPolicyError` saying what is wrong."""
        try:
            with tarfile.open(path, "r:*") as archive:
                files = {member.name.lstrip("/"): member for member in archive.getmembers()}
                manifest = _member(archive, files, ".manifest")
                data = _member(archive, files, "data.json") or b"{}"
                wasm = [entry for entry in _wasm_entries(manifest) if isinstance(entry, dict)]
                name = str(wasm[0].get("module", "/policy.wasm")) if wasm else "/policy.wasm"
                module = _member(archive, files, name.lstrip("/"))
        except (OSError, tarfile.TarError) as exc:
            raise WasmPolicyError(f"{path}: not a readable bundle: {exc}") from exc
        if module is None:
            raise WasmPolicyError(
                f"{path}: no policy.wasm in the bundle (build it with opa build -t wasm -e ...)"
            )
        return cls(path, module, data)


def _engine(wasmtime: Any, timeout_s: float | None) -> Any:
    """An engine; with a timeout, one whose evaluations the epoch ticker interrupts."""
    if timeout_s is None:
        return wasmtime.Engine()
    config = wasmtime.Config()
    config.epoch_interruption = True
    engine = wasmtime.Engine(config)
    _TICKER.add(engine)
    return engine


def _member(archive: tarfile.TarFile, files: Mapping[str, tarfile.TarInfo], name: str) -> bytes:
    member = files.get(name)
    if member is None:
        return b""
    handle = archive.extractfile(member)
    return handle.read() if handle is not None else b""


def _wasm_entries(manifest: bytes) -> list[Any]:
    if not manifest:
        return []
    try:
        document = json.loads(manifest)
    except ValueError as exc:
        raise WasmPolicyError(f"the bundle's .manifest is not JSON: {exc}") from exc
    entries = document.get("wasm", []) if isinstance(document, dict) else []
    return entries if isinstance(entries, list) else []


class WasmEvalError(RuntimeError):
    """An evaluation failed; ``reason`` is ``wasm_trap`` (the module trapped or aborted) or
    ``not_boolean`` (the result set is empty or not one boolean)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class WasmPolicy:
    """One instance of a bundle's module, evaluating ``entrypoint`` (module doc)."""

    def __init__(
        self,
        bundle: WasmBundle,
        entrypoint: str | None = None,
        *,
        max_memory_bytes: int = MAX_MEMORY_BYTES,
        timeout_s: float | None = None,
    ) -> None:
        """``timeout_s``: the longest an evaluation may run (the OPA authorizer's
        ``timeout_ms``); past it the module is interrupted and the decision is a ``timeout``
        error. None: no deadline."""
        try:
            import wasmtime
        except ImportError as exc:  # pragma: no cover - the extra is part of the test extra
            raise WasmPolicyError(
                f"mode wasm needs wasmtime: pip install 'kafkaguard[{EXTRA}]'"
            ) from exc
        self._wasmtime = wasmtime
        engine = _engine(wasmtime, timeout_s)
        self._store = store = wasmtime.Store(engine)
        store.set_limits(memory_size=max_memory_bytes)
        self.timeout_s = timeout_s
        self._deadline = None if timeout_s is None else math.ceil(timeout_s / TICK_S) + 1
        """Epoch ticks an evaluation may take (one more than the timeout: the first tick may
        come at once)."""
        if self._deadline is not None:
            store.set_epoch_deadline(_NO_DEADLINE)
        self.max_memory_bytes = max_memory_bytes
        try:
            module = wasmtime.Module(engine, bundle.module)
        except wasmtime.WasmtimeError as exc:
            raise WasmPolicyError(f"{bundle.path}: policy.wasm does not compile: {exc}") from exc
        memory_type = next(
            (i.type for i in module.imports if i.name == "memory"),
            wasmtime.MemoryType(wasmtime.Limits(2, None)),
        )
        if not isinstance(memory_type, wasmtime.MemoryType):
            raise WasmPolicyError(f"{bundle.path}: env.memory is not a memory import")
        self._memory = memory = wasmtime.Memory(store, memory_type)
        linker = wasmtime.Linker(engine)
        linker.define(store, "env", "memory", memory)
        i32 = wasmtime.ValType.i32()
        linker.define_func("env", "opa_abort", wasmtime.FuncType([i32], []), self._abort)
        for arity in range(5):
            linker.define_func(
                "env",
                f"opa_builtin{arity}",
                wasmtime.FuncType([i32] * (arity + 2), [i32]),
                self._builtin,
            )
        try:
            exports = linker.instantiate(store, module).exports(store)
        except (wasmtime.WasmtimeError, wasmtime.Trap) as exc:
            raise WasmPolicyError(
                f"{bundle.path}: policy.wasm does not instantiate: {exc}"
            ) from exc
        self._exports = exports
        needed = self._json(self._call("builtins"))
        if needed:
            raise WasmPolicyError(
                f"{bundle.path}: the policy needs builtins mode wasm does not provide: "
                f"{', '.join(sorted(needed))} (use mode: rest)"
            )
        self.entrypoints: dict[str, int] = self._json(self._call("entrypoints"))
        self.entrypoint = self._choose(bundle, entrypoint)
        self._entrypoint_id = self.entrypoints[self.entrypoint]
        try:
            self._data = self._load_json(bundle.data)
        except (wasmtime.Trap, wasmtime.WasmtimeError, RuntimeError) as exc:
            raise WasmPolicyError(
                f"{bundle.path}: data.json does not load within the memory limit of "
                f"{max_memory_bytes} bytes: {exc}"
            ) from exc
        self._heap = self._call("opa_heap_ptr_get")
        evaluate = exports["opa_eval"]
        if not isinstance(evaluate, wasmtime.Func):
            raise WasmPolicyError(f"{bundle.path}: policy.wasm has no opa_eval (OPA ABI < 1.2)")
        self._eval = evaluate

    @property
    def memory_bytes(self) -> int:
        """The instance's linear memory now (at most ``max_memory_bytes``)."""
        return int(self._memory.data_len(self._store))

    def _choose(self, bundle: WasmBundle, entrypoint: str | None) -> str:
        known = sorted(self.entrypoints)
        if entrypoint is None:
            if len(known) != 1:
                raise WasmPolicyError(
                    f"{bundle.path}: entrypoint: one of {', '.join(known)} must be named"
                )
            return known[0]
        if entrypoint not in self.entrypoints:
            raise WasmPolicyError(
                f"{bundle.path}: no entrypoint {entrypoint!r} (it has {', '.join(known)})"
            )
        return entrypoint

    @staticmethod
    def _abort(address: int) -> None:
        raise RuntimeError(f"opa_abort at {address}")

    @staticmethod
    def _builtin(builtin: int, *_args: int) -> int:
        raise RuntimeError(f"builtin {builtin} called: mode wasm provides none")

    def _invoke(self, name: str, *args: int) -> object:
        function = self._exports[name]
        assert isinstance(function, self._wasmtime.Func)
        return function(self._store, *args)

    def _call(self, name: str, *args: int) -> int:
        """An export returning an address or a number."""
        result = self._invoke(name, *args)
        assert isinstance(result, int)
        return result

    def _string(self, address: int) -> bytes:
        """The NUL-terminated string at ``address``."""
        memory, store = self._memory, self._store
        end = memory.data_len(store)
        chunk = 256
        while True:
            data = memory.read(store, address, min(end, address + chunk))
            stop = data.find(0)
            if stop >= 0:
                return bytes(data[:stop])
            if address + chunk >= end:
                raise WasmEvalError("wasm_trap", "a result string runs past the memory")
            chunk *= 4

    def _json(self, value_address: int) -> Any:
        return json.loads(self._string(self._call("opa_json_dump", value_address)))

    def _load_json(self, text: bytes) -> int:
        address = self._call("opa_malloc", len(text))
        self._memory.write(self._store, text, address)
        parsed = self._call("opa_json_parse", address, len(text))
        self._invoke("opa_free", address)
        if parsed == 0:
            raise WasmPolicyError("the bundle's data.json does not parse")
        return parsed

    def evaluate(self, input_text: bytes) -> Any:
        """The result set for ``input_text`` (the input document's ``input`` as JSON)."""
        store, memory, heap = self._store, self._memory, self._heap
        needed = heap + len(input_text) + _INPUT_MARGIN
        if needed > self.max_memory_bytes:
            raise WasmEvalError(
                "wasm_trap",
                f"an input of {len(input_text)} bytes does not fit the module's memory limit "
                f"of {self.max_memory_bytes} bytes",
            )
        wasmtime = self._wasmtime
        try:
            short = needed - memory.data_len(store)
            if short > 0:
                memory.grow(store, -(-short // _PAGE))
            memory.write(store, input_text, heap)
            if self._deadline is not None:
                store.set_epoch_deadline(self._deadline)
            result = self._eval(
                store, 0, self._entrypoint_id, self._data, heap, len(input_text),
                heap + len(input_text), 0,
            )  # fmt: skip
            assert isinstance(result, int)
            return json.loads(self._string(result))
        except wasmtime.Trap as exc:
            if exc.trap_code == wasmtime.TrapCode.INTERRUPT:
                detail = f"no answer within {self.timeout_s:g} s (the module was interrupted)"
                raise WasmEvalError("timeout", detail) from exc
            raise WasmEvalError("wasm_trap", f"Trap: {exc}") from exc
        except (wasmtime.WasmtimeError, RuntimeError, ValueError) as exc:
            raise WasmEvalError("wasm_trap", f"{type(exc).__name__}: {exc}") from exc

    def decide(self, input_value: Mapping[str, Any]) -> bool:
        """The entrypoint's value for ``input_value``: a boolean, or :class:`WasmEvalError`
        (an undefined rule gives an empty result set: ``not_boolean``, as the REST mode)."""
        results = self.evaluate(json.dumps(input_value).encode())
        value = (
            results[0].get("result")
            if isinstance(results, list) and len(results) == 1 and isinstance(results[0], dict)
            else None
        )
        if not isinstance(value, bool):
            raise WasmEvalError("not_boolean", f"result set is {results!r}, not one boolean")
        return value


__all__ = [
    "EXTRA",
    "MAX_MEMORY_BYTES",
    "WasmBundle",
    "WasmEvalError",
    "WasmPolicy",
    "WasmPolicyError",
]
