# The tensorizer release whose API and file format this package stands in for.
__version__ = "2.11.1"
