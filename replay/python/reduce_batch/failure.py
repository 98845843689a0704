"""reduce_batch.failure: what a fixture's minimal batch did, as the plugin raises it once reduce judged it."""


class RecordedFailure(Exception):
    """The minimal batch failed as the fixture records (`reduce judge`): what an open fixture's
    xfail(strict=True) expects."""


class DifferentFailure(BaseException):
    """The minimal batch failed otherwise than recorded: a real failure, never an expected one (a
    BaseException, so that no xfail's raises= takes it for the recorded failure)."""
