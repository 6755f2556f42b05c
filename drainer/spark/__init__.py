"""The Spark plumbing a run needs wherever Spark runs: connector and table-format jars
(resolved from Maven), the Connect endpoint and its token, the shared session's id.

`spark_jobs.session` builds its session from these; `drainer.services` (the local development
stack) starts a Connect server with them. Imports no pyspark.
"""
