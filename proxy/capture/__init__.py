"""The first stage: what a request means and what each backend answered (SSE and JSON
bodies parsed into every field of the answer), as frozen values for the later stages."""
