"""The gate: criteria, the checks and their anytime-valid statistics, and the verdict
(`proxy.gate.verdict`), pure functions of the evidence's counts and samples."""
