"""The roles of a pytest session: the process that owns a run and the processes that measure."""
