"""seqlab's version, in a leaf module so that any room can record it without importing the package root."""

__version__ = "0.1.0"
