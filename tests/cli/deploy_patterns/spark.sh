#!/bin/bash
# DGX Spark (GB10, compute capability 12.1): FlashInfer's FP4 MoE JIT build runs out of
# memory here, so keep FlashInfer out of the MoE layers.
export VLLM_USE_FLASHINFER_MOE_FP4=0
python -m vllm.entrypoints.openai.api_server --model /models/moe-nvfp4 --port 8000
