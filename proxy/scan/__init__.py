"""`vllm-cutover scan`: find (and fix) deprecated vLLM FP4 settings in deployment files."""
