"""`vllm-cutover tune`: race several candidate engines against the serving one on live
traffic, drop the losers early, and promote the fastest one that answers the same."""
