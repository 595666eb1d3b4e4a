# The sidecar: `vllm-cutover proxy` in front of the old (primary) and new (shadow) vLLM;
# with `--driver docker` it also runs the container cutover.
#   docker build -t vllm-cutover .                  # from a clone: pip reaches the index
#   pip wheel -w .whl ".[fast]" && docker build --build-arg OFFLINE=1 -t vllm-cutover .
#                                                   # offline: only the wheels in .whl/
# Build args: BASE_IMAGE; OFFLINE=1; CA_BUNDLE=FILE, a CA bundle put in .build-certs/
# that pip trusts for the index (build stage only, not in the image). See
# images/install-cutover.sh, and compose/ for the sidecar beside an old and a new vLLM.
#
# It runs as uid 10001, not root. The Docker socket is root on the host: give the sidecar
# the socket's group and nothing more:
#   docker run -v /var/run/docker.sock:/var/run/docker.sock \
#     --group-add "$(stat -c %g /var/run/docker.sock)" ... vllm-cutover --driver docker ...
# SIGTERM stops taking requests and finishes the streams in flight (--drain-timeout,
# 30 s by default): stop it with a longer grace (docker stop -t 40, compose
# stop_grace_period). The exec-form ENTRYPOINT makes the proxy PID 1, so it gets the signal.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG OFFLINE=
ARG CA_BUNDLE=
# Dependencies first, in a layer a change of our code keeps (CA files land beside them).
COPY pyproject.toml images/install-cutover.sh .build-cert[s] /deps/
RUN python3 -m venv /opt/cutover && CERT_DIR=/deps DEPS_ONLY=1 \
    sh /deps/install-cutover.sh "/opt/cutover/bin/pip install" /deps - "[fast]"
COPY . /src
RUN sh /src/images/install-cutover.sh "/opt/cutover/bin/pip install" /src /src/.whl "[fast]"
# Marks this stage's image, left untagged after a build: `scripts/dev.sh` prunes such leftovers.
LABEL org.vllm-cutover.build-stage=build

FROM ${BASE_IMAGE}
ARG CUTOVER_UID=10001
RUN groupadd --system --gid "${CUTOVER_UID}" cutover \
 && useradd --system --uid "${CUTOVER_UID}" --gid cutover --home-dir /data \
        --no-create-home --shell /usr/sbin/nologin cutover \
 && mkdir -p /data && chown cutover:cutover /data
COPY --from=build /opt/cutover /opt/cutover
ENV PATH=/opt/cutover/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    VLLM_CUTOVER_HEALTH_URL=http://127.0.0.1:8001/admin/routes
# Records and the state file (--db /data/cutover.sqlite): mount a volume here.
WORKDIR /data
USER cutover
EXPOSE 8000 8001
# Healthy = the proxy's own admin listener answers (not the backends: an old vLLM that
# restarts must not make the sidecar unhealthy). No curl in the image: Python's urllib.
# Another admin port: set VLLM_CUTOVER_HEALTH_URL.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['VLLM_CUTOVER_HEALTH_URL'], timeout=4)"]
ENTRYPOINT ["vllm-cutover", "proxy"]
CMD ["--help"]
