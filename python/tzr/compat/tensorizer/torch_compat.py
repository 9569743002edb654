"""tensorizer.torch_compat is tzr.torch_compat (the same module object)."""
import sys

import tzr.torch_compat

sys.modules[__name__] = tzr.torch_compat
