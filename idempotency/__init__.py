"""django-once: make a repeated intent safe."""

__version__ = "0.2.0"
