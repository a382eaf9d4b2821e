"""TVM passes of tilelayout (installed as ``tilelayout.passes``)."""
