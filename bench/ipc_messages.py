"""What a typed message costs on the proxy -> capture worker channel, against a tuple.

    python bench/ipc_messages.py [--number N]

Pack + unpack of one message, in microseconds, for: the positional tuple the channel
carried before (pickle.dumps, pickle.loads); a slotted dataclass pickled as Python
does by default (its class by name, its slots by name); the typed messages as
`proxy.mirror.worker.ipc` sends them (`to_wire` -> (code, fields...) -> pickle, and back
through `from_wire`); a msgspec Struct through msgspec's msgpack (when msgspec is
installed; it is not a dependency). Messages as on
the hot path: `Start` (headers, a 600-byte body), `Chunks` (32 KiB of SSE in 160
pieces, the proxy's flush size), `End` (a few pieces), `Done`.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import timeit
from collections.abc import Callable
from typing import Any

from proxy.mirror.worker.messages import Chunks, Done, End, Start, from_wire, to_wire

HEADERS = [("Host", "old:8000"), ("Content-Type", "application/json"),
           ("Authorization", "Bearer x" * 4), ("User-Agent", "python-httpx/0.27")]
BODY = {"model": "m", "prompt": "x" * 560, "stream": True}
PIECE = b'data: {"id":"cmpl-1","choices":[{"index":0,"text":" tok"}]}\n\n' + b" " * 140


def _typed() -> dict[str, Any]:
    payloads = [PIECE] * 160
    times = [1000.0 + i / 100 for i in range(160)]
    return {
        "start": Start(7, 3, "http://old:8000", "http://new:8000", None, "/v1/completions",
                       HEADERS, BODY, "completions", 1.7e9, 1000.0),
        "chunks": Chunks(7, "text/event-stream", payloads, times),
        "end": End(7, "text/event-stream", payloads[:3], times[:3], 200, None, False, 1002.0),
        "done": Done(7),
    }


def _as_tuple(message: Any) -> tuple[Any, ...]:
    return (type(message).__name__.lower(),
            *(getattr(message, f.name) for f in dataclasses.fields(message)))


def _plain_dataclass(message: Any) -> Any:
    """The same fields in a dataclass(slots=True) with Python's default pickling."""
    cls = type(message)
    fields = [(f.name, Any) for f in dataclasses.fields(cls)]
    plain = dataclasses.make_dataclass(f"Plain{cls.__name__}", fields, slots=True)
    plain.__module__ = __name__
    globals()[plain.__name__] = plain  # picklable by reference
    return plain(*_as_tuple(message)[1:])


def _pickle_round(message: Any) -> Callable[[], Any]:
    dumps, loads, protocol = pickle.dumps, pickle.loads, pickle.HIGHEST_PROTOCOL
    return lambda: loads(dumps(message, protocol))


def _typed_round(message: Any) -> Callable[[], Any]:
    dumps, loads, protocol = pickle.dumps, pickle.loads, pickle.HIGHEST_PROTOCOL
    return lambda: from_wire(loads(dumps(to_wire(message), protocol)))


def _msgspec_round(message: Any) -> Callable[[], Any] | None:
    try:
        import msgspec
    except ImportError:
        return None
    cls = type(message)
    fields = [(f.name, Any) for f in dataclasses.fields(cls)]
    struct = msgspec.defstruct(f"Struct{cls.__name__}", fields, array_like=True, tag=True,
                               module=__name__)
    value = struct(*_as_tuple(message)[1:])
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(struct)
    return lambda: decoder.decode(encoder.encode(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000,
                        help="round trips per timing (default 20000); best of 5 timings")
    args = parser.parse_args()
    print(f"{'message':8} {'tuple':>8} {'dataclass':>10} {'typed':>8} {'msgspec':>8}  "
          "(us per pack+unpack; typed/tuple)")
    for name, message in _typed().items():
        rounds = {"tuple": _pickle_round(_as_tuple(message)),
                  "dataclass": _pickle_round(_plain_dataclass(message)),
                  "typed": _typed_round(message),
                  "msgspec": _msgspec_round(message)}
        us = {kind: (min(timeit.repeat(fn, number=args.number, repeat=5)) / args.number * 1e6
                     if fn is not None else float("nan"))
              for kind, fn in rounds.items()}
        print(f"{name:8} {us['tuple']:8.2f} {us['dataclass']:10.2f} {us['typed']:8.2f} "
              f"{us['msgspec']:8.2f}  x{us['typed'] / us['tuple']:.2f}")


if __name__ == "__main__":
    main()
