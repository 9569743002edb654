"""tzr: tensorizer's TensorSerializer/TensorDeserializer over libtzr.

Moving from tensorizer is an import change:
    from tzr import TensorSerializer, TensorDeserializer
    from tzr import EncryptionParams, DecryptionParams
"""
from ._lib import (CryptographyError, DeviceError, FormatError, HashMismatchError, TzrError,
                   TzrFileNotFoundError, TzrIOError, version)
from .crypt import DecryptionParams, EncryptionParams
from .serialization import TensorDeserializer, TensorSerializer, TensorType
from .shard import ShardWriter, build_manifest, load_rank

__all__ = ["TensorSerializer", "TensorDeserializer", "TensorType", "EncryptionParams", "DecryptionParams",
           "ShardWriter", "build_manifest", "load_rank", "TzrError", "HashMismatchError",
           "CryptographyError", "FormatError", "TzrIOError", "TzrFileNotFoundError", "DeviceError",
           "version"]
