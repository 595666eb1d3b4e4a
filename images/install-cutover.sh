#!/bin/sh
# Installs vllm-cutover in an image build (every Dockerfile here runs it):
#   sh install-cutover.sh "PIP INSTALL COMMAND" SOURCE_DIR WHEEL_DIR [EXTRAS]
# OFFLINE=1 (build arg): only the wheels in WHEEL_DIR, --no-index (made beforehand with
# `pip wheel -w .whl ".[fast]"`). Otherwise from the package index, building SOURCE_DIR;
# CA_BUNDLE (build arg): a file of the context's .build-certs/ that pip trusts for the
# index (a TLS-intercepting proxy), read from CERT_DIR (default SOURCE_DIR/.build-certs).
# NO_DEPS=1: our package alone (an image whose Python already has what the launcher needs).
# DEPS_ONLY=1: only the dependencies (SOURCE_DIR needs only pyproject.toml then).
set -eu
pip_install="$1" source_dir="$2" wheel_dir="$3" extras="${4:-}"
export PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1
set --
if [ "${NO_DEPS:-}" = 1 ]; then set -- --no-deps; fi
if [ -n "${CA_BUNDLE:-}" ]; then
    cert="${CERT_DIR:-$source_dir/.build-certs}/$CA_BUNDLE"
    [ -f "$cert" ] || { echo "CA_BUNDLE=$CA_BUNDLE: no $cert in the build context" >&2; exit 2; }
    export PIP_CERT="$cert" SSL_CERT_FILE="$cert"
fi
if [ "${DEPS_ONLY:-}" = 1 ]; then
    # The dependencies alone, in a layer of their own that a change of our code keeps:
    # a stub package with our pyproject.toml. Offline, the wheels come in one step.
    [ "${OFFLINE:-}" = 1 ] && exit 0
    stub="$(mktemp -d)"
    cp "$source_dir/pyproject.toml" "$stub/"
    mkdir "$stub/proxy" && touch "$stub/proxy/__init__.py" "$stub/README.md"
    # shellcheck disable=SC2086
    $pip_install "$@" "$stub$extras"
    rm -rf "$stub"
    exit 0
fi
if [ "${OFFLINE:-}" = 1 ]; then
    ls "$wheel_dir"/vllm_cutover-*.whl >/dev/null 2>&1 \
        || { echo "OFFLINE=1: no vllm_cutover wheel in .whl/ (pip wheel -w .whl '.[fast]')" >&2; exit 2; }
    # shellcheck disable=SC2086  # the install command is words
    exec $pip_install "$@" --no-index --find-links "$wheel_dir" "vllm-cutover$extras"
fi
# shellcheck disable=SC2086
exec $pip_install "$@" "$source_dir$extras"
