"""Records and what user code does with them: pure, no I/O.

`records` and `headers` define a Kafka record as handlers see it (headers kept byte-exact),
`callables` loads a processor or handler from its import path, and `record_processing` runs a
record-mode handler with its ordering and bounded concurrency inside one Spark task.
"""
