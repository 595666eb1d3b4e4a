# The sidecar: `vllm-cutover proxy` in front of the old (primary) and new (shadow) vLLM.
#   pip wheel -w .whl ".[fast]" && docker build -t vllm-cutover .
# Only the wheels in .whl/ are installed (--no-index): the build needs no registry.
# See compose/ for the sidecar beside an old and a new vLLM.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
COPY .whl /wheels
RUN python3 -m venv /opt/cutover \
 && /opt/cutover/bin/pip install --no-cache-dir --no-index --find-links /wheels \
        "vllm-cutover[fast]"

FROM ${BASE_IMAGE}
COPY --from=build /opt/cutover /opt/cutover
ENV PATH=/opt/cutover/bin:$PATH
EXPOSE 8000 8001
ENTRYPOINT ["vllm-cutover", "proxy"]
CMD ["--help"]
