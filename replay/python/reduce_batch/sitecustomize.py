"""reduce_batch: the startup hook of `reduce record` and of a recorded command's replay (written by reduce)."""
try:
    from reduce_batch import command as _reduce_command
except Exception as _e:  # noqa: BLE001
    import sys

    sys.stderr.write("reduce: the startup hook cannot import reduce_batch (%s: %s): this process is not hooked\n"
                     % (type(_e).__name__, _e))
else:
    _reduce_command.startup(__file__)
