"""The releases the tables were written for, and the package index's newest vLLM against them:
a release newer than the tables fails here, so the project notices it before its users do."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from packaging.version import InvalidVersion, Version

from proxy.launcher import gpus, releases, rules
from proxy.launcher.versions import coverage, release_of

INDEX_TIMEOUT_S = 120


def newest_final(pip_output: str) -> Version | None:
    """The newest final release in `pip index versions` output (None when it lists none)."""
    match = re.search(r"^Available versions: (.+)$", pip_output, flags=re.MULTILINE)
    if match is None:
        return None
    found = []
    for text in match.group(1).split(","):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            found.append(version)
    return max(found, default=None)


def test_newest_final_reads_pips_listing() -> None:
    listing = ("vllm (0.34.0)\nAvailable versions: 0.33.0, 0.34.0rc1, 0.32.0, 0.9.2, "
               "0.10.1.1, bogus\n")
    assert newest_final(listing) == Version("0.33.0")
    assert newest_final("ERROR: No matching distribution found for vllm\n") is None


def test_the_newest_release_has_its_facts() -> None:
    newest = releases.NEWEST
    assert gpus.flashinfer_pin(str(newest)) is not None
    assert str(newest) in releases.VERIFIED
    assert coverage(newest) == "known"
    assert coverage(Version(f"{newest.major}.{newest.minor + 1}.0")) == "newer"
    assert coverage(Version("0.9.9")) == "older" and coverage(releases.OLDEST) == "known"


def test_no_rule_range_ends_past_the_newest_release() -> None:
    """Every source, mechanism or choice that stops applying stops at a release the tables know:
    a range ending past NEWEST would be a guess about a release nobody read."""
    rows = (*rules.SOURCES, *rules.MECHANISMS, *rules.CHOICES)
    upper_bounds = [Version(spec.version) for row in rows
                    for spec in (getattr(row, "accepted", None) or row.versions)
                    if spec.operator == "<"]
    assert upper_bounds
    assert all(bound <= releases.NEWEST for bound in upper_bounds if bound > Version("0.0.0"))


def test_the_package_index_has_no_vllm_newer_than_the_tables() -> None:
    """Asks the index pip is configured for (no host name here); skips where none answers."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"],
                              capture_output=True, text=True, timeout=INDEX_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the package index did not answer `pip index versions vllm` within "
                    f"{INDEX_TIMEOUT_S} s")
    newest = newest_final(done.stdout)
    if done.returncode != 0 or newest is None:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-2:])
        pytest.skip(f"the package index is not reachable through pip's configuration: {tail}")
    assert coverage(newest) != "newer", (
        f"vLLM {release_of(newest)} is on the package index, newer than the tables "
        f"({releases.TABLES_TEXT}): read its sources and add it as proxy/launcher/releases.py "
        "says")
