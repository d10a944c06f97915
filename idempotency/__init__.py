"""django-once: make a repeated intent safe."""

__version__ = "0.1.0"
