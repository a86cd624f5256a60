"""What the trusted side repeats when client-side code fails: the class of the error, and
only a built-in one, never the error's text.

A client function runs on private data, so everything it can shape is a channel: an
exception's message is text it writes, and so is its class's name (a class made at run
time can be called anything: ``type("the_secret", (Exception,), {})``). The untrusted
side reports a name; the trusted side repeats it only when it names one of Python's
built-in exception classes, and says ``an exception`` otherwise. What is left is a choice
among those ~70 names, once per run (a raise stops the run), and which call it was.
"""

from __future__ import annotations

import builtins

BUILTIN_ERRORS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


def error_class(name: object) -> str:
    """``name`` when it names a built-in exception class, else ``an exception``."""
    return name if isinstance(name, str) and name in BUILTIN_ERRORS else "an exception"
