#!/bin/sh
# An NVFP4 MoE model on the vLLM 0.18.1 image, RTX PRO 6000 (compute capability 12.0),
# with its kernel workarounds: Marlin GEMM, no FlashInfer MoE, Triton MoE.
docker run --rm --gpus all -p 8000:8000 \
  -e VLLM_NVFP4_GEMM_BACKEND=marlin \
  -e VLLM_USE_FLASHINFER_MOE_FP4=0 \
  vllm/vllm-openai:v0.18.1 \
  --model /models/moe-nvfp4 --moe-backend triton
