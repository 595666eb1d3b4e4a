"""Regression evaluation on a fixed request set (`eval`) and the post-upgrade checklist
(`verify`): replay against golden answers, perplexity, performance, memory, the kernel used.

Named `evaluate`, not `eval`, so the package never shadows the builtin in a reader's head.
"""
