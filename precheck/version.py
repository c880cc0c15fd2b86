"""precheck's version, in a module of its own: the package root is the library's front (it may import every
layer, ``precheck.record`` included), and the commands read the version without climbing to it."""

__version__ = "0.1.0"
