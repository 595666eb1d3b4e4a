"""Sampling decisions and error names of the shadow path."""

from __future__ import annotations

import asyncio
import random

import aiohttp
from multidict import CIMultiDict

from proxy.mirror.shadow import Sampler, classify_error


def test_rate_bounds_and_random_share():
    assert Sampler(1.0).sample({}) and not Sampler(0.0).sample({})
    sampler = Sampler(0.3, rng=random.Random(1))
    share = sum(sampler.sample({}) for _ in range(4000)) / 4000
    assert 0.27 < share < 0.33


def test_header_hash_is_consistent_and_proportional():
    sampler = Sampler(0.5, header="X-User")
    users = [CIMultiDict({"x-user": f"user-{i}"}) for i in range(2000)]  # case-insensitive
    first = [sampler.sample(h) for h in users]
    assert first == [Sampler(0.5, header="X-User").sample(h) for h in users]
    assert 0.45 < sum(first) / len(first) < 0.55


def test_error_names():
    assert classify_error(asyncio.TimeoutError()) == "timeout"
    assert classify_error(aiohttp.ServerDisconnectedError()) == "reset"
    assert classify_error(aiohttp.ClientPayloadError("x")) == "reset"
    assert classify_error(aiohttp.InvalidURL("x")) == "client_error"
