"""reduce_batch.failure: the recorded failure: its class, and whether a replay's exception is that failure."""

import re

from .child import ChildFailure, exception_class
from .trust import printable

# The recorded failure --------------------------------------------------------------------------


class DifferentFailure(BaseException):
    """The minimal batch failed otherwise than recorded: a real failure, never an expected one (a
    BaseException, so that no xfail's raises= takes it for the recorded failure)."""


def failure_class(name):
    """The class of the recorded failure, the xfail's raises=: the class `name` names (a builtin's
    name or a dotted path), ChildFailure when there is none (a crash of a child process)."""
    if not name:
        return ChildFailure
    cls = exception_class(name)
    if cls is None:
        raise ImportError(f"cannot import the recorded exception class {printable(name)} (is its module on "
                          "sys.path?)")
    return cls


def mismatch(e, name, message=None, pattern=None):
    """Why exception e is not the failure fixture.json records, or None when it is: of the class
    `name` (its short name, and an instance of the class when it can be imported; None: a crash of
    the child process, a ChildFailure), with the exact `message` (which torch may follow with
    more lines, a C++ backtrace), or, without one, a text that `pattern` matches (a regular
    expression reduce computed where the message has volatile parts; searched in the exception's
    name, message and a child process's stderr). reduce's signatures decided that the failure
    reproduces; this compares what the record says, nothing more."""
    if not name:
        if not isinstance(e, ChildFailure):
            return f"raised {type(e).__name__}, not a crash of the child"
    elif type(e).__name__ != name.rpartition(".")[2]:
        return f"raised {type(e).__name__}: {e}; want {name}"
    elif not isinstance(e, exception_class(name) or BaseException):
        return f"raised {type(e)}, not a {name}"
    text = str(e)
    if message is not None and text != message and not text.startswith(message + "\n"):
        return f"message {text!r}, want {message!r}"
    full = "{} {}\n{}".format(getattr(e, "name", ""), e, getattr(e, "child_stderr", "") or "")
    full = full if len(full) <= 1 << 17 else full[:1 << 16] + "\n" + full[-(1 << 16):]  # a huge text: its ends
    if message is None and pattern and not re.search(pattern, full, re.DOTALL):
        return f"its text does not match {pattern!r}"
    return None
