"""Views of structured matrices for other libraries (scipy)."""

from structmat.interop.scipy import aslinearoperator

__all__ = ["aslinearoperator"]
