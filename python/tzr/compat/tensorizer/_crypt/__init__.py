"""tensorizer._crypt's flag that its callers test: libtzr always has libsodium."""
available = True
