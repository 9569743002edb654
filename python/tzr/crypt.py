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
        """The raw key; None for password-based params (the library derives
        the key when it writes, with the salt it stores)."""
        return self._key

    @classmethod
    def random(cls):
        return cls(os.urandom(32))

    @classmethod
    def from_string(cls, source, opslimit=None, memlimit=None, salt=None, encoding="utf-8"):
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
