"""Key material, with tensorizer's class and method names."""
import os


class EncryptionParams:
    """Encrypt every tensor of a file: a raw 32-byte key, or a password that
    Argon2id turns into one (its salt and limits are stored in the file)."""

    class OpsLimit:
        MIN, INTERACTIVE, MODERATE, SENSITIVE = 1, 2, 3, 4

    class MemLimit:
        MIN, INTERACTIVE, MODERATE, SENSITIVE = 8192, 64 << 20, 256 << 20, 1 << 30

    def __init__(self, key=None, *, _password=None, opslimit=None, memlimit=None, salt=None):
        if key is None and _password is None:
            raise ValueError("EncryptionParams needs a key (or use .random() / .from_string())")
        if key is not None:
            if not isinstance(key, (bytes, bytearray, memoryview)):
                raise TypeError("an encryption key is bytes, not %s" % type(key).__name__)
            key = bytes(key)
            if len(key) != 32:
                raise ValueError("an encryption key is 32 bytes, got %d" % len(key))
        if salt is not None and len(salt) != 16:
            raise ValueError("a salt is 16 bytes")
        self._key = key
        self._password = _password
        self.opslimit = int(opslimit or 0)
        self.memlimit = int(memlimit or 0)
        self.salt = bytes(salt) if salt is not None else None

    @property
    def key(self):
        """The 32-byte key: the raw one, or the one derived from the password
        and salt (derived here on first use, as the writer derives it: the
        file stores the salt and limits, and readers derive it again)."""
        if self._key is None and self._password is not None:
            import ctypes
            from ._lib import check, lib
            if self.salt is None:
                self.salt = os.urandom(16)  # the one the writer will store
            buf = ctypes.create_string_buffer(32)
            check(lib.tzr_key_derive(buf, self._password, len(self._password), self.salt,
                                     self.opslimit, self.memlimit))
            self._key = buf.raw
        return self._key

    @classmethod
    def random(cls):
        return cls(os.urandom(32))

    @classmethod
    def from_string(cls, source, opslimit=None, memlimit=None, salt=None, *, encoding="utf-8"):
        if not source:
            raise ValueError("Source cannot be empty")
        for name, v in (("opslimit", opslimit), ("memlimit", memlimit)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError("%s parameter: expected int or None; %s found" % (name, type(v).__name__))
        if isinstance(salt, str):
            salt = salt.encode(encoding)
        pw = source.encode(encoding) if isinstance(source, str) else bytes(source)
        return cls(_password=pw, opslimit=opslimit, memlimit=memlimit, salt=salt)


class DecryptionParams:
    """Key material to read an encrypted file."""

    def __init__(self):
        self._key = None
        self._password = None

    @property
    def key(self):
        return self._key

    @classmethod
    def from_key(cls, key):
        key = bytes(key)
        if len(key) != 32:
            raise ValueError("a decryption key is 32 bytes, got %d" % len(key))
        d = cls()
        d._key = key
        return d

    @classmethod
    def from_string(cls, source, encoding="utf-8"):
        d = cls()
        d._password = source.encode(encoding) if isinstance(source, str) else bytes(source)
        return d
