"""tensorizer.serialization is tzr.serialization (the same module object)."""
import sys

import tzr.serialization

sys.modules[__name__] = tzr.serialization
