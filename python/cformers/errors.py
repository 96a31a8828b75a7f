"""Errors of the C library, raised in Python with the library's own one-line message."""


class CformersError(RuntimeError):
    """A cformers call failed; str(e) is the message `cformers` prints for the same problem."""
