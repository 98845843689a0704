"""reduce_batch.errors: the exceptions the runtime and the collector raise to each other."""


class HarnessError(Exception):
    """A batch could not be run at all (an unreadable file, no op, a bad --entry): a failure of
    the harness, not of the step."""


HARNESS_EXIT = 86  # replay.HarnessExitCode: a process of reduce's that could not run the batch exits so
