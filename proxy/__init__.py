"""vllm-cutover: launcher, mirroring proxy and cutover for vLLM NVFP4 upgrades."""

__version__ = "0.1.0"
