"""When the capture worker gives memory back: RSS well over its low, at most once per
interval; and glibc's malloc_trim really returns freed small blocks."""

from __future__ import annotations

from proxy.mirror.memory import MemoryRelease, glibc_malloc_trim, rss_bytes

MIB = 1024 * 1024


def test_it_collects_and_trims_when_rss_grew_and_not_again_within_the_interval() -> None:
    readings = iter([100 * MIB,  # at start: the low
                     150 * MIB,  # +50: under the growth
                     400 * MIB, 130 * MIB,  # +300: trimmed, to 130
                     420 * MIB,  # again, 5 s later: not within the interval
                     420 * MIB, 110 * MIB])  # 12 s later: trimmed
    trims: list[int] = []
    release = MemoryRelease(rss=lambda: next(readings), trim=lambda: trims.append(1),
                            grow_bytes=64 * MIB, min_interval_s=10)
    assert [release.check(t) for t in (0.0, 5.0, 10.0, 22.0)] == [False, True, False, True]
    assert len(trims) == release.releases == 2 and release.low_bytes == 100 * MIB


def test_malloc_trim_gives_freed_small_blocks_back() -> None:
    trim = glibc_malloc_trim()
    assert trim is not None  # glibc on every machine this runs on
    before = rss_bytes()
    held = [bytes(1000) + i.to_bytes(4, "little") for i in range(300_000)]  # ~300 MB
    grown = rss_bytes()
    del held[:-1]  # the last block pins the heap's top: only trim returns the rest
    trim()
    assert grown - before > 250 * MIB
    assert rss_bytes() - before < 60 * MIB, (before >> 20, grown >> 20, rss_bytes() >> 20)
