"""tensorizer.utils is tzr.utils (the same module object)."""
import sys

import tzr.utils

sys.modules[__name__] = tzr.utils
