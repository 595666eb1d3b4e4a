"""The evidence: the record store, its aggregates (the gate's inputs read back), the
metrics the fleet gate reads, the hashing of stored texts and a cutover's window."""
